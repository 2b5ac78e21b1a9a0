#!/usr/bin/env bash
# The wide merge kernel (merge_splits_wide_kernel, DecodeOptions::merge_wide) on the H200, from binaries built
# without a GPU. PRE: test_decode_plan, test_decode_attention and its copies broken on purpose
# (tests/gpu/break_merge.sh: test_decode_attention_broken_live, _broken_groups); build/spec_capi/libpvt_spec.so
# carried (tests/gpu/spec_capi_build.sh). The checks, the broken copies, memcheck of the merge passes, then the
# family rows with both merge kernels timed in one process (bench_families.py --capi --variants mw,mn: each
# where its plan differs from the default) and the skewed per-slot batches (bench_mixed.py --merge-wide).
# Usage: [SKIP_BROKEN=1] [SKIP_BENCH=1] [SKIP_MIXED=1] bash tests/gpu/run_merge_wide.sh PRE [bench_families.py args...]
# (logs in $OUT/logs.tgz).
set -uo pipefail
P=$1
shift
source "$(dirname "$0")/run_lib.sh"  # O, run, finish
run decode_plan 30 "$P/test_decode_plan"
run merge 150 "$P/test_decode_attention" --merge-only
run families_check 45 "$P/test_decode_attention" --families-only
if [ "${SKIP_BROKEN:-0}" = 0 ]; then
  for b in live groups; do run "broken_$b" 30 "$P/test_decode_attention_broken_$b" --merge-only; done
fi
run memcheck 170 compute-sanitizer --tool memcheck "$P/test_decode_attention" --merge-only
grep -h "ERROR SUMMARY" "$O/memcheck.log"
if [ "${SKIP_BENCH:-0}" = 0 ]; then
  run families 250 python3 tests/gpu/bench_families.py "$O/families.json" --capi --variants mw,mn "$@"
  python3 - "$O/families.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("copy", d["d2d_copy_gbs"], "GB/s;", d["date_utc"])
print("family dtype B S | plan | default us | wide forced / off us | best SDPA us | default / SDPA")
for r in d["rows"]:
    other = [(k, r[f"ours_slot_{k}_us"]) for k in ("mw", "mn") if f"ours_slot_{k}_us" in r]
    s = r.get("sdpa_best_us", float("nan"))
    print(f'{r["family"]} {r["dtype"]} {r["B"]} {r["S"]} | {r["plan_slot"]} | {r.get("ours_slot_us")} | '
          f'{" ".join(f"{k} {v} ({v / r["ours_slot_us"]:.3f})" for k, v in other)} | {s} | '
          f'{r.get("ours_slot_us", float("nan")) / s:.3f}')
PY
fi
if [ "${SKIP_MIXED:-0}" = 0 ]; then
  run mixed 200 python3 tests/gpu/bench_mixed.py "$O/mixed.json" --capi --merge-wide
  python3 - "$O/mixed.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("copy", d["d2d_copy_gbs"], "GB/s")
for r in d["rows"]:
    print(r["family"] if "family" in r else r.get("shape"), r["B"], {k: v for k, v in r.items() if k.endswith("_us") or k.startswith("pct_copy") or k.startswith("plan_ours_rule")})
PY
fi
finish

#!/usr/bin/env bash
# A change to the tensor-core block (first its leaner end: the key slices merged with per-row weights, float4;
# finish_block's partials with a row's index arithmetic; then its start: the tiles' loads before the query rows)
# on the H200. PRE: test_decode_plan, test_decode_attention and its copies broken on purpose,
# test_decode_attention_broken_NAME (tests/gpu/break_block.sh; each one found is run);
# build/spec_capi (the change) and build/spec_capi_base (the kernels before it). The checks, memcheck, then the
# family rows and the skewed batches timed with each library in its own process (two builds of the library
# cannot share one).
# Usage: [AGAIN=1] bash tests/gpu/run_block_end.sh PRE [bench_families.py args...]   (logs in $OUT/logs.tgz)
set -uo pipefail
P=$1
shift
source "$(dirname "$0")/run_lib.sh"  # O, run, finish
run decode_plan 30 "$P/test_decode_plan"
run families_check 45 "$P/test_decode_attention" --families-only
run merge 45 "$P/test_decode_attention" --merge-only
for f in "$P"/test_decode_attention_broken_*; do
  [ -x "$f" ] && run "${f##*/test_decode_attention_}" 20 "$f" --families-only
done
run memcheck 45 compute-sanitizer --tool memcheck "$P/test_decode_attention" --families-only
grep -h "ERROR SUMMARY" "$O/memcheck.log"
# AGAIN=1: the change timed once more after the base (families_again, mixed_again), for the spread between runs.
for lib in new base ${AGAIN:+again}; do
  if [ $lib = base ]; then mv build/spec_capi build/spec_capi_new && cp -r build/spec_capi_base build/spec_capi; fi
  if [ $lib = again ]; then rm -rf build/spec_capi && mv build/spec_capi_new build/spec_capi; fi
  run "families_$lib" 150 python3 tests/gpu/bench_families.py "$O/families_$lib.json" --capi "$@"
  run "mixed_$lib" 60 python3 tests/gpu/bench_mixed.py "$O/mixed_$lib.json" --capi
done
[ -d build/spec_capi_new ] && rm -rf build/spec_capi && mv build/spec_capi_new build/spec_capi
python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]
new, base = (json.load(open(f"{o}/families_{x}.json")) for x in ("new", "base"))
print("copy", new["d2d_copy_gbs"], base["d2d_copy_gbs"], "GB/s")
key = lambda r: (r["family"], r["dtype"], r["B"], r["S"], r["Tq"])
b = {key(r): r for r in base["rows"]}
print("family dtype B S Tq | plan | new us (/ SDPA) | base us (/ SDPA) | new / base")
for r in new["rows"]:
    q = b.get(key(r))
    if not q or "ours_slot_us" not in r or "ours_slot_us" not in q:
        continue
    print(*key(r), "|", r["plan_slot"], "|", r["ours_slot_us"], f'({r.get("slot_vs_best")})', "|", q["ours_slot_us"],
          f'({q.get("slot_vs_best")})', "|", round(r["ours_slot_us"] / q["ours_slot_us"], 3))
for x in ("new", "base", "again"):  # again: with AGAIN=1
    if not os.path.exists(f"{o}/mixed_{x}.json"):
        continue
    d = json.load(open(f"{o}/mixed_{x}.json"))
    print(x, [(r["family"], r["B"], r.get("ours_rule_us"), r.get("pct_copy_rule")) for r in d["rows"]])
PY
finish

#!/usr/bin/env bash
# The row-owning kernel's 5-warp instance (head_dim 64, two blocks an SM: Falcon 71/1) on the H200, from
# binaries built without a GPU into PRE (test_decode_plan, test_decode_attention, and
# test_decode_attention_broken_rows5: tests/gpu/break_mma_families.sh with ONLY=rows5) and
# build/spec_capi (tests/gpu/spec_capi_build.sh): the plan's checks, the family cases, the broken copy's
# (its 5-warp cases must fail, no other), memcheck of the family cases (cut at MEMCHECK_S, default 90);
# then Falcon's family rows with the 5- and 8-warp instances and the key-slice kernel forced beside the
# plan; StarCoder's and MQA 32/1's short rows (B 16/64, S 512/2k, fp16) with 4 and 8 warps and the key-slice
# kernel forced; the whole family table (bench_families.py --capi, extra args passed on). Logs: $OUT/logs.tgz.
# Usage: bash tests/gpu/run_rows5.sh PRE [bench_families.py args...]
set -uo pipefail
cd "$(dirname "$0")/../.."
P=$1; shift
source tests/gpu/run_lib.sh  # O, run, finish
echo "sources: tree $(bash tests/gpu/sources_digest.sh), prebuilt $(cat "$P/sources.sha256")" | tee -a "$O/machine.txt"
run decode_plan 30 "$P/test_decode_plan"
run families 90 "$P/test_decode_attention" --families-only
run broken_rows5 60 "$P/test_decode_attention_broken_rows5" --families-only
echo "broken: cases failing: $(grep -E '^FAIL' "$O/broken_rows5.log" | sed 's/^FAIL //; s/:.*//; s/\.[a-z_0-9]*$//' | sort -u | tr '\n' ' ')"
echo "== memcheck (start ${SECONDS}s)"
timeout "${MEMCHECK_S:-90}" compute-sanitizer --tool memcheck "$P/test_decode_attention" --families-only > "$O/memcheck.log" 2>&1
grep -E "ERROR SUMMARY" "$O/memcheck.log"; echo "memcheck passed $(grep -c '^PASS' "$O/memcheck.log"), failed $(grep -c '^FAIL' "$O/memcheck.log"), w5 cases passed $(grep -c '^PASS.*\(w5\|rows5\)' "$O/memcheck.log")"
run falcon 200 python3 tests/gpu/bench_families.py "$O/falcon.json" --capi --only falcon_7b --variants rw5,rw8,ks "$@"
run short_mqa 120 python3 tests/gpu/bench_families.py "$O/short.json" --capi --only starcoder,mqa32 --dtypes fp16 \
  --bs 16:512,64:512,16:2048,64:2048 --variants rw4,rw8,ks "$@"
run families_table 240 python3 tests/gpu/bench_families.py "$O/families.json" --capi "$@"
python3 - "$O" <<'PY'
import json, os, sys
o = sys.argv[1]
for f in ("falcon", "short"):
    if not os.path.exists(f"{o}/{f}.json"):
        continue
    for r in json.load(open(f"{o}/{f}.json"))["rows"]:
        v = {k[10:-3] or "plan": r[k] for k in r if k.startswith("ours_slot") and k.endswith("_us")}
        print(f.upper(), r["family"], r["dtype"], r["B"], r["S"], r["plan_slot"], "sdpa", r.get("sdpa_best_us"),
              " ".join(f"{k}={x}" for k, x in v.items()), "vs_best", r.get("slot_vs_best"))
if os.path.exists(f"{o}/families.json"):
    rs = [r for r in json.load(open(f"{o}/families.json"))["rows"] if "slot_vs_best" in r]
    print("TABLE", len(rs), "rows; per slot within 1.05x", sum(r["slot_vs_best"] <= 1.05 for r in rs), "1.10x",
          sum(r["slot_vs_best"] <= 1.10 for r in rs), "; seq", sum(r["seq_vs_best"] <= 1.05 for r in rs),
          sum(r["seq_vs_best"] <= 1.10 for r in rs))
    for r in rs:
        if r["slot_vs_best"] > 1.10 or r["seq_vs_best"] > 1.10:
            print("OVER", r["family"], r["dtype"], r["B"], r["S"], r["Tq"], r["plan_slot"], r["slot_vs_best"], r["seq_vs_best"])
PY
cp "$O"/*.json "${OUT:-/tmp/out}/" 2>/dev/null
finish

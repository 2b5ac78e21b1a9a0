#!/usr/bin/env bash
# The tensor-core softmax change (one MUFU.EX2 a score, no mask test on whole tiles), the merge kernel's step by the
# plan's splits and the row-owning kernel's one-token decode rule, on the H200, built there (16 cores): the plan's
# checks, the float16 family cases, every 8-bit case (their keys kernel shares the softmax change) and memcheck of
# the 8-bit tensor-core cases; then the family table with this tree's kernels and with BASE's (a tree holding
# custom_ops, tests/gpu and tests/native of the kernels before the change), each in its own process.
# Usage: bash tests/gpu/run_rows_rule.sh BASE [bench_families.py args...]   (logs in $OUT/logs.tgz)
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$1; shift
source tests/gpu/run_lib.sh  # O, run, finish
mkdir -p "$O/builds"
(cmake -S tests/native -B build/cuda-native -DPVT_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release -G Ninja > /dev/null &&
 cmake --build build/cuda-native --target test_decode_plan test_decode_attention test_kv_quant_cuda > "$O/builds/native.log" 2>&1
 echo "native rc=$?") &
(bash tests/gpu/spec_capi_build.sh > "$O/builds/spec_capi.log" 2>&1; echo "spec_capi rc=$?") &
(cd "$base" && bash tests/gpu/spec_capi_build.sh > "$O/builds/spec_capi_base.log" 2>&1 &&
 rm -rf "$OLDPWD/build/spec_capi_base" && cp -r build/spec_capi "$OLDPWD/build/spec_capi_base"; echo "base rc=$?") &
wait
echo "built in ${SECONDS}s"
B=build/cuda-native
run decode_plan 30 "$B/test_decode_plan"
run families_check 60 "$B/test_decode_attention" --families-only
run kv_quant 100 "$B/test_kv_quant_cuda" --no-bench
run memcheck_quant 45 compute-sanitizer --tool memcheck "$B/test_kv_quant_cuda" --tc-only
grep -h "ERROR SUMMARY" "$O/memcheck_quant.log"
run families_new 150 python3 tests/gpu/bench_families.py "$O/families_new.json" --capi "$@"
mv build/spec_capi build/spec_capi_new && cp -r build/spec_capi_base build/spec_capi
run families_base 150 python3 tests/gpu/bench_families.py "$O/families_base.json" --capi "$@"
rm -rf build/spec_capi && mv build/spec_capi_new build/spec_capi
python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
new, base = (json.load(open(f"{o}/families_{x}.json")) for x in ("new", "base"))
key = lambda r: (r["family"], r["dtype"], r["B"], r["S"], r["Tq"])
b = {key(r): r for r in base["rows"]}
for name, d in (("new", new), ("base", base)):
    rs = [r for r in d["rows"] if "slot_vs_best" in r]
    print(name, len(rs), "rows; per slot within 1.05x", sum(r["slot_vs_best"] <= 1.05 for r in rs), "1.10x",
          sum(r["slot_vs_best"] <= 1.10 for r in rs), "; seq", sum(r["seq_vs_best"] <= 1.05 for r in rs),
          sum(r["seq_vs_best"] <= 1.10 for r in rs))
for r in new["rows"]:
    q = b.get(key(r))
    if q and abs(r["ours_slot_us"] / q["ours_slot_us"] - 1) > 0.03:
        print(*key(r), r["plan_slot"], "|", q["plan_slot"], "|", r["ours_slot_us"], r["slot_vs_best"], "|", q["ours_slot_us"],
              q["slot_vs_best"], "|", round(r["ours_slot_us"] / q["ours_slot_us"], 3))
PY
finish

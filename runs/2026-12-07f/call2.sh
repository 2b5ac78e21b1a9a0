#!/usr/bin/env bash
# Second device call (2026-12-07, H100): choose_mma_warps's bound at 192 keys a split (call.sh's 129 left per-slot
# S = 512 rows, 576 keys over 4 splits, on 8 warps), from build/carry/pre16 (main's tree at that commit).
set -uo pipefail
P=build/carry/pre16; R=$OUT
OUT=$R/c bash tests/gpu/run_warp_keys.sh $P   # test_decode_plan, --families-only, memcheck
mkdir -p build/spec_capi && cp $P/libpvt_spec.so build/spec_capi/libpvt_spec.so
echo "== table all $SECONDS"
timeout 200 python3 tests/gpu/bench_families.py $R/all.json --capi > $R/all.log 2>&1; echo "rc=$? $SECONDS"
timeout 120 python3 tests/gpu/bench_families.py $R/w8.json --capi --only llama3_8b,llama3_70b,qwen2_7b,mqa32,starcoder \
  --dtypes fp16 --bs 1:512,4:512,16:512 --variants w8 > $R/w8.log 2>&1; echo "rc=$? $SECONDS"
python3 - "$R" <<'PY'
import json, sys
o = sys.argv[1]
v = [r for r in json.load(open(f"{o}/all.json"))["rows"] if "slot_vs_best" in r]
print("TABLE all", len(v), "rows; per slot within 1.05x", sum(r["slot_vs_best"] <= 1.05 for r in v), "1.10x",
      sum(r["slot_vs_best"] <= 1.10 for r in v), "; seq", sum(r["seq_vs_best"] <= 1.05 for r in v),
      sum(r["seq_vs_best"] <= 1.10 for r in v))
for r in v:
    if r["slot_vs_best"] > 1.10:
        print("OVER", r["family"], r["dtype"], r["B"], r["S"], r["Tq"], r["plan_slot"], r["slot_vs_best"], r["seq_vs_best"])
for r in json.load(open(f"{o}/w8.json"))["rows"]:
    print("VAR", r["family"], r["B"], r["S"], r["plan_slot"], r["ours_slot_us"], "| w8", r.get("ours_slot_w8_us"),
          r.get("plan_slot_w8"), "| sdpa", r["sdpa_best_us"])
PY
gzip -f $R/*.log

#!/usr/bin/env bash
# Fourth device call (2026-12-07, H100): fill_cluster bounded by bytes (head_dim 256: 1152 keys) on top of call2.sh's
# rules, from build/carry/pre17 (main's tree at that commit); Gemma's S = 2k rows with the old plan (_s8: 8 splits, a
# cluster) and 32 splits (_s32) in the same process.
set -uo pipefail
P=build/carry/pre17; R=$OUT
OUT=$R/c bash tests/gpu/run_warp_keys.sh $P   # test_decode_plan, --families-only, memcheck
mkdir -p build/spec_capi && cp $P/libpvt_spec.so build/spec_capi/libpvt_spec.so
echo "== table all $SECONDS"
timeout 200 python3 tests/gpu/bench_families.py $R/all.json --capi > $R/all.log 2>&1; echo "rc=$? $SECONDS"
timeout 100 python3 tests/gpu/bench_families.py $R/gemma.json --capi --only gemma --dtypes fp16,bf16 --bs 1:2048,4:2048,16:2048 \
  --variants s8,s32 > $R/gemma.log 2>&1; echo "rc=$? $SECONDS"
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
for r in json.load(open(f"{o}/gemma.json"))["rows"]:
    var = " | ".join(f"{n} {r[f'ours_slot{n}_us']} [{r.get(f'plan_slot{n}')}]" for n in ("_s8", "_s32") if f"ours_slot{n}_us" in r)
    print("VAR", r["family"], r["dtype"], r["B"], r["S"], r["plan_slot"], r["ours_slot_us"], "|", var, "| sdpa", r["sdpa_best_us"])
PY
gzip -f $R/*.log

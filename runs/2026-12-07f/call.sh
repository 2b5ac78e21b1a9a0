#!/usr/bin/env bash
# One device call (2026-12-07, H100): the 4-warp rule for splits of one 8-warp tile or less and pv_tiles (SASS
# unchanged) checked and timed, from binaries built without a GPU into build/carry/pre15 (main's tree + this change).
set -uo pipefail
P=build/carry/pre15; R=$OUT
OUT=$R/c bash tests/gpu/run_warp_keys.sh $P   # test_decode_plan, --families-only, broken warpkeys copy, memcheck
timeout 120 $P/test_decode_attention_broken_rows --families-only > $R/broken_rows.log 2>&1
echo "broken rows: rc=$? passed $(grep -c ^PASS $R/broken_rows.log) failed $(grep -c ^FAIL $R/broken_rows.log)"
echo "broken rows: failing cases: $(grep ^FAIL $R/broken_rows.log | sed 's/^FAIL //; s/:.*//; s/\.[a-z_0-9]*$//' | sort -u | tr '\n' ' ')"
mkdir -p build/spec_capi && cp $P/libpvt_spec.so build/spec_capi/libpvt_spec.so
echo "== table all $SECONDS"
timeout 200 python3 tests/gpu/bench_families.py $R/all.json --capi > $R/all.log 2>&1; echo "rc=$? $SECONDS"
timeout 170 python3 tests/gpu/bench_families.py $R/w8.json --capi --only llama3_8b,llama3_70b,qwen2_7b,gemma,mqa32,starcoder \
  --dtypes fp16 --bs 1:512,4:512,16:512,1:2048,4:2048 --variants w8,s4,s8 > $R/w8.log 2>&1; echo "rc=$? $SECONDS"
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
    var = " | ".join(f"{n} {r[f'ours_slot{n}_us']} {r.get(f'plan_slot{n}')}" for n in ("_w8", "_s4", "_s8")
                     if f"ours_slot{n}_us" in r)
    print("VAR", r["family"], r["B"], r["S"], r["plan_slot"], r["ours_slot_us"], "|", var, "| sdpa", r["sdpa_best_us"])
PY
gzip -f $R/*.log

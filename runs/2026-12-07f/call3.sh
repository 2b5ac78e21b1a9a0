#!/usr/bin/env bash
# Third device call (2026-12-07, H100): more splits than a cluster holds on the short B = 1 and 4 rows still over 1.10x
# (S = 2k: 8 splits in a cluster), main's kernels at build/carry/pre16; variants timed where their plan differs.
set -uo pipefail
P=build/carry/pre16; R=$OUT
tar -xJf $P/bins.tar.xz -C $P && mkdir -p build/spec_capi && cp $P/libpvt_spec.so build/spec_capi/libpvt_spec.so
timeout 300 python3 tests/gpu/bench_families.py $R/splits.json --capi --only mqa32,starcoder,gemma,qwen2_7b,llama3_8b,llama3_70b,falcon_7b \
  --dtypes fp16 --bs 1:2048,4:2048,1:8192 --variants s16,s16mw,w4s16,s32,w4s32,w4rt2s16 > $R/splits.log 2>&1; echo "rc=$? $SECONDS"
python3 - "$R" <<'PY'
import json, sys
for r in json.load(open(f"{sys.argv[1]}/splits.json"))["rows"]:
    var = " | ".join(f"{n} {r[f'ours_slot{n}_us']} [{r.get(f'plan_slot{n}')}]" for n in ("_s16", "_s16mw", "_w4s16", "_s32", "_w4s32", "_w4rt2s16")
                     if f"ours_slot{n}_us" in r)
    print("VAR", r["family"], r["B"], r["S"], r["plan_slot"], r["ours_slot_us"], "|", var, "| sdpa", r["sdpa_best_us"])
PY
gzip -f $R/*.log

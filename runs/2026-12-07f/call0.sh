#!/usr/bin/env bash
# First device call (2026-12-07 16:26 UTC, H100), as it ran inline: the checks of main's binaries (build/carry/pre14:
# test_decode_plan, test_decode_attention, libpvt_spec.so of 96fa893's kernels and plan), the whole family table with
# the MHA rule, and 4 warps forced (_w4) on the short rows of the GQA and MQA families. (Its summary printed
# plan_slot_w4 before the time; the w4.json fields are the record.)
P=build/carry/pre14; R=$OUT; OUT=$R/c bash tests/gpu/run_warp_keys.sh $P
mkdir -p build/spec_capi; cp $P/libpvt_spec.so build/spec_capi/libpvt_spec.so
timeout 200 python3 tests/gpu/bench_families.py $R/all.json --capi > $R/all.log 2>&1
timeout 140 python3 tests/gpu/bench_families.py $R/w4.json --capi --only llama3_8b,llama3_70b,qwen2_7b,gemma,mqa32,starcoder,falcon_7b \
  --dtypes fp16 --bs 1:512,4:512,16:512,64:512,1:2048,4:2048,16:2048 --variants w4 > $R/w4.log 2>&1
gzip $R/*.log

#!/usr/bin/env bash
# The 8-bit tensor-core kernel on the H200 from binaries built without a GPU (PRE: test_kv_quant_cuda,
# test_kv_quant_cuda_broken = a copy broken on purpose, test_decode_plan): the checks, the broken copy,
# memcheck of the tensor-core cases, the split-count sweep at B = 1, the bench, the bench at B = 1 with the
# merge's 16 splits a round trip forced (merge_chunk_of: 32 past 16), and cuDNN on the float16 caches (its own
# process). Usage: bash tests/gpu/run_quant_merge.sh PRE (logs in $OUT/logs.tgz).
set -uo pipefail
P=$1
source "$(dirname "$0")/run_lib.sh"  # O, run, finish
run decode_plan 30 "$P/test_decode_plan"
run kv_quant 150 "$P/test_kv_quant_cuda" --no-bench
run kv_quant_broken 40 "$P/test_kv_quant_cuda_broken" --tc-only
run memcheck 70 compute-sanitizer --tool memcheck "$P/test_kv_quant_cuda" --tc-only
run sweep_b1 40 "$P/test_kv_quant_cuda" --sweep --batch 1
run bench 90 "$P/test_kv_quant_cuda" --bench-only
run bench_b1_merge16 40 "$P/test_kv_quant_cuda" --bench-only --batch 1 --merge-chunk 16
run cudnn 80 python3 tests/gpu/bench_quant_cudnn.py
grep -h "^SWEEP\|^BENCH\|^CUDNN" "$O"/sweep_b1.log "$O"/bench.log "$O"/bench_b1_merge16.log "$O"/cudnn.log | cut -c1-200
finish

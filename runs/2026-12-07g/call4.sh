#!/usr/bin/env bash
# Device call 4 (2026-12-07 evening): branch cursor at 522dd43 (the copy cursor + int8 in 8-warp blocks at head_dim
# 128) against main 5ba93e7, then cuDNN on the float16 cache of the same shapes, then the checks of the new build.
# build/carry/q20/bins.tar.xz: test_kv_quant_cuda (522dd43), test_kv_quant_cuda_base (5ba93e7).
set -uo pipefail
P=build/carry/q20
tar -xJf $P/bins.tar.xz -C $P
source tests/gpu/run_lib.sh
run bench_base 100 $P/test_kv_quant_cuda_base --bench-only
run bench_new 100 $P/test_kv_quant_cuda --bench-only
run bench_base2 100 $P/test_kv_quant_cuda_base --bench-only
run cudnn 120 python3 tests/gpu/bench_quant_cudnn.py
for f in "$O"/bench_*.log; do echo "## $(basename "$f")"; grep "^BENCH llama" "$f" | awk '{print $2,$3,$4,$5,$6,$7}'; done
grep -h "^CUDNN" "$O"/cudnn.log
run kv_quant 200 $P/test_kv_quant_cuda --no-bench
run memcheck 100 compute-sanitizer --tool memcheck $P/test_kv_quant_cuda --tc-only
finish

#!/usr/bin/env bash
# The 8-bit kernels re-timed against cuDNN on the float16 cache (issue 28, point 4) and the GPU slot-sharing
# checks, from binaries built without a GPU into PRE (test_kv_quant_cuda, test_slot_share_cuda): the shared-row
# checks, test_kv_quant_cuda --bench-only, bench_quant_cudnn.py, then each BENCH row's speed over cuDNN's.
# Usage: bash tests/gpu/run_quant_retime.sh PRE. Logs: $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
P=$1
source tests/gpu/run_lib.sh  # O, run, finish
run slot_share 60 "$P/test_slot_share_cuda"
run bench 150 "$P/test_kv_quant_cuda" --bench-only
run cudnn 100 python3 tests/gpu/bench_quant_cudnn.py
grep -h "^BENCH\|^CUDNN" "$O/bench.log" "$O/cudnn.log" | head -80
finish

#!/usr/bin/env bash
# Device call 5 (2026-12-07 evening): split-count sweeps of the final build (522dd43, build/carry/q20) at B = 1 and 8,
# the plan's block shapes (fp8 4 warps of 32 keys, int8 8 warps of 16): is the plan's count the best for 8-warp int8?
set -uo pipefail
P=build/carry/q20
tar -xJf $P/bins.tar.xz -C $P
source tests/gpu/run_lib.sh
run sweep_b1 150 $P/test_kv_quant_cuda --sweep --batch 1
run sweep_b8 150 $P/test_kv_quant_cuda --sweep --batch 8
grep -h "^SWEEP" "$O"/sweep*.log
finish

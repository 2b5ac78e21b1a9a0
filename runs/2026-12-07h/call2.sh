#!/usr/bin/env bash
# Device call 2 (2026-12-07 night): branch prefetch with one split for 4+ waves (kManyWaves; build/carry/q32): the
# bench at B = 1 / 8 / 32 with the plan's prefetch, B = 1 also with --prefetch 2 / 3 / -1 and int8 in 4 warps of
# 32 keys; cuDNN in the same call; the split sweep at B = 1 with the prefetch; the checks.
set -uo pipefail
P=build/carry/q32
tar -xJf $P/bins.tar.xz -C $P
source tests/gpu/run_lib.sh
B=$P/test_kv_quant_cuda
run b1_plan 100 $B --bench-only --batch 1
run b1_p2 100 $B --bench-only --batch 1 --prefetch 2
run b1_p3 100 $B --bench-only --batch 1 --prefetch 3
run b1_none 100 $B --bench-only --batch 1 --prefetch -1
run b1_k32 100 $B --bench-only --batch 1 --warp-keys 32
run b1_plan2 100 $B --bench-only --batch 1
run b8_plan 100 $B --bench-only --batch 8
run b32_plan 100 $B --bench-only --batch 32
run cudnn 100 python3 tests/gpu/bench_quant_cudnn.py
for f in "$O"/b*.log; do echo "## $(basename "$f")"; grep "^BENCH llama" "$f" | awk '{print $2,$3,$4,$5,$6,$7}'; done
grep -h "^CUDNN" "$O"/cudnn.log
run sweep_b1 100 $B --sweep --batch 1
grep -h "^SWEEP" "$O"/sweep*.log | cut -c1-220
run kv_quant 150 $B --no-bench
finish

#!/usr/bin/env bash
# Device call 3 (2026-12-07 night): the 8-warp 8-bit blocks (int8's plan at head_dim 128, one block an SM) with 3
# (as before), 4, 5 or 6 stages of tiles (PVT_Q8_EIGHT_WARP_STAGES; build/carry/q33, branch prefetch with the
# prefetch and kManyWaves): the bench at B = 1 / 8 / 32, cuDNN in the same call, the tensor-core cases of each.
set -uo pipefail
P=build/carry/q33
tar -xJf $P/bins.tar.xz -C $P
source tests/gpu/run_lib.sh
for s in 3 4 5 6 3; do
  for b in 1 8 32; do run s${s}_b${b}_$SECONDS 100 $P/test_kv_quant_cuda_s$s --bench-only --batch $b; done
done
run cudnn 100 python3 tests/gpu/bench_quant_cudnn.py
for f in "$O"/s*.log; do echo "## $(basename "$f")"; grep "^BENCH llama" "$f" | awk '{print $2,$3,$4,$5,$6,$7}'; done
grep -h "^CUDNN" "$O"/cudnn.log
for s in 4 5 6; do run tc_s$s 100 $P/test_kv_quant_cuda_s$s --tc-only; done
finish

#!/usr/bin/env bash
# Device call 2 (2026-12-07 evening): what bounds int8 at B >= 8 once its loop holds 15 % fewer instructions
# (call 1: no time change). The cursor build (test_kv_quant_cuda) with 32 keys a warp, with 8 warps, with the
# int8 scales of a head's tokens together (--scale-tokens-inner), and base with 32 keys a warp; --batch 8 and 32.
set -uo pipefail
P=build/carry/q18
tar -xJf $P/bins.tar.xz -C $P
source tests/gpu/run_lib.sh
for b in 8 32; do
  run new_b$b 80 $P/test_kv_quant_cuda --bench-only --batch $b
  run new_k32_b$b 80 $P/test_kv_quant_cuda --bench-only --batch $b --warp-keys 32
  run base_k32_b$b 80 $P/test_kv_quant_cuda_base --bench-only --batch $b --warp-keys 32
  run new_w8_b$b 80 $P/test_kv_quant_cuda --bench-only --batch $b --warps 8
  run new_inner_b$b 80 $P/test_kv_quant_cuda --bench-only --batch $b --scale-tokens-inner
done
for f in "$O"/*.log; do echo "## $(basename "$f")"; grep "^BENCH llama" "$f" | awk '{print $2,$3,$4,$5,$6,$7}'; done
finish

#!/usr/bin/env bash
# Device call 1 (2026-12-07 night): the L2 prefetch of a split's first tiles before the wait for the kernel ahead
# (branch prefetch, build/carry/q31), 8-bit kernels and our float16 key-slice kernel: --prefetch -1 (none: the
# kernels before) against the plan's (4 tiles) and forced 8 / 16, B = 1 / 8 / 32 (bench-only: fp16, fp8, int8
# columns); a split sweep of int8 MHA B = 32 (do shorter splits keep the heads that share a scale sector
# together?); a probe of prefetch on unmapped memory; cuDNN in the same call; then the checks.
set -uo pipefail
P=build/carry/q31
tar -xJf $P/bins.tar.xz -C $P
source tests/gpu/run_lib.sh
B=$P/test_kv_quant_cuda
run b1_none 100 $B --bench-only --batch 1 --prefetch -1
run b1_plan 100 $B --bench-only --batch 1
run b1_p8 100 $B --bench-only --batch 1 --prefetch 8
run b1_p16 100 $B --bench-only --batch 1 --prefetch 16
run b1_none2 100 $B --bench-only --batch 1 --prefetch -1
run b8_none 100 $B --bench-only --batch 8 --prefetch -1
run b8_plan 100 $B --bench-only --batch 8
run b32_none 100 $B --bench-only --batch 32 --prefetch -1
run b32_plan 100 $B --bench-only --batch 32
run cudnn 100 python3 tests/gpu/bench_quant_cudnn.py
for f in "$O"/b*.log; do echo "## $(basename "$f")"; grep "^BENCH llama" "$f" | awk '{print $2,$3,$4,$5,$6,$7}'; done
grep -h "^CUDNN" "$O"/cudnn.log
for m in 0 1 2 3; do run probe_$m 20 $P/prefetch_unmapped $m; cat "$O/probe_$m.log"; done
run sweep_b32_mha 150 $B --sweep --batch 32 --model 32,32,128
grep -h "^SWEEP" "$O"/sweep*.log | cut -c1-220
run kv_quant 150 $B --no-bench
run decode 60 $P/test_decode_attention --no-bench
finish

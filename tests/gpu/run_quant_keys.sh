#!/usr/bin/env bash
# The 8-bit kernel with the keys on the MMA's M side (mma_keys_kernel) against the query-heads-on-M kernel,
# on the H200, from binaries built without a GPU (PRE: test_kv_quant_cuda, test_kv_quant_cuda_broken = a copy
# broken on purpose in mma_keys_kernel, test_decode_plan). Usage: bash tests/gpu/run_quant_keys.sh PRE [STEPS]
# STEPS (default "checks bench"): checks = the plan, every case, the broken copy, memcheck of the tensor-core
# cases; bench = the bench with the plan's kernel (the keys on M for these groups), then with the query heads on
# M forced; models = the same two on Qwen2-7B (28/4, a group of 7) and on head_dim 64 (32/8, 32/32); shapes = the
# keys on M with 16 and with 32 keys a warp forced; cudnn = cuDNN on the float16 caches (its own process);
# loops = the torch extension built here, the 8-bit loop accuracy (256 greedy steps) and the Llama-shaped loop's
# fp8 and int8 rows. Logs: $OUT/logs.tgz.
set -uo pipefail
P=$1
STEPS=${2:-checks bench}
source "$(dirname "$0")/run_lib.sh"  # O, run, finish
for step in $STEPS; do
  case $step in
    checks)
      run decode_plan 20 "$P/test_decode_plan"
      run kv_quant 150 "$P/test_kv_quant_cuda" --no-bench
      run kv_quant_broken 60 "$P/test_kv_quant_cuda_broken" --tc-only
      run memcheck 60 compute-sanitizer --tool memcheck "$P/test_kv_quant_cuda" --tc-only ;;
    bench)
      run bench_plan 100 "$P/test_kv_quant_cuda" --bench-only
      run bench_heads 100 "$P/test_kv_quant_cuda" --bench-only --keys-on-m -1 ;;
    models)
      for m in 28,4,128 32,8,64 32,32,64; do
        run "bench_plan_${m//,/_}" 100 "$P/test_kv_quant_cuda" --bench-only --model "$m"
        run "bench_heads_${m//,/_}" 100 "$P/test_kv_quant_cuda" --bench-only --model "$m" --keys-on-m -1
      done ;;
    shapes)
      run bench_keys_k16 100 "$P/test_kv_quant_cuda" --bench-only --keys-on-m 1 --warp-keys 16
      run bench_keys_k32 100 "$P/test_kv_quant_cuda" --bench-only --keys-on-m 1 --warp-keys 32 ;;
    cudnn)
      run cudnn 80 python3 tests/gpu/bench_quant_cudnn.py ;;
    loops)
      export MAX_JOBS=16 PADDLE_VTENSOR_TORCH_BUILD=${PADDLE_VTENSOR_TORCH_BUILD:-/tmp/pvt_torch}
      run ext_build 330 python3 tests/gpu/build.py
      run acc 120 python3 tests/gpu/quant_loop_accuracy.py "$O/acc_kv8.json" --kv-heads 8
      for dt in float8_e4m3fn int8; do
        run "loop_$dt" 60 python3 tests/gpu/llama_loop.py "$O/loop_$dt.json" --kv-heads 8 --quick --only 8,4096 --cache-dtype $dt
      done ;;
  esac
done
grep -h "^BENCH\|^CUDNN" "$O"/bench*.log "$O"/cudnn.log 2>/dev/null | cut -c1-200
finish

#!/usr/bin/env bash
# The 8-bit kernel with the keys on the MMA's M side (mma_keys_kernel) against the query-heads-on-M kernel,
# on the H200, from binaries built without a GPU (PRE: test_kv_quant_cuda, test_kv_quant_cuda_broken = a copy
# broken on purpose in mma_keys_kernel, test_decode_plan). Usage: bash tests/gpu/run_quant_keys.sh PRE [STEPS]
# STEPS (default "checks bench"): checks = the plan, every case, the broken copy, memcheck of the tensor-core
# cases; bench = the bench with the plan's kernel (the keys on M for these groups), then with the query heads on
# M forced; models = the same two on Qwen2-7B (28/4, a group of 7) and on head_dim 64 (32/8, 32/32); shapes = the
# keys on M with 16 and with 32 keys a warp forced; cudnn = cuDNN on the float16 caches (its own process);
# loops = the torch extension built here, the 8-bit loop accuracy (256 greedy steps) and the Llama-shaped loop's
# fp8 and int8 rows; floor = tests/gpu/floor_read (PRE/floor_read: the bare read of each B = 1 row's bytes, a
# graph's own launch); iters = the B = 1 bench and cuDNN's B = 1 rows with 8 and with 64 calls a graph; bench64 =
# the bench and cuDNN with at least 64 calls a graph; scales = the bench with int8's scales in head-major order
# (--scale-tokens-inner); ncu = Nsight Compute's throughput, memory, compute, instruction, warp-state and occupancy
# sections of the keys kernel's --profile calls. Logs: $OUT/logs.tgz.
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
    floor)
      run floor 60 "$P/floor_read" ;;
    iters)
      for n in 8 64; do
        run "bench_b1_iters$n" 60 "$P/test_kv_quant_cuda" --bench-only --batch 1 --min-iters $n
        run "cudnn_b1_iters$n" 60 python3 tests/gpu/bench_quant_cudnn.py --batch 1 --min-iters $n
      done
      ;;
    bench64)
      run bench_plan_iters64 200 "$P/test_kv_quant_cuda" --bench-only --min-iters 64
      run cudnn_iters64 150 python3 tests/gpu/bench_quant_cudnn.py --min-iters 64 ;;
    scales)
      run bench_scales_inner 200 "$P/test_kv_quant_cuda" --bench-only --min-iters 64 --scale-tokens-inner ;;
    ncu)
      run ncu_full 150 ncu --clock-control none --kernel-name regex:mma_keys_kernel --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section Occupancy \
        "$P/test_kv_quant_cuda" --profile ;;
    loops)
      export MAX_JOBS=16 PADDLE_VTENSOR_TORCH_BUILD=${PADDLE_VTENSOR_TORCH_BUILD:-/tmp/pvt_torch}
      run ext_build 330 python3 tests/gpu/build.py
      run acc 120 python3 tests/gpu/quant_loop_accuracy.py "$O/acc_kv8.json" --kv-heads 8
      for dt in float8_e4m3fn int8; do
        run "loop_$dt" 60 python3 tests/gpu/llama_loop.py "$O/loop_$dt.json" --kv-heads 8 --quick --only 8,4096 --cache-dtype $dt
      done ;;
  esac
done
grep -h "^BENCH\|^CUDNN\|^FLOOR\|^PAIR\|^EMPTY\|^GRAPH\|^SWEEP" "$O"/bench*.log "$O"/cudnn*.log "$O"/floor.log "$O"/sweep*.log 2>/dev/null | cut -c1-220
finish

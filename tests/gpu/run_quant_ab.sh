#!/usr/bin/env bash
# An 8-bit kernel change against the kernels before it, on the H200, from binaries built without a GPU into PRE:
# test_kv_quant_cuda (the change), test_kv_quant_cuda_base (before it), test_kv_quant_cuda_broken (the change
# broken on purpose), and optionally test_kv_quant_cuda_<variant> for each name in VARIANTS. Usage: bash
# tests/gpu/run_quant_ab.sh PRE [STEPS]; STEPS (default "checks bench cudnn"): checks = every case of the change,
# the broken copy's tensor-core cases, memcheck of the change's tensor-core cases; bench = --bench-only of base,
# the change, each variant, base again (drift), in that order, one process each; cudnn = bench_quant_cudnn.py;
# k32 = the change's bench with 32 keys a warp forced; vchecks = each variant's tensor-core cases; sweep = the change's split sweep at B = 1 with 16 keys a warp and with 8 warps; sass = the keys kernels' SASS of the change and of base (cuobjdump);
# new = --bench-only of the change alone (no base: a re-timing, with cudnn after it); share = test_slot_share_cuda (the GPU
# slot ops over shared rows). Logs: $OUT/logs.tgz.
set -uo pipefail
P=$1
STEPS=${2:-checks bench cudnn}
source "$(dirname "$0")/run_lib.sh"  # O, run, finish
for step in $STEPS; do
  case $step in
    checks)
      run kv_quant 150 "$P/test_kv_quant_cuda" --no-bench
      run kv_quant_broken 90 "$P/test_kv_quant_cuda_broken" --tc-only
      run memcheck 90 compute-sanitizer --tool memcheck "$P/test_kv_quant_cuda" --tc-only ;;
    bench)
      run bench_base 100 "$P/test_kv_quant_cuda_base" --bench-only
      run bench_new 100 "$P/test_kv_quant_cuda" --bench-only
      for v in ${VARIANTS:-}; do run "bench_$v" 100 "$P/test_kv_quant_cuda_$v" --bench-only ${VARIANT_ARGS:-}; done
      run bench_base2 100 "$P/test_kv_quant_cuda_base" --bench-only ;;
    k32)  # the change with 32 keys a warp forced (int8 too, whose plan takes 16 at B >= 8)
      run bench_new_k32 100 "$P/test_kv_quant_cuda" --bench-only --warp-keys 32 ;;
    vchecks)  # each variant's tensor-core cases
      for v in ${VARIANTS:-}; do run "kv_quant_$v" 90 "$P/test_kv_quant_cuda_$v" --tc-only; done ;;
    sweep)  # the change's split sweep at B = 1 with 16 keys a warp (50 KB a block: 4 an SM) and with 8 warps
      run sweep_b1_k16 100 "$P/test_kv_quant_cuda" --sweep --batch 1 --warp-keys 16
      run sweep_b1_w8 100 "$P/test_kv_quant_cuda" --sweep --batch 1 --warps 8 ;;
    new)
      run bench_new 150 "$P/test_kv_quant_cuda" --bench-only ;;
    share)
      run slot_share 60 "$P/test_slot_share_cuda" ;;
    cudnn)
      run cudnn 80 python3 tests/gpu/bench_quant_cudnn.py ;;
    sass)
      for b in test_kv_quant_cuda test_kv_quant_cuda_base; do
        cuobjdump -sass "$P/$b" 2>&1 | awk '/Function : .*mma_keys_kernel/{on=1} /Function : / && !/mma_keys_kernel/{on=0} on' > "$O/sass_$b.txt"
        echo "sass $b: $(wc -l < "$O/sass_$b.txt") lines"
      done ;;
  esac
done
for f in "$O"/bench_*.log; do echo "## $(basename "$f")"; grep "^BENCH llama" "$f" | awk '{print $2,$3,$4,$5,$6,$7}'; done
grep -h "^CUDNN" "$O"/cudnn.log 2>/dev/null
grep -h "^SWEEP" "$O"/sweep*.log 2>/dev/null | cut -c1-200
finish

#!/usr/bin/env bash
# The native binaries tests/gpu/run_quant_keys.sh and run_quant_merge.sh take, built here with nvcc for sm_90 (no
# device time on compiling): test_decode_plan, test_kv_quant_cuda and test_kv_quant_cuda_broken, a copy of the
# sources with the keys-on-M kernel broken on purpose (P's second 8x8 block, keys g + 8 of each m16 tile, built
# from the scores of keys g: every keys-on-M case with keys 8-15 in a tile must fail, no other), into OUT_DIR.
# Usage (repository root): bash tests/gpu/prebuild_quant.sh OUT_DIR [cmake args...] (where this machine has no
# libcuda: -DPVT_CUDA_DRIVER=STUB, a stub libcuda.so whose soname is libcuda.so.1, to link against)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1; shift
mkdir -p "$out"
cmake -S tests/native -B build/cuda-native -DPVT_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release -G Ninja "$@" > /dev/null
cmake --build build/cuda-native -j"$(nproc)" --target test_decode_plan test_kv_quant_cuda
source tests/gpu/broken_copy_lib.sh  # copy_sources, edit_once, build_copy
build=build/cuda-broken-quant-keys
copy_sources "$build"
edit_once "$build/src/custom_ops/kernels/kv_quant_attention_mma_keys_cuda.cuh" \
  'pack2<T>(s[mk][2] * pf[mk][1], s[mk][3] * pf[mk][1])' 'pack2<T>(s[mk][0] * pf[mk][1], s[mk][1] * pf[mk][1])'
build_copy "$build" test_kv_quant_cuda -DCMAKE_BUILD_TYPE=Release "$@"
cp build/cuda-native/test_decode_plan build/cuda-native/test_kv_quant_cuda "$out/"
cp "$build/test_kv_quant_cuda" "$out/test_kv_quant_cuda_broken"
strip "$out"/test_kv_quant_cuda*
echo "prebuilt in $out"

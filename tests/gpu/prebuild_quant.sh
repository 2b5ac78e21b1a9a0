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
cmake --build build/cuda-native -j2 --target test_decode_plan test_kv_quant_cuda
build=build/cuda-broken-quant-keys
src=$build/src
rm -rf "$src" && mkdir -p "$src/tests" && cp -r custom_ops "$src/" && cp -r tests/native "$src/tests/"
f=$src/custom_ops/kernels/kv_quant_attention_mma_keys_cuda.cuh
from='pack2<T>(s[mk][2] * pf[mk][1], s[mk][3] * pf[mk][1])'
[ "$(grep -cF -- "$from" "$f")" = 1 ] || { echo "prebuild_quant: the line to break is not there once" >&2; exit 1; }
FROM=$from TO='pack2<T>(s[mk][0] * pf[mk][1], s[mk][1] * pf[mk][1])' python3 -c \
  'import os, sys; p = sys.argv[1]; s = open(p).read(); open(p, "w").write(s.replace(os.environ["FROM"], os.environ["TO"]))' "$f"
cmake -S "$src/tests/native" -B "$build" -DPVT_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release -G Ninja "$@" > "$build.cmake.log"
cmake --build "$build" --target test_kv_quant_cuda >> "$build.cmake.log"
cp build/cuda-native/test_decode_plan build/cuda-native/test_kv_quant_cuda "$out/"
cp "$build/test_kv_quant_cuda" "$out/test_kv_quant_cuda_broken"
strip "$out"/test_kv_quant_cuda*
echo "prebuilt in $out"

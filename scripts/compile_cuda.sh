#!/usr/bin/env bash
# Compile every CUDA source (the CUDA backend, the kernels, the GPU tests and benchmarks of the native
# harness) with the flags the H200 build uses. Compile only: CI has nvcc but neither a GPU nor libcuda
# to link against. Running them is the H200's job (docs/H200_HARNESS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/cuda-compile
mkdir -p "$out"
CUDA_INC=$(dirname "$(dirname "$(command -v nvcc)")")/include
[ -f "$CUDA_INC/cuda.h" ] || CUDA_INC=/usr/local/cuda/include
n=0
for src in custom_ops/core/*.cc; do
  g++ -std=c++17 -Wall -Wextra -Werror -DPADDLE_VTENSOR_WITH_CUDA -I"$CUDA_INC" -Icustom_ops -c "$src" -o "$out/$(basename "$src").o"
  n=$((n + 1))
done
for src in custom_ops/kernels/*.cu tests/native/*.cu; do
  nvcc -std=c++17 -O2 -arch=sm_90 -DPADDLE_VTENSOR_WITH_CUDA -Icustom_ops -Itests/native \
    -Xcompiler=-Wall,-Wextra -c "$src" -o "$out/$(basename "$src").o"
  n=$((n + 1))
done
echo "compiled $n sources with CUDA enabled (sm_90)"

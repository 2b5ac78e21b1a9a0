#!/usr/bin/env bash
# Builds tests/gpu/spec_capi.cu with the core and every kernel into build/spec_capi/libpvt_spec.so for
# spec_loop.py (through pvt_capi.py). Needs nvcc only, no GPU and no PyTorch: built on a CPU machine and
# carried to the GPU one. libcuda is not linked: pvt_capi.py loads libcuda.so.1 globally first, and the
# CUDA runtime is linked statically (nvcc's default).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/spec_capi
mkdir -p "$out"
nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -DPADDLE_VTENSOR_WITH_CUDA -Icustom_ops -Xcompiler -fPIC \
  -shared -o "$out/libpvt_spec.so" tests/gpu/spec_capi.cu custom_ops/core/*.cc custom_ops/kernels/*.cc \
  custom_ops/kernels/*.cu
echo "built $out/libpvt_spec.so"

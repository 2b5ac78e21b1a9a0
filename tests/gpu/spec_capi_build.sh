#!/usr/bin/env bash
# Builds tests/gpu/spec_capi.cu with the core and every kernel into build/spec_capi/libpvt_spec.so for
# spec_loop.py and the benchmarks' --capi (through pvt_capi.py). Needs nvcc only, no GPU and no PyTorch:
# built on a CPU machine and carried to the GPU one. libcuda is not linked: pvt_capi.py loads libcuda.so.1
# globally first, and the CUDA runtime is linked statically (nvcc's default). One compiler a core.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/spec_capi
mkdir -p "$out/obj"
printf '%s\0' tests/gpu/spec_capi.cu custom_ops/core/*.cc custom_ops/kernels/*.cc custom_ops/kernels/*.cu |
  xargs -0 -P "$(nproc)" -I{} sh -c 'nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 \
    -DPADDLE_VTENSOR_WITH_CUDA ${EXTRA_NVCC_FLAGS:-} -Icustom_ops -Xcompiler -fPIC -c "$1" -o "$2/obj/$(basename "$1").o"' _ {} "$out"
nvcc -shared -o "$out/libpvt_spec.so" "$out"/obj/*.o
rm -r "$out/obj"
echo "built $out/libpvt_spec.so"

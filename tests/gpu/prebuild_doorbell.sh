#!/usr/bin/env bash
# The three native binaries tests/gpu/run_doorbell.sh takes, built here (no GPU, no device time on
# compiling): the core and the doorbell only (no decode kernels), nvcc for sm_90, cudart and
# libstdc++ static, linked against a libcuda whose soname is libcuda.so.1 (a stub where the machine
# has no driver). Usage (repository root): bash tests/gpu/prebuild_doorbell.sh OUT_DIR [LIBCUDA_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1
lib=${2:-/usr/lib/x86_64-linux-gnu}
mkdir -p "$out/obj"
for f in custom_ops/core/*.cc; do
  g++ -std=c++17 -O2 -DPADDLE_VTENSOR_WITH_CUDA -Icustom_ops -I/usr/local/cuda/include -Wall -Wextra \
    -c "$f" -o "$out/obj/$(basename "$f" .cc).o"
done
nv="nvcc -std=c++17 -O2 -arch=sm_90 -DPADDLE_VTENSOR_WITH_CUDA -Icustom_ops -Itests/native -Xcompiler=-Wall,-Wextra"
$nv -c custom_ops/kernels/step_doorbell_cuda.cu -o "$out/obj/step_doorbell_cuda.o"
for t in test_step_doorbell test_deferred_release bench_inflight_step; do
  $nv "tests/native/$t.cu" "$out"/obj/*.o -o "$out/$t" -cudart static -L"$lib" -lcuda -lpthread \
    -Xcompiler=-static-libstdc++,-static-libgcc
done
rm -r "$out/obj"
echo "prebuilt in $out"

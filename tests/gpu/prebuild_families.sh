#!/usr/bin/env bash
# The native binaries tests/gpu/run_families.sh takes, built here with nvcc for sm_90 (no device time on
# compiling): test_decode_plan, test_decode_attention, test_decode_attention_broken (the copy with the
# tensor-core families broken on purpose, tests/gpu/break_mma_families.sh) and test_decode_attention_broken_rows
# (the row-owning kernel alone broken: ONLY=rows), into OUT_DIR with the digest
# of the sources they were built from (run_families.sh compares it with the tree it runs in: a binary
# built from other sources than the extension's would measure one kernel and test another).
# Usage (repository root): bash tests/gpu/prebuild_families.sh OUT_DIR [cmake args...] (where this machine has
# no libcuda: -DPVT_CUDA_DRIVER=STUB, a stub libcuda.so whose soname is libcuda.so.1, to link against)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1; shift
mkdir -p "$out"
cmake -S tests/native -B build/cuda-native -DPVT_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release -G Ninja "$@" > /dev/null
cmake --build build/cuda-native -j2 --target test_decode_plan test_decode_attention
bash tests/gpu/break_mma_families.sh build/cuda-broken -DCMAKE_BUILD_TYPE=Release "$@"
ONLY=rows bash tests/gpu/break_mma_families.sh build/cuda-broken-rows -DCMAKE_BUILD_TYPE=Release "$@"
cp build/cuda-native/test_decode_plan build/cuda-native/test_decode_attention "$out/"
cp build/cuda-broken/test_decode_attention "$out/test_decode_attention_broken"
cp build/cuda-broken-rows/test_decode_attention "$out/test_decode_attention_broken_rows"
strip "$out"/test_decode_*
bash tests/gpu/sources_digest.sh > "$out/sources.sha256"
bash tests/gpu/sources_digest.sh --files > "$out/sources.files"
echo "prebuilt in $out from sources $(cat "$out/sources.sha256")"

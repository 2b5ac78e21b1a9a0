#!/usr/bin/env bash
# What tests/gpu/run_mixed.sh takes, built here with nvcc for sm_90 (no device time on compiling):
# test_decode_plan, test_decode_attention and the copies with balanced splits broken on purpose
# (break_balance.sh: BREAK=choice, plain, mapping), stripped, and libpvt_spec.so (spec_capi_build.sh, for
# bench_mixed.py --capi), packed into OUT_DIR/bins.tar.xz (the carried tree is capped), and the digest of the
# sources they were built from (tests/gpu/sources_digest.sh).
# BREAKS: the broken copies to build (default "choice plain mapping"; run_span.sh takes "span_count span_range").
# Usage (repository root): [BREAKS=...] bash tests/gpu/prebuild_mixed.sh OUT_DIR [cmake args...] (where this machine has
# no libcuda: -DPVT_CUDA_DRIVER=STUB, a stub libcuda.so whose soname is libcuda.so.1, to link against)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1; shift
mkdir -p "$out"
stage=$(mktemp -d)
cmake -S tests/native -B build/cuda-native -DPVT_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release -G Ninja "$@" > /dev/null
cmake --build build/cuda-native -j2 --target test_decode_plan test_decode_attention
cp build/cuda-native/test_decode_plan build/cuda-native/test_decode_attention "$stage/"
for m in ${BREAKS:-choice plain mapping}; do
  BREAK=$m bash tests/gpu/break_balance.sh "build/cuda-broken-$m" -DCMAKE_BUILD_TYPE=Release "$@"
  cp "build/cuda-broken-$m/test_decode_attention" "$stage/test_decode_attention_broken_$m"
done
strip "$stage"/test_decode_*
bash tests/gpu/spec_capi_build.sh
cp build/spec_capi/libpvt_spec.so "$stage/"
tar -cJf "$out/bins.tar.xz" -C "$stage" .
rm -rf "$stage"
bash tests/gpu/sources_digest.sh > "$out/sources.sha256"
echo "prebuilt in $out from sources $(cat "$out/sources.sha256")"

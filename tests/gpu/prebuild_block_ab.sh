#!/usr/bin/env bash
# What tests/gpu/run_block_end.sh takes, built side by side on the machine it runs on (on the H200: 16 cores,
# about 2 minutes; on a CPU host add -DPVT_CUDA_DRIVER=<stub libcuda.so> to the cmake args): build/pre with
# test_decode_plan, test_decode_attention and one broken copy per BREAKS entry (SCRIPT:NAME, e.g.
# "break_block.sh:wait": tests/gpu/SCRIPT run with BREAK=NAME, the copy named
# test_decode_attention_broken_NAME); build/spec_capi from this tree; build/spec_capi_base from BASE (a tree
# holding custom_ops, tests/gpu and tests/native of the kernels before the change), unless already built.
# Usage: BREAKS="SCRIPT:NAME ..." bash tests/gpu/prebuild_block_ab.sh BASE [cmake args...]
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$1; shift
rm -rf build/pre && mkdir -p build/pre
log=${OUT:-/tmp/out}/builds && mkdir -p "$log"
(cmake -S tests/native -B build/cuda-native -DPVT_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release -G Ninja "$@" > /dev/null &&
 cmake --build build/cuda-native --target test_decode_plan test_decode_attention > "$log/native.log" 2>&1 &&
 cp build/cuda-native/test_decode_plan build/cuda-native/test_decode_attention build/pre/; echo "native rc=$?") &
(bash tests/gpu/spec_capi_build.sh > "$log/spec_capi.log" 2>&1; echo "spec_capi rc=$?") &
if [ ! -f build/spec_capi_base/libpvt_spec.so ]; then
  (cd "$base" && bash tests/gpu/spec_capi_build.sh > "$log/spec_capi_base.log" 2>&1 &&
   rm -rf "$OLDPWD/build/spec_capi_base" && cp -r build/spec_capi "$OLDPWD/build/spec_capi_base"; echo "base rc=$?") &
fi
for b in ${BREAKS:-}; do
  script=${b%%:*} name=${b#*:}
  (BREAK=$name bash "tests/gpu/$script" "build/broken-$name" -DCMAKE_BUILD_TYPE=Release "$@" > "$log/broken_$name.log" 2>&1 &&
   cp "build/broken-$name/test_decode_attention" "build/pre/test_decode_attention_broken_$name"; echo "broken $name rc=$?") &
done
wait
echo "built in ${SECONDS}s: $(ls build/pre | tr '\n' ' ')"

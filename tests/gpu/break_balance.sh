#!/usr/bin/env bash
# Balanced splits' device mapping broken on purpose, one line, in a copy of the sources: a block of a
# balanced grid takes split q / s of kv head q % s instead of split q % s of kv head q / s (its index
# within the entry read the wrong way round). The balanced cases of test_decode_attention must then fail.
# Usage: bash tests/gpu/break_balance.sh BUILD_DIR [cmake args...]; then
#        BUILD_DIR/test_decode_attention --balanced-only (expected: the balanced passes' cases fail).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1; shift
src=$build/src
rm -rf "$src" && mkdir -p "$src"
# The working tree's kernels and native tests (uncommitted edits included), through tar.
tar -cf - custom_ops tests/native | tar -xf - -C "$src"
f=$src/custom_ops/kernels/decode_attention_balance_cuda.cuh
grep -qF 'const uint32_t j = q % s, kvh = q / s;' "$f" || { echo "break_balance: no mapping line" >&2; exit 1; }
sed -i 's|const uint32_t j = q % s, kvh = q / s;|const uint32_t j = q / s, kvh = q % s;|' "$f"
cmake -S "$src/tests/native" -B "$build" -DPVT_WITH_CUDA=ON -G Ninja "$@" > "$build.cmake.log"
cmake --build "$build" --target test_decode_attention >> "$build.cmake.log"
echo "broken copy built: $build/test_decode_attention --balanced-only"

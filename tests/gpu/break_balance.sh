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
rm -rf "$src" && mkdir -p "$src/tests" && cp -r custom_ops "$src/" && cp -r tests/native "$src/tests/"
f=$src/custom_ops/kernels/decode_attention_balance_cuda.cuh
from='const uint32_t j = q % s, kvh = q / s;' to='const uint32_t j = q / s, kvh = q % s;'
[ "$(grep -cF -- "$from" "$f")" = 1 ] || { echo "break_balance: '$from' not found once" >&2; exit 1; }
FROM=$from TO=$to python3 -c 'import os, sys; p = sys.argv[1]; s = open(p).read(); open(p, "w").write(s.replace(os.environ["FROM"], os.environ["TO"]))' "$f"
cmake -S "$src/tests/native" -B "$build" -DPVT_WITH_CUDA=ON -G Ninja "$@" > "$build.cmake.log"
cmake --build "$build" --target test_decode_attention >> "$build.cmake.log"
echo "broken copy built: $build/test_decode_attention --balanced-only"

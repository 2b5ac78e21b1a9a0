#!/usr/bin/env bash
# Balanced splits broken on purpose, one line, in a copy of the sources (BREAK picks which):
#   mapping (the default): a block of a balanced grid takes split q / s of kv head q % s instead of split
#     q % s of kv head q / s (its index within the entry read the wrong way round): the balanced cases'
#     values must fail.
#   choice: the device's choice under the rule always takes balanced splits, even lengths too: the
#     balanced.choice.even cases' device_choice checks must fail (their values still pass).
#   plain: a block that took the plain plan takes the (entry, kv head) of the block before it where its own
#     is odd: the even choice cases that take the plain plan (qwen28_4.b34, llama32_8.b17, gqa32_8.b17) must
#     fail on their values (half their rows never written).
# Usage: [BREAK=mapping|choice|plain] bash tests/gpu/break_balance.sh BUILD_DIR [cmake args...]; then
#        BUILD_DIR/test_decode_attention --balanced-only (expected: the cases above fail).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1; shift
source tests/gpu/broken_copy_lib.sh  # copy_sources, build_copy
src=$build/src
copy_sources "$build"
f=$src/custom_ops/kernels/decode_attention_balance_cuda.cuh
# line: the fixed text to find; sed: the edit (its pattern matches the same line).
case "${BREAK:-mapping}" in
  mapping) line='const uint32_t j = q % s, kvh = q / s;'; edit='s|j = q % s, kvh = q / s;|j = q / s, kvh = q % s;|' ;;
  choice) line='if (sc.plain_n > 0 && !balance_skewed('; edit='s|if (sc.plain_n > 0 \&\& !balance_skewed(|if (sc.plain_n > 0 \&\& false \&\& !balance_skewed(|' ;;
  plain) line='x = w - y * blocks_x;'; edit='s|x = w - y \* blocks_x;|x = (w - y * blocks_x) \& ~1u;|' ;;
  *) echo "break_balance: BREAK must be mapping, choice or plain; got ${BREAK}" >&2; exit 2 ;;
esac
grep -qF "$line" "$f" || { echo "break_balance: no line for ${BREAK:-mapping}" >&2; exit 1; }
before=$(md5sum < "$f")
sed -i "$edit" "$f"
[ "$(md5sum < "$f")" != "$before" ] || { echo "break_balance: the edit for ${BREAK:-mapping} did not apply" >&2; exit 1; }
build_copy "$build" test_decode_attention "$@"
echo "broken copy (${BREAK:-mapping}) built: $build/test_decode_attention --balanced-only"

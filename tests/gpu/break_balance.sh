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
#   span_count: a span grid's pair gets one split fewer than the ranges it crosses (its last one is not merged;
#     a pair inside one range gets none): the span cases' values must fail.
#   span_range: a span grid's piece leaves out its last unit of keys where it has two or more: the span
#     cases' values must fail.
#   stream_tile: a streamed span grid's block masks a piece's keys by its tile count over all its pieces, not
#     the piece's own (the causal bound then cuts a later piece short): the stream cases' values must fail.
# Usage: [BREAK=mapping|choice|plain|span_count|span_range|stream_tile] bash tests/gpu/break_balance.sh BUILD_DIR [cmake args...]; then
#        BUILD_DIR/test_decode_attention --balanced-only (expected: the cases above fail).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1; shift
src=$build/src
rm -rf "$src" && mkdir -p "$src"
# The working tree's kernels and native tests (uncommitted edits included), through tar.
tar -cf - custom_ops tests/native | tar -xf - -C "$src"
f=$src/custom_ops/kernels/decode_attention_balance_cuda.cuh
# line: the fixed text to find; sed: the edit (its pattern matches the same line).
case "${BREAK:-mapping}" in
  mapping) line='const uint32_t j = q % s, kvh = q / s;'; edit='s|j = q % s, kvh = q / s;|j = q / s, kvh = q % s;|' ;;
  choice) line='if (sc.plain_n > 0 && !balance_skewed('; edit='s|if (sc.plain_n > 0 \&\& !balance_skewed(|if (sc.plain_n > 0 \&\& false \&\& !balance_skewed(|' ;;
  plain) line='x = w - y * blocks_x;'; edit='s|x = w - y \* blocks_x;|x = (w - y * blocks_x) \& ~1u;|' ;;
  span_count) f=${f%balance_cuda.cuh}span_cuda.cuh; line='run(b, hk, g - g0, g1 - g0 + 1, s_lo, s_hi);'
    edit='s|run(b, hk, g - g0, g1 - g0 + 1, s_lo, s_hi);|run(b, hk, g - g0, g1 - g0, s_lo, s_hi);|' ;;
  span_range) f=${f%balance_cuda.cuh}span_cuda.cuh; line='const int64_t s_hi = static_cast<int64_t>(end)'
    edit='/const int64_t s_hi = /s|static_cast<int64_t>(end)|static_cast<int64_t>(end - (end > off + 1))|g' ;;
  stream_tile) f=${f%balance_cuda.cuh}span_stream_cuda.cuh; line='const int64_t s_w = cp.s_lo + static_cast<int64_t>(ct) * KEYS + kw;'
    edit='s|const int64_t s_w = cp.s_lo + static_cast<int64_t>(ct) \* KEYS + kw;|const int64_t s_w = cp.s_lo + gc * KEYS + kw;|' ;;
  *) echo "break_balance: BREAK must be mapping, choice, plain, span_count, span_range or stream_tile; got ${BREAK}" >&2; exit 2 ;;
esac
grep -qF "$line" "$f" || { echo "break_balance: no line for ${BREAK:-mapping}" >&2; exit 1; }
before=$(md5sum < "$f")
sed -i "$edit" "$f"
[ "$(md5sum < "$f")" != "$before" ] || { echo "break_balance: the edit for ${BREAK:-mapping} did not apply" >&2; exit 1; }
cmake -S "$src/tests/native" -B "$build" -DPVT_WITH_CUDA=ON -G Ninja "$@" > "$build.cmake.log"
cmake --build "$build" --target test_decode_attention >> "$build.cmake.log"
echo "broken copy (${BREAK:-mapping}) built: $build/test_decode_attention --balanced-only (span_*: --span-only)"

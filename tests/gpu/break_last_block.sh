#!/usr/bin/env bash
# The last-block merge (decode_attention_merge_cuda.cuh, merge_in_last_block) broken on purpose, one line, in a
# copy of the sources (BREAK picks which):
#   noreset (the default): the last block never sets its counter back to 0: the next call's count starts high,
#     so its "last" block merges before the other splits wrote; the counters_zero checks and the repeat and
#     graph-replay checks of test_last_block must fail.
#   offbyone: the block that sees splits - 2 takes itself for the last (one split early): it merges before the
#     last split's partials are in, and the counters are left at 1; values and counters_zero must fail.
# Usage: [BREAK=noreset|offbyone] bash tests/gpu/break_last_block.sh BUILD_DIR [cmake args...]; then
#        BUILD_DIR/test_decode_attention --last-block-cases (expected: the cases above fail).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1; shift
. tests/gpu/break_copy.sh
case "${BREAK:-noreset}" in
  noreset) line='if (last) atomicExch(counter, 0);'; edit='s|if (last) atomicExch(counter, 0);|(void)0;|' ;;
  offbyone) line='atomicAdd(counter, 1) == static_cast<int>(splits) - 1;'
    edit='s|atomicAdd(counter, 1) == static_cast<int>(splits) - 1;|atomicAdd(counter, 1) == static_cast<int>(splits) - 2;|' ;;
  *) echo "break_last_block: BREAK must be noreset or offbyone; got ${BREAK}" >&2; exit 2 ;;
esac
break_copy "$build" custom_ops/kernels/decode_attention_merge_cuda.cuh "$line" "$edit" "$@"
echo "broken copy (${BREAK:-noreset}) built: $build/test_decode_attention --last-block-cases"

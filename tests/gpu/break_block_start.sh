#!/usr/bin/env bash
# The start of a tensor-core block (decode_attention_mma_cuda.cuh: the first tile's loads, then the query rows,
# one commit group; the rows' head and token without a division at Tq = 1) broken on purpose, one line,
# in a copy of the sources (BREAK picks which):
#   wait (the default): the rows read into registers without waiting for the first group (the first tile and
#     the rows) to land: cases whose rows land late must fail on their values.
#   tq: the rows' path without a division (Tq = 1) loads the block's first row for every row: every one-token
#     case of a group larger than 1 must fail.
# Usage: [BREAK=wait|tq] bash tests/gpu/break_block_start.sh BUILD_DIR [cmake args...]; then
#        BUILD_DIR/test_decode_attention --families-only (expected: failures).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1; shift
source tests/gpu/broken_copy_lib.sh  # copy_sources, edit_once, build_copy
copy_sources "$build"
k=$build/src/custom_ops/kernels
case "${BREAK:-wait}" in
  wait) edit_once "$k/decode_attention_mma_cuda.cuh" 'cp_async_wait<STAGES - 2>();  // the first group' \
                  'cp_async_wait<STAGES - 1>();  // the first group' ;;
  tq) edit_once "$k/decode_attention_mma_cuda.cuh" \
                'const int hg = tq == 1 ? row0 + row : (row0 + row) / tq, t = row0 + row - hg * tq;  // decode' \
                'const int hg = tq == 1 ? row0 : (row0 + row) / tq, t = row0 + row - hg * tq;  // decode' ;;
  *) echo "break_block_start: BREAK must be wait or tq; got ${BREAK}" >&2; exit 2 ;;
esac
build_copy "$build" test_decode_attention "$@"
echo "broken copy (${BREAK:-wait}) built: $build/test_decode_attention"

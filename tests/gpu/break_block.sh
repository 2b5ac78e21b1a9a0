#!/usr/bin/env bash
# The tensor-core block (decode_attention_mma_cuda.cuh, decode_attention_merge_cuda.cuh) broken on purpose, one
# line, in a copy of the sources (BREAK picks which; build the copy's native harness, then BUILD_DIR/
# test_decode_attention --families-only must fail). Its start:
#   wait: the query rows read into registers without waiting for the first group (the first tile and the rows)
#     to land: cases whose rows land late must fail on their values (a race: how many varies).
#   tq: the rows' path without a division (Tq = 1) loads the block's first row for every row: every one-token
#     case of a group larger than 1 must fail.
# Its end:
#   weights: every key slice of a row weighted 1 instead of exp2(m - max): every case whose block has more than
#     one key slice with keys must fail on its values.
#   rowgroup: a split's partials stored at the first row group's workspace rows (row0 left out): the cases with
#     more than one row group and more than one split, not in a cluster, must fail.
# Its softmax (online_softmax_row):
#   nomask: every slice taken as wholly visible, the mask never applied: the cases whose splits end inside a
#     tile, or whose rows see fewer keys (causal Tq > 1), must fail.
#   msub: a row that has seen nothing subtracts its -inf maximum (exp2(-inf + inf) = NaN): the cases with a
#     row that sees no key of some slice before its first visible key (causal rows, rows past the group) must fail.
# Usage: BREAK=wait|tq|weights|rowgroup|nomask|msub bash tests/gpu/break_block.sh BUILD_DIR [cmake args...]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1; shift
source tests/gpu/broken_copy_lib.sh  # copy_sources, edit_once, build_copy
copy_sources "$build"
k=$build/src/custom_ops/kernels
case "${BREAK:-}" in
  wait) edit_once "$k/decode_attention_mma_cuda.cuh" 'cp_async_wait<STAGES - 2>();  // the first group' \
                  'cp_async_wait<STAGES - 1>();  // the first group' ;;
  tq) edit_once "$k/decode_attention_mma_cuda.cuh" \
                'const int hg = tq == 1 ? row0 + row : (row0 + row) / tq, t = row0 + row - hg * tq;  // decode' \
                'const int hg = tq == 1 ? row0 : (row0 + row) / tq, t = row0 + row - hg * tq;  // decode' ;;
  weights) edit_once "$k/decode_attention_mma_cuda.cuh" 'const float c = mx == -INFINITY ? 0.f : exp2f(w - mx);' \
                     'const float c = mx == -INFINITY ? 0.f : 1.f;' ;;
  rowgroup) edit_once "$k/decode_attention_merge_cuda.cuh" 'const int64_t g0 = (b * p.q_heads + hk * G) * Tq + st.row0;' \
                      'const int64_t g0 = (b * p.q_heads + hk * G) * Tq;' ;;
  nomask) edit_once "$k/decode_attention_mma_cuda.cuh" 'if (visible >= 8 * N) {' 'if (visible >= 0) {' ;;
  msub) edit_once "$k/decode_attention_mma_cuda.cuh" 'const float m_sub = m_new == -INFINITY ? 0.f : m_new;' \
                  'const float m_sub = m_new;' ;;
  *) echo "break_block: BREAK must be wait, tq, weights, rowgroup, nomask or msub; got '${BREAK:-}'" >&2; exit 2 ;;
esac
build_copy "$build" test_decode_attention "$@"
echo "broken copy ($BREAK) built: $build/test_decode_attention"

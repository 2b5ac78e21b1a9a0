#!/usr/bin/env bash
# The end of a tensor-core block (decode_attention_mma_cuda.cuh's key-slice merge, finish_block's partials)
# broken on purpose, one line, in a copy of the sources (BREAK picks which):
#   weights (the default): every key slice of a row weighted 1 instead of exp2(m - max): every case whose
#     block has more than one key slice with keys must fail on its values.
#   rowgroup: a split's partials stored at the first row group's workspace rows (row0 left out): the cases
#     with more than one row group and more than one split, not in a cluster, must fail.
# Usage: [BREAK=weights|rowgroup] bash tests/gpu/break_block_end.sh BUILD_DIR [cmake args...]; then
#        BUILD_DIR/test_decode_attention --families-only (expected: failures).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1; shift
source tests/gpu/broken_copy_lib.sh  # copy_sources, edit_once, build_copy
copy_sources "$build"
k=$build/src/custom_ops/kernels
case "${BREAK:-weights}" in
  weights) edit_once "$k/decode_attention_mma_cuda.cuh" 'const float c = mx == -INFINITY ? 0.f : exp2f(w - mx);' \
                     'const float c = mx == -INFINITY ? 0.f : 1.f;' ;;
  rowgroup) edit_once "$k/decode_attention_merge_cuda.cuh" 'const int64_t g0 = (b * p.q_heads + hk * G) * Tq + st.row0;' \
                      'const int64_t g0 = (b * p.q_heads + hk * G) * Tq;' ;;
  *) echo "break_block_end: BREAK must be weights or rowgroup; got ${BREAK}" >&2; exit 2 ;;
esac
build_copy "$build" test_decode_attention "$@"
echo "broken copy (${BREAK:-weights}) built: $build/test_decode_attention"

#!/usr/bin/env bash
# merge_splits_wide_kernel broken on purpose, one line, in a copy of the sources (BREAK picks which):
#   live (the default): each thread group's last split of a round trip counted as a repeat (no weight):
#     the cases merged by the wide kernel must fail on their values.
#   groups: each element folded over the first thread group's accumulators only (with every group's weight):
#     the cases whose splits reach a second thread group must fail.
#   warp: merge_splits_warp_kernel (a warp a row) folds each lane's first element's accumulators into all of its
#     elements: the cases merged by it (head dims 64, 96, 128, 256+ rows) must fail.
# Usage: [BREAK=live|groups|warp] bash tests/gpu/break_merge.sh BUILD_DIR [cmake args...]; then
#        BUILD_DIR/test_decode_attention --merge-only (expected with live/groups: the wide passes fail, merge_rows.*
#        passes; with warp: cases of 256+ rows at head dims 64-128 in the merge_rows.* and splits100.* passes fail,
#        the wide passes pass).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1; shift
source tests/gpu/broken_copy_lib.sh  # copy_sources, edit_once, build_copy
copy_sources "$build"
f=$build/src/custom_ops/kernels/decode_attention_merge_wide_cuda.cuh
w=$build/src/custom_ops/kernels/decode_attention_merge_cuda.cuh
case "${BREAK:-live}" in
  warp) edit_once "$w" 'merge_row<N, V>(ws, rows_total, g, D, lane, 32, splits' 'merge_row<N, V>(ws, rows_total, g, D, lane, 0, splits' ;;
  live) edit_once "$f" 'const int64_t live = (splits - j0 + Q - 1) / Q;' 'const int64_t live = (splits - j0 + Q - 1) / Q - 1;' ;;
  groups) edit_once "$f" 'acc += w * group_acc[k * D + d];' 'acc += w * group_acc[d];' ;;
  *) echo "break_merge: BREAK must be live, groups or warp; got ${BREAK}" >&2; exit 2 ;;
esac
build_copy "$build" test_decode_attention "$@"
echo "broken copy (${BREAK:-live}) built: $build/test_decode_attention"

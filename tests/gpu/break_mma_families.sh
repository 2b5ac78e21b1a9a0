#!/usr/bin/env bash
# The tensor-core kernel's new paths broken on purpose, one line each, in a copy of the sources: the
# family cases of test_decode_attention (--families-only) must then fail. Each edit breaks one path only:
#   M-tiles   the key slices' merge reads M-tile 0's partials for every M-tile (2, 4, 8 M-tiles)
#   d256      the query fragments read from shared memory (head_dim 256) repeat the even k16 step
#   chunks    the chunk-by-chunk tile loader (head_dim 80 and 96; 64 with 8 M-tiles) loads every key's
#             last chunk from its first
#   row groups  a block's rows are written as the kv head's first rows (finish_block ignores the row
#             group's first row): every row group but the first writes nothing of its own
#   row-owning  (decode_attention_mma_rows_cuda.cuh) P V takes only the first 16 keys of each tile (its call
#             of pv_tiles, the P V both kernels share, given two n8 tiles of scores)
# With ONLY=rows, only the last edit: the row-owning kernel's cases must fail, no other. With ONLY=rows5, one
# edit of the 5-warp instance alone (the last of its 4 loading warps loads nothing): its cases (".w5", ".rows5",
# ".plan" at head_dim 64) must fail, no other. With ONLY=pieces, finish_block's 16-byte pieces (the row's second
# half of floats read as its first, in the one-split write and in a cluster's merge of 2, 4 or 8 peers): every
# case whose rows end in their blocks must fail but the out_offset.* ones (written element by element), and no
# case through the workspace and merge kernel. With ONLY=warpkeys, the key-slice kernel's instances of 32 keys a warp
# (their call of pv_tiles given the warp's first two n8 tiles of scores: P V drops its second 16 keys): exactly
# the warp_keys32.* cases that plan such an instance must fail (test_decode_attention --families-only; their plan
# checks still pass), no other.
# Usage: [ONLY=rows|rows5|pieces|warpkeys] bash tests/gpu/break_mma_families.sh BUILD_DIR [cmake args...]; then
#        BUILD_DIR/test_decode_attention --families-only (expected: every case fails, none passes).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1; shift
source tests/gpu/broken_copy_lib.sh  # copy_sources, edit_once, build_copy
src=$build/src
copy_sources "$build"
k=$src/custom_ops/kernels/decode_attention_mma_cuda.cuh
edit() { edit_once "${3:-$k}" "$1" "$2"; }  # edit FROM TO [FILE]: default the tensor-core kernel's
m=$src/custom_ops/kernels/decode_attention_merge_cuda.cuh
if [ "${ONLY:-}" = pieces ]; then
  edit 'const float4 a0 = pa[0], a1 = pa[1];' 'const float4 a0 = pa[0], a1 = pa[0];' "$m"
  edit 'ac[c][1] = pa[1];' 'ac[c][1] = pa[0];' "$m"
  build_copy "$build" test_decode_attention "$@"
  echo "broken copy built: $build/test_decode_attention --families-only"
  exit 0
fi
if [ "${ONLY:-}" = warpkeys ]; then
  edit 'pv_tiles<T, KN, NT, CHS>(o, s, sv(stage), kw, lane);' \
       'pv_tiles<T, 2, NT, CHS>(o, reinterpret_cast<const float(&)[2][4]>(s), sv(stage), kw, lane);'
  build_copy "$build" test_decode_attention "$@"
  echo "broken copy built: $build/test_decode_attention --families-only"
  exit 0
fi
if [ "${ONLY:-}" = rows5 ]; then
  edit 'const bool loader = static_cast<int>(threadIdx.x) < LOADERS;' \
       'const bool loader = static_cast<int>(threadIdx.x) < LOADERS - 32;' "$src/custom_ops/kernels/decode_attention_mma_rows_cuda.cuh"
  build_copy "$build" test_decode_attention "$@"
  echo "broken copy built: $build/test_decode_attention --families-only"
  exit 0
fi
if [ "${ONLY:-}" != rows ]; then
  edit 'const int w = tile + j * MT;' 'const int w = j * MT;'
  edit 'q_frag(qf, kp + 1);' 'q_frag(qf, kp);'
  edit 'ok ? kb + s * ks0 + cc * 8 : kb, ok);' 'ok ? kb + s * ks0 + (cc == CH - 1 ? 0 : cc) * 8 : kb, ok);'
  edit 'const int hg = tq == 1 ? st.row0 + r : (st.row0 + r) / tq;' 'const int hg = tq == 1 ? r : r / tq;' \
       "$src/custom_ops/kernels/decode_attention_merge_cuda.cuh"
fi
edit 'pv_tiles<T, KN, NT, CHS>(o, s, sv(stage), 0, lane);' \
     'pv_tiles<T, 2, NT, CHS>(o, reinterpret_cast<const float(&)[2][4]>(s), sv(stage), 0, lane);' \
     "$src/custom_ops/kernels/decode_attention_mma_rows_cuda.cuh"
build_copy "$build" test_decode_attention "$@"
echo "broken copy built: $build/test_decode_attention --families-only"

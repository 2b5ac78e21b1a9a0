// The tensor-core plan of decode attention over an 8-bit cache (kv_quant_attention_cuda.cu launches it):
// block shape (warps, keys a warp) and split count. Pure host code over plain numbers (the shapes, the
// SM count, the instance's occupancy), so it is tested without a GPU (tests/native/test_decode_plan.cc,
// test_quant_plan).
#pragma once

#include <cstdint>

#include "../core/status.h"

namespace pvt {
namespace quant_plan {

constexpr int64_t kMaxSplits = 128;
constexpr int64_t kBlockCostTiles = 2;  // a block's fixed cost (q, pipeline prologue, its merge) in tiles
constexpr int64_t kMinKeysPerSplit = 256;
// What merge_kernel costs behind the split kernel, in tiles of a block's work: the kernel ends, the merge's
// blocks read the partials back from L2 and write the rows. One split needs none (the split kernel writes
// its rows): 1.0-1.8 us less at B = 1 on the H200, about two 128-key tiles there (docs/QUANTIZED_CACHE.md).
constexpr int64_t kMergeKernelTiles = 2;

// Splits the 8-bit merge kernel reads per L2 round trip for a plan of `splits` splits: decode_plan's
// kMergeChunkWide past kMergeChunk splits, so that 17-32 splits take one round trip instead of two and 33-64
// two instead of 3-4, at the price of 3 x 32 loads in flight a thread (211 registers, no spill; 48 spilled).
// H200 (2026-12-02, docs/QUANTIZED_CACHE.md): GQA B = 1 with 32 splits 2-6% faster, fp8 and int8, 16k-64k.
// The float16 merge keeps kMergeChunk: the same wide chunk was mixed there (MQA B = 1 8k 8.6% faster,
// StarCoder B = 1 and MQA B = 1 32k 5-6% slower; docs/H200_DECODE_PARITY.md). `forced`
// (DecodeOptions::merge_chunk, checked by decode_plan::check_options): that chunk.
int merge_chunk_of(int64_t splits, int forced);

// The most splits the plan takes for `kv_len` keys in tiles of `tile_keys`: kMinKeysPerSplit keys a split and at
// least kMinTilesPerSplit tiles. With 128-key tiles and two a split the calls of few blocks were slower than with
// four: GQA B = 1 S = 4k (8 blocks a split), 16 splits of 2 tiles 11.4 us (int8, 8 warps) and 9.3 (fp8, 4 warps of
// 32 keys) against 8 splits of 4 tiles 10.0 and 8.8 (H100, 2026-12-07 sweep, docs/QUANTIZED_CACHE.md); from 16k
// keys the bound is above every count the plan takes.
constexpr int64_t kMinTilesPerSplit = 3;
int64_t most_mma_splits(int64_t kv_len, int64_t tile_keys);

// A grid of at least this many waves of blocks takes one split: what a partial last wave costs is short against
// the call (and its blocks run faster, fewer sharing HBM, which the wave count ignores), while shorter splits
// cost int8 its shared scale sectors. MHA B = 32 S = 64k int8 (1024 blocks of 8 warps, 7.8 waves): the wave
// count took 5 splits, 6688 us, against 5852 with one (H100, 2026-12-07 sweep, docs/QUANTIZED_CACHE.md).
constexpr int64_t kManyWaves = 4;

// One split for kManyWaves waves of blocks or more; else the fewest splits that minimise waves x (tiles a split
// + kBlockCostTiles), plus, with more than one split, the merge kernel and its L2 round trips (merge_chunk_of
// splits each), for `blocks` blocks a split over `tiles` tiles of keys, `slots` blocks resident at once, at most
// `most` splits (and kMaxSplits, and one tile a split).
int64_t choose_mma_splits(int64_t blocks, int64_t tiles, int64_t most, int64_t slots);

// The forced block shape is one the kernel has: mma_warps (DecodeOptions) 0, 4 or 8 is checked by the
// float16 planner's check_options; warp_keys (QuantAttentionParams) must be 0, 16 or 32, and 32 only
// with blocks of 4 warps. kInvalidArgument otherwise.
Status check_warp_keys(int mma_warps, int warp_keys);

// The block's shape: `warps` warps (4, or 8 for int8 at head_dim 128 with the keys on M, or where forced:
// DecodeOptions::mma_warps) of `warp_keys` keys of every tile (16 or 32), for a cache of `int8` codes (else
// fp8) at head_dim, in the kernel choose_keys_on_m chose; forced_warps / forced_keys (0: the rule's) as the
// options give them, after check_warp_keys has accepted them.
struct BlockShape {
  int warps, warp_keys;
};
BlockShape choose_block_shape(bool int8, int64_t head_dim, bool keys_on_m, int forced_warps, int forced_keys);

// Which tensor-core kernel: the keys on the MMA's M side (mma_keys_kernel) for groups of at most 8 query heads
// a kv head at head_dim 128, and for int8 at 64; else the query heads on M (mma_split_kernel). `forced`
// (QuantAttentionParams::keys_on_m): 1 keys on M, -1 never, 0 the rule; check_keys_on_m refuses any other value
// and 1 with a group over 8 (kInvalidArgument, naming keys_on_m).
Status check_keys_on_m(int forced, int64_t group);
bool choose_keys_on_m(bool int8, int64_t group, int64_t head_dim, int forced);

}  // namespace quant_plan
}  // namespace pvt

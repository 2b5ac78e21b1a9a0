// The tensor-core plan over 8-bit caches (kv_quant_attention_plan.h); the measurements behind each rule
// are in docs/QUANTIZED_CACHE.md (H200).
#include "kv_quant_attention_plan.h"

#include <algorithm>
#include <string>

#include "decode_attention_plan.h"  // kMergeChunk, kMergeChunkWide

namespace pvt {
namespace quant_plan {

// The count used to be one wave of blocks rounded UP (GQA B = 32: 2 splits, 512 blocks on 396 slots, a
// second wave of 116; B = 8: 7 splits, 448 blocks), which left most of the SMs idle for the last part of
// the call: 3.4-3.6 TB/s of codes where MHA B = 32 (2.6 waves) read 4.0. A sweep of forced counts
// (test_kv_quant_cuda --sweep, H200) found this count within noise of the best on 47 of 48 rows.
int64_t choose_mma_splits(int64_t blocks, int64_t tiles, int64_t most, int64_t slots) {
  slots = std::max<int64_t>(1, slots);
  if (blocks >= kManyWaves * slots) return 1;
  int64_t best = 1, best_cost = INT64_MAX;
  for (int64_t s = 1; s <= std::min<int64_t>({tiles, most, kMaxSplits}); ++s) {
    const int64_t per = (tiles + s - 1) / s, waves = (blocks * s + slots - 1) / slots;
    const int64_t chunk = merge_chunk_of(s, 0);
    const int64_t merge = s > 1 ? kMergeKernelTiles + (s + chunk - 1) / chunk : 0;
    const int64_t cost = waves * (per + kBlockCostTiles) + merge;
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

int64_t most_mma_splits(int64_t kv_len, int64_t tile_keys) {
  return std::max<int64_t>(1, kv_len / std::max<int64_t>(kMinKeysPerSplit, kMinTilesPerSplit * tile_keys));
}

int merge_chunk_of(int64_t splits, int forced) {
  using decode_plan::kMergeChunk;
  return forced != 0 ? forced : splits > kMergeChunk ? decode_plan::kMergeChunkWide : kMergeChunk;
}

Status check_warp_keys(int mma_warps, int warp_keys) {
  if ((warp_keys != 0 && warp_keys != 16 && warp_keys != 32) || (warp_keys == 32 && mma_warps == 8)) {
    return Status(Code::kInvalidArgument, "quant_attention_cuda: warp_keys must be 0, 16 or 32, and 32 only with "
                                          "blocks of 4 warps; got warp_keys " + std::to_string(warp_keys) +
                                              " with mma_warps " + std::to_string(mma_warps));
  }
  return Status::Ok();
}

// fp8: 4 warps, 32 keys a warp at head_dim 128 (tiles of 128 keys: four independent Q K^T chains a warp, half
// the barriers and softmax reductions a key; 2 blocks an SM), else 16. H200, 2026-12-02, float16 q
// (docs/QUANTIZED_CACHE.md): 0.4-14% faster with 32 keys on 21 of 24 rows (GQA B = 1 64k: 42.5 against 49.4
// us), slower on two (GQA B = 1 4k by 0.2 us, MHA B = 32 64k by 3.7%, a row whose runs spread 4.5%).
// int8 at head_dim 128, keys on M (groups of at most 8): 8 warps of 16 keys (tiles of 128 keys, one block an
// SM). H100, 2026-12-07, the loop of the copy cursor (docs/QUANTIZED_CACHE.md): 4-10% faster than 4 warps of
// 16 keys at B = 8 and 32 on 15 of 16 rows (GQA B = 8 64k 369.4 against 398.3 us; MHA B = 32 64k +0.6%),
// 1-4.5% at MHA B = 1, and within 0.1 us of 4 warps of 32 at GQA B = 1 4k, 0.5-2 us faster from 16k. (The
// H200, with the loop before, had 8 warps mixed for int8 at B >= 8, -5% to +9%, and 32 keys a warp faster at
// GQA B = 1.) int8 at head_dim 64 or with the query heads on M (groups over 8): 4 warps of 16 keys (not
// measured).
Status check_keys_on_m(int forced, int64_t group) {
  if (forced < -1 || forced > 1 || (forced == 1 && group > 8)) {
    return Status(Code::kInvalidArgument, "quant_attention_cuda: keys_on_m must be -1, 0 or 1, and 1 only with at most "
                                          "8 query heads a kv head; got " + std::to_string(forced) + " with a group of " +
                                              std::to_string(group));
  }
  return Status::Ok();
}

// Keys on M where the group fits the 8 columns of an n8 tile: with the query heads on M a group of 1-8 fills
// at most half the 16 rows, so the keys on M take half the MMAs and O half the registers. H200, 2026-12-02
// (docs/QUANTIZED_CACHE.md), B 1-32, 4k-64k, keys on M against query heads on M in the same call: head_dim
// 128 (32/8, 32/32, Qwen2's 28/4): fp8 0.99-1.36x the speed (GQA B = 1 16k 14.9 against 18.9 us), int8
// 1.02-1.37x; head_dim 64 (32/8, 32/32): int8 0.97-1.13x, but fp8 0.88-1.07x (B >= 8: 0.88-0.93x), so fp8
// keeps the query heads on M there.
bool choose_keys_on_m(bool int8, int64_t group, int64_t head_dim, int forced) {
  return forced != 0 ? forced == 1 : group <= 8 && (head_dim == 128 || int8);
}

BlockShape choose_block_shape(bool int8, int64_t head_dim, bool keys_on_m, int forced_warps, int forced_keys) {
  if (forced_warps == 0 && forced_keys == 0 && int8 && head_dim == 128 && keys_on_m) return BlockShape{8, 16};
  const int warps = forced_warps != 0 ? forced_warps : 4;
  if (forced_keys != 0 || warps == 8) return BlockShape{warps, forced_keys != 0 ? forced_keys : 16};
  return BlockShape{warps, head_dim == 128 && !int8 ? 32 : 16};
}

}  // namespace quant_plan
}  // namespace pvt

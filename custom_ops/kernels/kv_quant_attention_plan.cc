// The tensor-core plan over 8-bit caches (kv_quant_attention_plan.h); the measurements behind each rule
// are in docs/QUANTIZED_CACHE.md (H200).
#include "kv_quant_attention_plan.h"

#include <algorithm>
#include <string>

namespace pvt {
namespace quant_plan {

// The count used to be one wave of blocks rounded UP (GQA B = 32: 2 splits, 512 blocks on 396 slots, a
// second wave of 116; B = 8: 7 splits, 448 blocks), which left most of the SMs idle for the last part of
// the call: 3.4-3.6 TB/s of codes where MHA B = 32 (2.6 waves) read 4.0. A sweep of forced counts
// (test_kv_quant_cuda --sweep, H200) found this count within noise of the best on 47 of 48 rows.
int64_t choose_mma_splits(int64_t blocks, int64_t tiles, int64_t most, int64_t slots) {
  slots = std::max<int64_t>(1, slots);
  int64_t best = 1, best_cost = INT64_MAX;
  for (int64_t s = 1; s <= std::min<int64_t>({tiles, most, kMaxSplits}); ++s) {
    const int64_t per = (tiles + s - 1) / s, waves = (blocks * s + slots - 1) / slots;
    const int64_t cost = waves * (per + kBlockCostTiles) + (s > 1 ? (s + kMergeAtOnce - 1) / kMergeAtOnce : 0);
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

// 8 warps (tiles of 128 keys, 2 warps a scheduler, one block an SM) where a split's blocks are at most
// 1/16 of the SMs, so that 16 splits fill them, and every split still gets 4 tiles or more (kv_len >=
// 8192): GQA B = 1 S 16k-64k. Else 4 warps (3 blocks an SM by registers). H200, 2026-12-02: at GQA B = 1
// 16k 8 warps took 20.4 / 22.1 us (fp8 / int8) against 22.2 / 24.8; at 4k (2 tiles a split) 13.1 / 14.1
// against 10.6 / 12.4; at MHA B = 1 (32 blocks a split) 4 warps' 3 blocks an SM won from 16k on.
int choose_mma_warps(int64_t blocks, int64_t kv_len, int sms) {
  return blocks * 16 <= sms && kv_len >= 64 * 8 * 16 ? 8 : 4;
}

Status check_warp_keys(int mma_warps, int warp_keys) {
  if ((warp_keys != 0 && warp_keys != 16 && warp_keys != 32) || (warp_keys == 32 && mma_warps == 8)) {
    return Status(Code::kInvalidArgument, "quant_attention_cuda: warp_keys must be 0, 16 or 32, and 32 only with "
                                          "blocks of 4 warps; got warp_keys " + std::to_string(warp_keys) +
                                              " with mma_warps " + std::to_string(mma_warps));
  }
  return Status::Ok();
}

// 32 keys a warp where a split's blocks are at most 1/16 of the SMs (one block an SM, GQA B = 1) and the
// plan keeps 4 warps (kv_len < 8192): each warp then runs four independent Q K^T chains instead of two
// and half the barriers and softmax reductions a key, where nothing else hides their latency.
int choose_mma_warp_keys(int64_t blocks, int64_t /*kv_len*/, int sms, int warps, int forced) {
  if (forced != 0) return forced;
  return warps == 4 && blocks * 16 <= sms ? 32 : 16;
}

}  // namespace quant_plan
}  // namespace pvt

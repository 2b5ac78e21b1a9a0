// See decode_attention_balance_plan.h.
#include "decode_attention_balance_plan.h"

#include <algorithm>
#include <cstdint>

namespace pvt {
namespace decode_plan {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of one split of every entry: kv heads x row groups x entries.
int64_t units_of(const DecodeAttentionParams& p, const Plan& plan) { return p.batch * p.kv_heads * plan.row_groups; }

// The budget of blocks for the batch's splits (Plan::balance_blocks): DecodeOptions::balance blocks an SM, or
// under the rule DecodeOptions::balance_blocks_per_sm where given, else the rule's own: two an SM (the
// 4-warp instance's residency) where a split of every entry takes up to one an SM, more where it takes more
// (a power of two, at most kBalanceMaxBlocksPerSm): the short entries take a block each whatever their
// length, and the long ones need the rest to split. H200 (bench_mixed.py, 2026-12-02 05:43 UTC, times
// relative within one build; docs/H200_DECODE_PARITY.md), skewed batches, the best budget: 2 an SM at 64 and
// 128 such blocks (Qwen2 B=16, 32; Llama-3 B=16 within 5%), 4 at 256 (Qwen2 B=64, Llama-3 B=32: 2 took them
// 2.2-2.3x longer), 8 at 512 (Llama-3 B=64: 4 took 1.5x longer); at equal lengths 2 an SM cost 0-4% against
// the plan before (10% at Qwen2 B=8, 4k of a 16k bound) and 4 cost 6-17% at 4k keys (the device then keeps
// one wave where it is as good: balanced_block). Again at 08:37 UTC (budgets 2, 3, 4, 8 and 8 warps at 1,
// same process): these budgets the best or within 1% on all six skewed rows; 3 an SM 14-35% slower where
// the rule takes 2.
int64_t budget_of(const DecodeAttentionParams& p, const Plan& plan) {
  if (options_of(p).balance > 0) return options_of(p).balance * plan.sms;
  if (options_of(p).balance_blocks_per_sm > 0) return options_of(p).balance_blocks_per_sm * plan.sms;
  int64_t per_sm = kBalanceBlocksPerSm;
  while (per_sm < kBalanceMaxBlocksPerSm && per_sm * plan.sms < 2 * units_of(p, plan)) per_sm *= 2;
  return per_sm * plan.sms;
}

// The most splits one entry can get: an entry's splits times its blocks a split (kv heads x row groups)
// plus one split for every other entry fit the budget, and no split is shorter than the least.
int64_t depth_of(const DecodeAttentionParams& p, const Plan& plan, int64_t min_units) {
  const int64_t per_split = p.kv_heads * plan.row_groups;
  const int64_t by_budget = budget_of(p, plan) / per_split - (p.batch - 1);
  const int64_t by_keys = ceil_div(p.kv_len, min_units * kSplitKeysUnit);
  return std::max<int64_t>(1, std::min(by_budget, by_keys));
}

// The shortest split in kSplitKeysUnit units: kBalanceMinKeys, or longer where a bound-long entry would
// otherwise take more than kMaxSplits.
int64_t min_units_of(const DecodeAttentionParams& p) {
  return std::max(ceil_div(kBalanceMinKeys, kSplitKeysUnit), ceil_div(ceil_div(p.kv_len, kMaxSplits), kSplitKeysUnit));
}

}  // namespace

bool balance_wanted(const DecodeAttentionParams& p, const Plan& plan) {
  const DecodeOptions& o = options_of(p);
  if (!plan.mma_kernel || p.cache_seqlens == nullptr || o.split_keys > 0 || o.splits > 0 || o.balance == 0 ||
      p.batch > kBalanceMaxBatch) {
    return false;
  }
  if (o.balance > 0) return true;
  // kBalanceRule, the measured shapes (where plan_balanced lets the device choose, balance_skewed): per-slot
  // GQA batches (2-16 rows a kv head, one M-tile, one row group) of two or more entries and kBalanceMinUnits
  // or more blocks a split of every entry, under a bound of kBalanceMinBound keys or more, where an entry can get two splits or more. One row a kv head (MHA on the
  // tensor-core kernel) and large groups (MQA) only when forced.
  const bool gqa = p.q_heads / p.kv_heads * p.q_len >= 2 && plan.mma_tiles == 1 && plan.row_groups == 1;
  return p.batch >= 2 && gqa && units_of(p, plan) >= kBalanceMinUnits &&
         p.kv_len >= kBalanceMinBound && depth_of(p, plan, min_units_of(p)) >= 2;
}

namespace {

// A span grid (DecodeOptions::balance_span, decode_attention_span_cuda.cuh) where it applies: one row group (a
// pair is one block's rows) and every count of units below 2^32 (B x units of kv_len x kv heads: the device's
// arithmetic is 32-bit). Its depth: a pair of s units crosses at most floor((s - 1) G / T) + 2 ranges of the
// G blocks (T units in all), and s x kv heads <= T, so at most G / kv heads + 2; and at most its units.
bool plan_span(const DecodeAttentionParams& p, Plan* plan) {
  const int64_t units = ceil_div(p.kv_len, kSplitKeysUnit);
  const int64_t pairs = p.batch * p.kv_heads;  // both checked against the grid limits
  if (!options_of(p).balance_span || plan->row_groups != 1 || units > static_cast<int64_t>(UINT32_MAX) / pairs) return false;
  // Streamed (2) where its one instance runs: one block an SM of 4 warps, one M-tile, head_dim <= 128, and the
  // entries' fields in 32 bits.
  const bool stream = options_of(p).balance_span == 2 && plan->balance_blocks <= plan->sms && plan->mma_warps == 4 &&
                      plan->mma_tiles == 1 && p.head_dim <= 128 && p.kv_len < INT32_MAX &&
                      p.batch * p.q_len < INT32_MAX;
  plan->balance_span = stream ? 2 : 1;
  if (options_of(p).span_blocks > 0) plan->balance_blocks = std::min(plan->balance_blocks, options_of(p).span_blocks);
  plan->balance_min_units = 1;
  plan->balance_wave = 0;
  plan->balance_grid = plan->balance_blocks;
  // One block an SM (balance 1) kept so by its shared memory: equal ranges are only equal work where no SM
  // holds two of them (the H200's block scheduler paired 4-warp blocks of a one-an-SM grid otherwise).
  plan->mma_sm_exclusive = plan->balance_blocks <= plan->sms;  // (the streamed instance's shared memory is so anyway)
  plan->splits = std::max<int64_t>(1, std::min(units, plan->balance_blocks / p.kv_heads + 2));
  plan->keys_per_split = ceil_div(p.kv_len, plan->splits);  // an estimate
  // The partials of up to `splits` splits a row, and each pair's count.
  plan->workspace_bytes = plan->splits > 1 ? workspace_of(p, *plan) + static_cast<size_t>(p.batch * p.kv_heads) * 4 : 0;
  return true;
}

}  // namespace

Status plan_balanced(const DecodeAttentionParams& p, const KernelOccupancy& occupancy, const Plan* plain, Plan* plan) {
  const DecodeOptions& o = options_of(p);
  plan->balance_min_units = min_units_of(p);
  plan->balance_blocks = budget_of(p, *plan);
  plan->balance_grid = std::max(plan->balance_blocks, units_of(p, *plan));
  plan->splits = depth_of(p, *plan, plan->balance_min_units);
  plan->keys_per_split = ceil_div(p.kv_len, plan->splits);  // of a bound-long entry alone: an estimate
  plan->cluster = false;
  // 4 warps, two blocks an SM: blocks of the short entries fill the SMs beside the long ones' (8 only for
  // several M-tiles, the only instances there, or forced).
  plan->mma_warps = plan->mma_tiles > 1 ? 8 : o.mma_warps != 0 ? o.mma_warps : 4;
  if (!mma_instance_exists(static_cast<int>(p.head_dim), plan->mma_warps, plan->mma_tiles)) plan->mma_warps = 4;
  PVT_RETURN_IF_ERROR(check_mma_resident(p, *plan, occupancy));
  plan->balance_wave = plan->sms * occupancy.mma_resident[plan->mma_warps == 8 ? 1 : 0];
  plan->mma_sm_exclusive = false;
  if (plain == nullptr && plan_span(p, plan)) return Status::Ok();
  // The rule: the plain plan's blocks too, where they are this instance's, and not where the plain plan
  // keeps one block an SM (Plan::mma_sm_exclusive): a balanced grid of two an SM cannot keep its plain blocks
  // apart, and the H200 paired them up. Equal lengths under a 16k bound, the blocks having chosen the plain
  // plan (2026-12-02 08:37 UTC, docs/H200_DECODE_PARITY.md): 16-57% slower than the plain plan there (Llama-3
  // 32/8 B=16 4k keys 104.6 against 66.5 us), balanced splits only 6-17% (76.1); where the plain grid is
  // larger than the SMs (two an SM either way) 0.8-4.1%.
  if (plain != nullptr && !plain->mma_sm_exclusive) {
    if (plain->cluster || plain->mma_warps != plan->mma_warps || plain->mma_tiles != plan->mma_tiles) {
      *plan = *plain;
      plan->workspace_bytes = workspace_of(p, *plan);
      return Status::Ok();
    }
    plan->balance_plain_splits = plain->splits;
    plan->splits = std::max(plan->splits, plain->splits);
    plan->balance_grid = std::max(plan->balance_grid, units_of(p, *plan) * plain->splits);
  }
  // The partials of up to `splits` splits a row, and the split size the blocks chose (for the merge; 0: the
  // plain plan's splits).
  plan->workspace_bytes = plan->splits > 1 ? workspace_of(p, *plan) + 16 : 0;
  return Status::Ok();
}

}  // namespace decode_plan
}  // namespace pvt

// Balanced splits (issue 32, point 3): per-slot batches whose lengths are skewed (most short, a few long)
// cut each entry's keys by its OWN length, on the device, so that all SMs stream to the end. The default
// plan sizes its splits from the host's bound (kv_len) and the batch's shape alone: with few kv heads the
// blocks of the long slots stream alone while the short slots' SMs idle (26-75% of the copy rate on the
// H200, docs/H200_DECODE_PARITY.md).
//
// The host plans only from what it knows (B, kv heads, row groups, kv_len as a bound, SMs): a grid of
// balance_grid blocks, a budget of balance_blocks blocks for the batch's splits, the shortest split. Every
// block of the grid then reads the batch's lengths (decode_attention_balance_cuda.cuh), finds the
// shortest split size (whole kSplitKeysUnit units, at least balance_min_units) whose splits fit the budget,
// FlashInfer's balanced plan made on the device, and maps its index to (entry, kv head, row group, split);
// blocks past the batch's splits leave at once. Nothing is read back on the host: CUDA-graph safe.
#pragma once

#include <cstdint>

#include "../core/status.h"
#include "decode_attention.h"
#include "decode_attention_plan.h"

namespace pvt {
namespace decode_plan {

constexpr int64_t kBalanceMaxBatch = 256;   // entries one warp scans (8 a lane)
constexpr int64_t kBalanceMinKeys = 512;    // the shortest split: fewer partials to write and merge
constexpr int kBalanceBlocksPerSm = 2;      // the least budget of the rule: the 4-warp instance's residency
constexpr int kBalanceMaxBlocksPerSm = 8;   // ... and the most (budget_of in the .cc)
constexpr int64_t kBalanceMinBound = 8192;  // the rule: shorter bounds keep the default plan (clusters)
constexpr int64_t kBalanceMinUnits = 64;    // the rule: fewer blocks a split of every entry keep it too

// The device's choice under the rule, from the batch's lengths in kSplitKeysUnit units (the most of one
// entry, the sum over its `entries`): balanced splits where the longest entry holds more than
// kBalanceSkewNum / kBalanceSkewDen times the mean, else the plain plan. The plain plan cuts every entry
// into the same number of splits, so its longest block is the longest entry's share and its time follows
// the longest entry, while the bytes follow the mean: at even lengths it is as good as its plan for the
// bound (which the balanced grid cost 3-17% more than on the H200), and at a longest entry 4x the mean
// (the skewed rows of docs/H200_DECODE_PARITY.md) it left the SMs idle 26-75% of the time. One function
// for the host's tests and the device.
constexpr uint64_t kBalanceSkewNum = 5, kBalanceSkewDen = 4;
PVT_HOST_DEVICE constexpr bool balance_skewed(uint32_t most, uint64_t total, uint32_t entries) {
  return static_cast<uint64_t>(most) * entries * kBalanceSkewDen > total * kBalanceSkewNum;
}

// Whether plan_grid takes plan_balanced: a tensor-core plan over a per-slot batch (cache_seqlens) of at
// most kBalanceMaxBatch entries, neither split_keys nor splits forced, and DecodeOptions::balance >= 1, or
// kBalanceRule and the rule's shapes (see the .cc). The host cannot tell skewed lengths from equal ones: the
// rule is by shape, the device then chooses (balance_skewed).
bool balance_wanted(const DecodeAttentionParams& p, const Plan& plan);

// The grid, budget, depth (Plan::splits: the most splits an entry can get) and workspace of a balanced plan.
// `plain` (the rule): the plain plan of the same call, which the blocks take where the lengths are even
// (Plan::balance_plain_splits; the grid and workspace then hold both), unless it keeps one block an SM
// (balanced whatever the lengths then, see the .cc); where its blocks differ from the balanced ones in more
// than their split (a cluster, other warps) the plan is `plain` itself. Null: balanced whatever the lengths
// (forced). kDriver where the tensor-core instance cannot be resident.
Status plan_balanced(const DecodeAttentionParams& p, const KernelOccupancy& occupancy, const Plan* plain, Plan* plan);

}  // namespace decode_plan
}  // namespace pvt

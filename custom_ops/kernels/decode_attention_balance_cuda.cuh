// Balanced splits on the device (decode_attention_balance_plan.h): which (entry, kv head, row group, split)
// and which keys a block of a balanced tensor-core grid takes, found from the batch's own lengths; and how
// many splits the merge reads for an entry. Every block repeats the same small plan (one warp, no memory
// written but the split size), so no pre-kernel and no host read: CUDA-graph safe.
//
// The plan, in units of kSplitKeysUnit keys: an entry of n keys has steps = ceil(n / unit); a split size
// of c units gives it clamp(ceil(steps / c), 1, depth) splits (one for an entry with no key: its block
// writes its rows), each of kv heads x row groups blocks. c is the smallest size of at least
// balance_min_units whose splits fit the budget (SplitCount::balance_blocks), found by bisection (sums
// over the batch, a warp's shuffles); where even one split an entry does not fit, one split each. The
// blocks are numbered entry by entry, then kv head, split, row group (a kv head's row groups side by
// side, as in the default grid: they read its tiles at about the same time); an entry's steps are spread
// evenly over its splits (as split_range does).
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include "decode_attention_balance_plan.h"
#include "decode_attention_common_cuda.cuh"

namespace pvt {
namespace decode_cuda {

constexpr int kBalancePerLane = static_cast<int>(kBalanceMaxBatch / 32);  // entries a lane scans

// Splits of an entry of `steps` units under a split size of c units (c >= 1).
__device__ __forceinline__ uint32_t balanced_splits_of(uint32_t steps, uint32_t c, uint32_t depth) {
  const uint32_t s = (steps + c - 1) / c;
  return s < 1 ? 1 : s > depth ? depth : s;
}

// Units of an entry's keys as the plan counts them: none where it has no query (no row reads a key).
__device__ __forceinline__ uint32_t balanced_steps(const Entry& e) {
  return e.q_count > 0 ? static_cast<uint32_t>((e.n + kSplitKeysUnit - 1) / kSplitKeysUnit) : 0u;
}

// Splits the merge reads for entry e (merge_splits_kernel): the count its blocks took (a split size of 0:
// the blocks took the plain plan, every entry its plain_n splits).
__device__ __forceinline__ uint32_t balanced_own_splits(const Entry& e, const SplitCount& sc, const Workspace& ws) {
  const uint32_t c = static_cast<uint32_t>(*ws.balance_chunk);
  return c == 0 ? static_cast<uint32_t>(sc.plain_n) : balanced_splits_of(balanced_steps(e), c, static_cast<uint32_t>(sc.n));
}

struct BalancedBlock {
  int eh = 0, rg = 0;       // (entry x kv heads + kv head), row group
  int split = 0, splits = 1;
  int64_t lo = 0, hi = 0;   // its keys (balanced splits only)
  bool plain = false;       // the plain plan's block (SplitCount::plain_n): its keys by split_range
};

__device__ __forceinline__ uint32_t warp_sum(uint32_t x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// This block's work, or false where it has none (past the batch's splits). Every thread of the block calls
// it first thing after wait_for_previous_grid (two barriers inside); warp 0 plans, block 0 writes the split
// size for the merge (0 where the blocks took the plain plan). With SplitCount::plain_n (the rule) every block
// first decides from the same lengths, the same way (balance_skewed), whether the batch is skewed: if not,
// block x + y * (entries x kv heads x row groups) takes the plain grid's block (x, y), the rest leave.
// `work`: 6 words of the kernel's dynamic shared memory, free until it returns (no static shared memory: it
// would shift the kernel's dynamic tiles and count in every instance's footprint).
__device__ __forceinline__ bool balanced_block(const DecodeAttentionParams& p, const SplitCount& sc, int row_groups,
                                               const Workspace& ws, int64_t* work, BalancedBlock* out) {
  // work: found, eh, rg, split, splits, lo | hi << 32
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x), B = static_cast<int>(p.batch);
    const int per = (B + 31) / 32;  // the lane's entries: lane * per .. lane * per + per - 1
    const uint32_t blocks_a_split = static_cast<uint32_t>(p.kv_heads) * static_cast<uint32_t>(row_groups);
    const uint32_t depth = static_cast<uint32_t>(sc.n), budget = static_cast<uint32_t>(sc.balance_blocks);
    uint32_t steps[kBalancePerLane], total = 0, most = 0;
#pragma unroll
    for (int i = 0; i < kBalancePerLane; ++i) {
      const int b = lane * per + i;
      steps[i] = i < per && b < B ? balanced_steps(entry_of(p, b)) : 0u;
      total += steps[i];
      most = steps[i] > most ? steps[i] : most;
    }
    total = warp_sum(total);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) most = max(most, __shfl_xor_sync(0xffffffffu, most, o));
    if (sc.plain_n > 0 && !balance_skewed(most, total, static_cast<uint32_t>(B))) {  // even lengths: the plain grid
      const uint32_t w = blockIdx.x, blocks_x = static_cast<uint32_t>(B) * blocks_a_split;
      if (lane == 0) {
        const uint32_t y = w / blocks_x, x = w - y * blocks_x;
        work[0] = y < static_cast<uint32_t>(sc.plain_n) ? 2 : 0;
        work[1] = x / static_cast<uint32_t>(row_groups);
        work[2] = x - static_cast<uint32_t>(work[1]) * static_cast<uint32_t>(row_groups);
        work[3] = y;
        work[4] = sc.plain_n;
        work[5] = 0;
        if (w == 0 && ws.balance_chunk != nullptr) *ws.balance_chunk = 0;
      }
      __syncwarp();
    } else {
      // Splits of the lane's live entries under split size c; the blocks of the whole batch's.
      auto lane_splits = [&](uint32_t c) {
        uint32_t s = 0;
#pragma unroll
        for (int i = 0; i < kBalancePerLane; ++i) {
          if (i < per && lane * per + i < B) s += balanced_splits_of(steps[i], c, depth);
        }
        return s;
      };
      auto blocks = [&](uint32_t c) { return static_cast<uint64_t>(warp_sum(lane_splits(c))) * blocks_a_split; };
      // Units a block if `n` blocks took even shares: a lower bound of the size (in float, one below: a 64-bit
      // division is a subroutine call, whose calling convention the whole kernel pays for).
      auto even = [&](uint32_t n) {
        const float x = static_cast<float>(total) * static_cast<float>(blocks_a_split) / static_cast<float>(n);
        return x >= 2.f ? static_cast<uint32_t>(x) - 1u : 0u;
      };
      // The smallest size in [lo, hi] whose blocks fit n (hi where none does).
      auto smallest_fitting = [&](uint32_t lo, uint32_t hi, uint32_t n) {
        while (lo < hi) {
          const uint32_t mid = lo + (hi - lo) / 2;
          if (blocks(mid) <= n) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        return lo;
      };
      const uint32_t lo = max(static_cast<uint32_t>(sc.balance_min_units), even(budget));
      uint32_t c = smallest_fitting(lo, max(lo, most), budget);
      // One wave instead (at most the resident blocks, SplitCount::balance_wave), where its size is at most 1/8
      // longer than the budget's or than a resident block's even share, whichever is longer: no block of the
      // budget's plan can finish sooner than that share, so its extra splits would only add partials. Meant for
      // equal lengths to keep one wave and skewed ones the budget (one wave leaves a long entry in one or two
      // blocks); on the H200 equal lengths still cost 3-17% against the plain plan (docs/H200_DECODE_PARITY.md),
      // which is why under the rule the blocks take the plain plan where the lengths are even (above).
      const uint32_t wave = static_cast<uint32_t>(sc.balance_wave);
      if (wave > 0 && wave < budget) {
        const uint32_t c_wave = smallest_fitting(c, max(c, most), wave);
        const uint32_t share = max(c, even(wave) + 1u);
        if (blocks(c_wave) <= wave && c_wave * 8u <= share * 9u) c = c_wave;
      }
      // The lane's first block: an exclusive scan of the lanes' splits.
      const uint32_t mine = lane_splits(c);
      uint32_t incl = mine;
#pragma unroll
      for (int o = 1; o < 32; o *= 2) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      if (lane == 0) work[0] = 0;
      __syncwarp();
      const uint64_t w = blockIdx.x;
      uint64_t base = static_cast<uint64_t>(incl - mine) * blocks_a_split;
#pragma unroll
      for (int i = 0; i < kBalancePerLane; ++i) {
        const int b = lane * per + i;
        if (i < per && b < B) {
          const uint32_t s = balanced_splits_of(steps[i], c, depth);
          const uint64_t n_blocks = static_cast<uint64_t>(s) * blocks_a_split;
          if (w >= base && w < base + n_blocks) {
            const uint32_t local = static_cast<uint32_t>(w - base), rg = local % row_groups, q = local / row_groups;
            const uint32_t j = q % s, kvh = q / s;
            const uint32_t each = steps[i] / s, extra = steps[i] % s;
            const uint32_t first = j * each + (j < extra ? j : extra), last = first + each + (j < extra ? 1 : 0);
            const int64_t n = entry_of(p, b).n;
            const int64_t klo = static_cast<int64_t>(first) * kSplitKeysUnit;
            const int64_t khi = static_cast<int64_t>(last) * kSplitKeysUnit;
            work[0] = 1;
            work[1] = static_cast<int64_t>(b) * p.kv_heads + kvh;
            work[2] = rg;
            work[3] = j;
            work[4] = s;
            work[5] = (klo < n ? klo : n) | ((khi < n ? khi : n) << 32);
          }
          base += n_blocks;
        }
      }
      if (blockIdx.x == 0 && lane == 0 && ws.balance_chunk != nullptr) *ws.balance_chunk = static_cast<int32_t>(c);
    }
  }
  __syncthreads();
  const bool found = work[0] != 0;
  out->plain = work[0] == 2;
  out->eh = static_cast<int>(work[1]);
  out->rg = static_cast<int>(work[2]);
  out->split = static_cast<int>(work[3]);
  out->splits = static_cast<int>(work[4]);
  out->lo = work[5] & 0xffffffffll;
  out->hi = work[5] >> 32;
  __syncthreads();  // every thread has read `work` before the tiles may overwrite it
  return found;
}

}  // namespace decode_cuda
}  // namespace pvt

// Span grids (issue 32, point 3; decode_attention_balance_plan.h): a fixed grid of G blocks (the budget,
// Plan::balance_blocks) that cut the batch's keys into G equal ranges. The work is every (entry, kv head)
// pair's keys in units of kSplitKeysUnit, laid end to end (entry by entry, then kv head): T units in all,
// and block g takes units [ceil(g T / G), ceil((g + 1) T / G)). A range holds the end of one pair, whole
// pairs and the start of another, so every block streams the same number of keys whatever the lengths
// (with fewer units than blocks, G is the units: a unit a block, the rest none):
// the balanced grid's blocks (decode_attention_balance_cuda.cuh) each take one split of one pair, and where
// the hardware pairs a long split with a short one on an SM, that SM ends last (docs/H200_DECODE_PARITY.md,
// the SM-id probe). A pair inside one range is finished by its block (one split: its rows written); a pair
// cut by range ends has a split in each block it crosses (split j in block g0 + j, g0 the block holding
// its first unit), merged by merge_splits_kernel, which reads the pair's count from the workspace (the block
// of split 0 writes it). Pairs with no unit (no key: refused; no query: nothing to write) belong to block
// (index % G). Every block plans from the lengths on the device (one warp, one L2 round trip): CUDA-graph
// safe, nothing read back on the host.
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include "decode_attention_balance_cuda.cuh"
#include "decode_attention_common_cuda.cuh"
#include "decode_attention_mma_cuda.cuh"

namespace pvt {
namespace decode_cuda {

// Shared memory past the tiles (mma_smem_bytes): the entries' unit prefix pre[0..B] and the list of
// entries with queries and no unit, with its count.
constexpr size_t kSpanSmemBytes = (2 * static_cast<size_t>(kBalanceMaxBatch) + 2) * sizeof(uint32_t);

// Range ends in units: ceil(g T / G). In double: g T < 2^43, and a non-integer g T / G is at least 1 / G
// away from an integer, far above double's rounding at these sizes, so the ceiling is exact (a 64-bit
// integer division would be a subroutine call that every register of the kernel pays for).
__device__ __forceinline__ uint32_t span_edge(uint32_t g, uint32_t total, uint32_t blocks) {
  return static_cast<uint32_t>(ceil(static_cast<double>(g) * static_cast<double>(total) / static_cast<double>(blocks)));
}

// The block whose range holds unit u < total: floor(u G / T), exact as above.
__device__ __forceinline__ uint32_t span_block_of(uint32_t u, uint32_t total, uint32_t blocks) {
  return static_cast<uint32_t>(floor(static_cast<double>(u) * static_cast<double>(blocks) / static_cast<double>(total)));
}

// Warp 0 writes pre[b] = units of entries 0 .. b - 1 (b = 0 .. B) and the entries with queries and no unit;
// every thread returns after the barrier.
__device__ __forceinline__ void span_prefix(const DecodeAttentionParams& p, uint32_t* pre, uint32_t* zero,
                                            uint32_t* zero_count) {
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x), B = static_cast<int>(p.batch);
    const int per = (B + 31) / 32;  // the lane's entries: lane * per .. lane * per + per - 1
    uint32_t steps[kBalancePerLane], mine = 0, zeros = 0;
#pragma unroll
    for (int i = 0; i < kBalancePerLane; ++i) {
      const int b = lane * per + i;
      steps[i] = 0;
      if (i < per && b < B) {
        const Entry e = entry_of(p, b);
        steps[i] = balanced_steps(e);
        zeros += steps[i] == 0 && e.q_count > 0;
      }
      mine += steps[i];
    }
    uint32_t incl = mine, zincl = zeros;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o), z = __shfl_up_sync(0xffffffffu, zincl, o);
      if (lane >= o) incl += v, zincl += z;
    }
    uint32_t at = incl - mine, zat = zincl - zeros;
#pragma unroll
    for (int i = 0; i < kBalancePerLane; ++i) {
      const int b = lane * per + i;
      if (i < per && b < B) {
        pre[b] = at;
        at += steps[i];
        if (steps[i] == 0 && entry_of(p, b).q_count > 0) zero[zat++] = static_cast<uint32_t>(b);
      }
    }
    if (lane == 31) {
      pre[B] = incl;
      *zero_count = zincl;
    }
  }
  __syncthreads();
}

// T, D, WARPS, MT as decode_attention_mma_kernel's; row groups: one (the planner's condition for a span grid).
template <typename T, int D, int WARPS, int MT>
__global__ void __launch_bounds__(WARPS * 32)
    decode_attention_mma_span_kernel(const DecodeAttentionParams p, const SplitCount splits, Workspace ws,
                                     const bool cluster, const int row_groups) {
  extern __shared__ __align__(16) uint4 smem[];
  uint32_t* pre = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(smem) + mma_smem_bytes(D, WARPS, MT));
  uint32_t* zero = pre + kBalanceMaxBatch + 1;
  uint32_t* zero_count = zero + kBalanceMaxBatch;
  wait_for_previous_grid();
  span_prefix(p, pre, zero, zero_count);
  const uint32_t B = static_cast<uint32_t>(p.batch), H = static_cast<uint32_t>(p.kv_heads);
  const uint32_t g = blockIdx.x, total = pre[B] * H;  // the host bounds B x units x H < 2^32
  // Ranges of at least one unit: with fewer units than blocks, blocks total.. take none (an empty range
  // between two of a pair's would leave its splits fewer than the blocks from its first to its last).
  const uint32_t G = gridDim.x < total ? gridDim.x : total;
  // A piece: keys [s_lo, s_hi) of pair (b, hk), split `split` of `count`.
  auto run = [&](uint32_t b, uint32_t hk, uint32_t split, uint32_t count, int64_t s_lo, int64_t s_hi) {
    const Entry e = entry_of(p, b);
    if (e.refused && p.error_flag != nullptr && split == 0 && threadIdx.x == 0) *p.error_flag = 1;
    if (split == 0 && threadIdx.x == 0 && ws.pair_splits != nullptr) ws.pair_splits[b * H + hk] = static_cast<int32_t>(count);
    mma_block<T, D, WARPS, MT>(p, ws, cluster, smem, e, b, hk, 0, split, count, s_lo, s_hi);
    __syncthreads();  // the next piece reuses the tiles' space
  };
  if (g < G) {
    uint32_t cur = span_edge(g, total, G);
    const uint32_t hi = span_edge(g + 1, total, G);
    while (cur < hi) {
      // The entry whose units hold cur: the last b with pre[b] H <= cur (entries with no unit are passed over).
      uint32_t lo_b = 0, hi_b = B - 1;
      while (lo_b < hi_b) {
        const uint32_t mid = (lo_b + hi_b + 1) / 2;
        if (pre[mid] * H <= cur) {
          lo_b = mid;
        } else {
          hi_b = mid - 1;
        }
      }
      const uint32_t b = lo_b, steps = pre[b + 1] - pre[b], local = cur - pre[b] * H;
      const uint32_t hk = local / steps, off = local - hk * steps;
      const uint32_t end = off + (hi - cur) < steps ? off + (hi - cur) : steps;  // the piece: units [off, end)
      const uint32_t start = pre[b] * H + hk * steps;                           // the pair's first unit
      const uint32_t g0 = span_block_of(start, total, G), g1 = span_block_of(start + steps - 1, total, G);
      const int64_t n = entry_of(p, b).n;
      const int64_t s_lo = static_cast<int64_t>(off) * kSplitKeysUnit;
      const int64_t s_hi = static_cast<int64_t>(end) * kSplitKeysUnit < n ? static_cast<int64_t>(end) * kSplitKeysUnit : n;
      run(b, hk, g - g0, g1 - g0 + 1, s_lo, s_hi);
      cur += end - off;
    }
  }
  // Pairs with queries and no unit: their rows (zeros, lse -inf; the refusal's flag) in one split.
  const uint32_t zero_pairs = *zero_count * H;
  for (uint32_t z = g; z < zero_pairs; z += gridDim.x) run(zero[z / H], z % H, 0, 1, 0, 0);
}

}  // namespace decode_cuda
}  // namespace pvt

// merge_splits_wide_kernel: the merge kernel for many splits (Plan::merge_wide; past kMergeChunk splits by
// default, DecodeOptions::merge_wide forces it either way). merge_splits_kernel gives each thread one element
// of the row and walks the splits in chunks of kMergeChunk, one L2 round trip a chunk, one after the other: 64
// splits (MQA 32/1 at B = 1) are four round trips. Here the block's kMergeThreads threads are spread over the
// splits as well: thread (q, c) of Q = kMergeThreads / (D / V) groups takes V elements (a float4 where D % 4
// == 0 and the workspace is 16-byte aligned) of splits q, q + Q, q + 2Q, ..., kMergeLoads of them loaded
// together (clamped indices, no branch), so up to Q x kMergeLoads splits (64 at D = 128) are one round trip;
// the groups' (m, l, acc) then meet in shared memory and each element is folded over them. At few splits
// most groups have nothing to load and the meeting's barrier and second fold are pure cost: the H200 measured
// it 0.3-8 % slower than merge_splits_kernel at 4-16 splits and 2-6 % faster at 33 (2026-12-03,
// docs/H200_DECODE_PARITY.md).
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include "decode_attention_balance_cuda.cuh"
#include "decode_attention_common_cuda.cuh"
#include "decode_attention_plan.h"
#include "merge_fold_cuda.cuh"

namespace pvt {
namespace decode_cuda {

// One block per (b, h, t) row, kMergeThreads threads; the splits and their weights as merge_splits_kernel's.
template <typename T, int V>
__global__ void __launch_bounds__(decode_plan::kMergeThreads)
    merge_splits_wide_kernel(const DecodeAttentionParams p, const SplitCount all_splits, Workspace ws) {
  constexpr int kThreads = decode_plan::kMergeThreads, kLoads = decode_plan::kMergeLoads;
  __shared__ float group_m[kThreads], group_l[kThreads];
  __shared__ __align__(16) float group_acc[kThreads * V];  // [Q][D]: Q x D <= kThreads x V
  const int64_t g = blockIdx.x;
  const int D = static_cast<int>(p.head_dim);  // <= kCudaMaxHeadDim (checked by the host)
  const int tq = static_cast<int>(p.q_len), hq = static_cast<int>(p.q_heads);  // grid limits checked
  const int row = static_cast<int>(blockIdx.x), t = row % tq, h = (row / tq) % hq, b = row / (tq * hq);
  const int64_t rows_total = p.batch * p.q_heads * p.q_len;
  wait_for_previous_grid();  // the main kernel's partials are complete and visible
  allow_next_grid();         // as merge_splits_kernel: the next call's blocks wait for this grid
  const Entry e = entry_of(p, b);
  if (t >= e.q_count) return;  // the whole block: no barrier below is left waiting
  int64_t splits = own_splits(all_splits, e.n);
  if (all_splits.balance_blocks > 0) {
    splits = balanced_own_splits(e, all_splits, ws);
    if (splits == 1) return;
  }
  const int C = D / V, Q = C < kThreads ? kThreads / C : 1;
  const int tid = static_cast<int>(threadIdx.x), q = tid / C, c = tid % C;
  if (q < Q) {
    float m = -INFINITY, l = 0.f, a[V];
#pragma unroll
    for (int v = 0; v < V; ++v) a[v] = 0.f;
    for (int64_t j0 = q; j0 < splits; j0 += static_cast<int64_t>(Q) * kLoads) {
      float mj[kLoads], lj[kLoads], aj[kLoads][V];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int64_t j = j0 + static_cast<int64_t>(Q) * u < splits ? j0 + static_cast<int64_t>(Q) * u : splits - 1;
        const int64_t at = j * rows_total + g;
        if constexpr (V == 4) {
          const float2 ml = *reinterpret_cast<const float2*>(ws.ml + at * 2);
          const float4 x = *reinterpret_cast<const float4*>(ws.acc + at * D + 4 * c);
          mj[u] = ml.x, lj[u] = ml.y;
          aj[u][0] = x.x, aj[u][1] = x.y, aj[u][2] = x.z, aj[u][3] = x.w;
        } else {
          mj[u] = ws.ml[at * 2];
          lj[u] = ws.ml[at * 2 + 1];
#pragma unroll
          for (int v = 0; v < V; ++v) aj[u][v] = ws.acc[at * D + V * c + v];
        }
      }
      const int64_t live = (splits - j0 + Q - 1) / Q;  // loads u < live are splits of this group
      fold_partials(mj, lj, aj, live, &m, &l, a, [](float x) { return __expf(x); });
    }
    if (c == 0) group_m[q] = m, group_l[q] = l;
#pragma unroll
    for (int v = 0; v < V; ++v) group_acc[q * D + V * c + v] = a[v];
  }
  __syncthreads();
  for (int d = tid; d < D; d += kThreads) {
    float mx = -INFINITY;
    for (int k = 0; k < Q; ++k) mx = fmaxf(mx, group_m[k]);
    float sum = 0.f, acc = 0.f;
    if (mx != -INFINITY) {
      for (int k = 0; k < Q; ++k) {
        const float w = __expf(group_m[k] - mx);  // 0 for a group that saw nothing
        sum += w * group_l[k];
        acc += w * group_acc[k * D + d];
      }
    }
    write_row<T>(p, e, b, t, h, d, mx, sum, acc);
  }
}

}  // namespace decode_cuda
}  // namespace pvt

// How the splits of the keys are merged (which one: plan_cluster in decode_attention_plan.cc):
//   * merge_splits_kernel: a second small kernel merges the partials every split left in the workspace
//     (as FlashInfer's and flash-attention's split-KV decode do), launched as a programmatic dependent
//     launch behind the main kernel.
//   * finish_block: how a tensor-core block ends (decode_attention_mma_cuda.cuh). Its softmax partials
//     for its rows (m, l, acc over its split) are complete in its shared memory, and one of three things
//     happens. One split: the block writes its rows (out, lse). Splits in one thread-block cluster
//     (Hopper): the blocks of an (entry, kv head, row group) are one cluster (grid y = splits = cluster
//     y); they read each other's partials through distributed shared memory and each writes a share of
//     the rows: no workspace round trip and no second kernel, which is what the latency-bound short
//     contexts pay for otherwise (plan_cluster in decode_attention_plan.cc). Otherwise: the partials go
//     to the workspace, for merge_splits_kernel, or, where the caller gave split counters
//     (DecodeAttentionParams::split_counters) and asked for it (DecodeOptions::last_block_merge), for the last
//     block of the row group to finish, which merges them there (TensorRT-LLM XQA's design: no second kernel,
//     whose launch and tail cost 5.3-5.8 us on the H200 after a skewed per-slot batch). Measured slower than
//     the merge kernel wherever it merged (docs/H200_DECODE_PARITY.md, issue 32 point 4), hence not the default.
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include <cooperative_groups.h>

#include "decode_attention_balance_cuda.cuh"
#include "decode_attention_common_cuda.cuh"
#include "merge_fold_cuda.cuh"

namespace pvt {
namespace decode_cuda {

// Element d (of D) of workspace row g (in [B, Hq, Tq]) merged over the first `splits` splits' partials into
// (m, l, a). Each split's (m, l) and accumulator for the element are loaded kMergeChunk splits at a time, with
// clamped indices and no branch, so a chunk is ONE L2 round trip, then folded as an online softmax
// (fold_partials). (A loop over the splits with a load behind a branch per split waits out one L2 latency per
// split: under Nsight Compute 19 us for 32 splits on the H200; block-wide reductions of m and then l between
// the loads cost three round trips and four barriers: 3.3-5.2 us a merge against cuDNN's 1.9-2.8 for its own.)
// load(ptr): how a float of the workspace is read (plain in the merge kernel; past L1 in the last block, which
// reads what other blocks of its grid wrote). Shared by both merges, so their results are the same. (Two
// elements at once in the last block, for one round trip where it takes two, took the tensor-core kernel from
// 128-173 registers to 212-225, ptxas: one 8-warp block an SM instead of two.)
template <class Load>
__device__ __forceinline__ void merge_workspace_element(const Workspace& ws, int64_t rows_total, int64_t g, int64_t D,
                                                        int64_t d, int64_t splits, Load load, float* m, float* l,
                                                        float* a) {
  *m = -INFINITY, *l = 0.f, *a = 0.f;
  for (int64_t j0 = 0; j0 < splits; j0 += kMergeChunk) {
    float mj[kMergeChunk], lj[kMergeChunk], aj[kMergeChunk];
#pragma unroll
    for (int u = 0; u < kMergeChunk; ++u) {
      const int64_t j = j0 + u < splits ? j0 + u : splits - 1;  // in range: loads without a branch
      const int64_t at = j * rows_total + g;
      mj[u] = load(ws.ml + at * 2);
      lj[u] = load(ws.ml + at * 2 + 1);
      aj[u] = load(ws.acc + at * D + d);
    }
    fold_partials(mj, lj, aj, splits - j0, m, l, a, [](float x) { return __expf(x); });
  }
}

// One block per (b, h, t) row: merges the splits' partial softmax results. Splits that saw no key
// (m = -inf, e.g. past a shorter entry's length) get weight 0; every split wrote its accumulator
// (zeros then). Each thread merges its output elements on its own (merge_workspace_element).
template <typename T>
__global__ void merge_splits_kernel(const DecodeAttentionParams p, const SplitCount all_splits, Workspace ws) {
  const int64_t g = blockIdx.x, D = p.head_dim;
  const int tq = static_cast<int>(p.q_len), hq = static_cast<int>(p.q_heads);  // grid limits checked
  const int row = static_cast<int>(blockIdx.x), t = row % tq, h = (row / tq) % hq, b = row / (tq * hq);
  const int64_t rows_total = p.batch * p.q_heads * p.q_len;
  wait_for_previous_grid();  // the main kernel's partials are complete
  // The next kernel (the next layer's attention, launched the same way) may be placed while this one
  // merges: its blocks wait for this grid before they read or write anything.
  allow_next_grid();
  const Entry e = entry_of(p, b);
  if (t >= e.q_count) return;
  int64_t splits = own_splits(all_splits, e.n);  // every split, or with fixed ones the entry's own
  if (all_splits.balance_blocks > 0) {  // balanced: the entry's own count; with one, its block wrote the row
    splits = balanced_own_splits(e, all_splits, ws);
    if (splits == 1) return;
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float m, l, a;
    merge_workspace_element(ws, rows_total, g, D, d, splits, [](const float* x) { return *x; }, &m, &l, &a);
    write_row<T>(p, e, b, t, h, d, m, l, a);
  }
}

// The last block of a row group to finish merges every split's partials (its own included) from the
// workspace and writes the rows, as merge_splits_kernel would (merge_workspace_element: the same fold in the
// same order). Every thread of the block calls it right after storing its partials. Each thread fences its
// stores (release), the block's one atomicAdd counts the block in; the block that sees splits - 1 before its
// add is the last: every other split's partials are complete and visible (fenced before their adds), it sets
// the counter back to 0 (no other block of this grid touches it again: all have added), fences (acquire) and
// reads the partials past L1 (__ldcg). A later call reads the counter only after this grid has completed (stream
// order, or its wait_for_previous_grid), so the counters are zero between calls without a memset.
template <typename T, int D, int NTHR, class HeadAndToken>
__device__ __forceinline__ void merge_in_last_block(const DecodeAttentionParams& p, const Entry& e, int64_t b, int nrows,
                                                    int group, int64_t splits, const Workspace& ws,
                                                    HeadAndToken head_and_token) {
  __threadfence();
  __syncthreads();  // every thread's partials stored and fenced before the block counts itself in
  int last = 0;
  if (threadIdx.x == 0) {
    int32_t* counter = ws.counters + group;
    last = atomicAdd(counter, 1) == static_cast<int>(splits) - 1;
    if (last) atomicExch(counter, 0);
  }
  if (!__syncthreads_or(last)) return;
  __threadfence();
  const int64_t rows_total = p.batch * p.q_heads * p.q_len;
  for (int i = static_cast<int>(threadIdx.x); i < nrows * D; i += NTHR) {
    const int r = i / D, d = i % D;
    int64_t h, t;
    head_and_token(r, &h, &t);
    if (t >= e.q_count) continue;
    const int64_t g = (b * p.q_heads + h) * p.q_len + t;  // row in [B, Hq, Tq], as store_partial's
    float m, l, a;
    merge_workspace_element(ws, rows_total, g, D, d, splits, [](const float* x) { return __ldcg(x); }, &m, &l, &a);
    write_row<T>(p, e, b, t, h, d, m, l, a);
  }
}

// A block's finished partials in its shared memory, rows 0 .. nrows - 1 of its row group.
struct BlockRows {
  float* m = nullptr;    // [rows] max scaled score, natural-log units; -inf: the split saw no key
  float* l = nullptr;    // [rows] sum of exp(score - m)
  float* acc = nullptr;  // [rows][acc_stride] sum of exp(score - m) * v
  int acc_stride = 0;
  int row0 = 0;          // row r of the block is row row0 + r of its kv head (a row group's first row)
};

// Every thread of the block calls it, after a __syncthreads() that completed `st`, and none may
// have returned before (the cluster barrier counts every thread). Row r is query row st.row0 + r of kv
// head hk (rows 0 .. nrows - 1 < 2^31): query head hk * G + r / Tq, token r % Tq. D is the head dim: a
// constant, so that the index arithmetic is a few instructions (a short block's cost is its
// instruction count); NTHR the block's threads.
// `group`: the row group's index, (entry x kv heads + kv head) x row groups + row group (its split counter);
// `splits`: the blocks of this row group in this call (a balanced entry's own count).
template <typename T, int D, int NTHR>
__device__ __forceinline__ void finish_block(const DecodeAttentionParams& p, const Entry& e, int64_t b, int64_t hk,
                                             int nrows, int group, int64_t split, int64_t splits,
                                             const Workspace& ws, bool cluster, const BlockRows& st) {
  // 32-bit: a 64-bit division is a subroutine call (the host checks the sizes against the grid limits).
  const int64_t Tq = p.q_len, G = static_cast<int>(p.q_heads) / static_cast<int>(p.kv_heads);
  const int tq = static_cast<int>(Tq);
  const int tid = static_cast<int>(threadIdx.x);
  const int n_out = nrows * D;
  auto head_and_token = [&](int r, int64_t* h, int64_t* t) {
    const int hg = (st.row0 + r) / tq;
    *h = hk * G + hg;
    *t = st.row0 + r - hg * tq;
  };
  if (!cluster) {
    for (int i = tid; i < n_out; i += NTHR) {
      const int r = i / D, d = i % D;
      int64_t h, t;
      head_and_token(r, &h, &t);
      if (t >= e.q_count) continue;  // no such query in this entry: nothing to write
      store_split_row<T>(p, e, b, t, h, d, D, split, splits, ws, st.m[r], st.l[r], st.acc[r * st.acc_stride + d]);
    }
    if (splits > 1 && ws.counters != nullptr) merge_in_last_block<T, D, NTHR>(p, e, b, nrows, group, splits, ws, head_and_token);
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  const int C = static_cast<int>(splits);  // the cluster is exactly this row group's splits
  cl.sync();  // every split's partials are in its block's shared memory (release / acquire)
  // This block's share of the outputs: a contiguous slice, so every block of the cluster writes. Each
  // element is merged by its own thread: all peers' (m, l, acc) are loaded at once (indices clamped to
  // the cluster, no branch), so the merge is one round trip through distributed shared memory and no
  // block barrier (a phase of (m, l) loads, then weights, then the accumulators cost three round trips
  // and two barriers: 39% of a B=1 S=1k block's stall samples under Nsight Compute, with the barriers).
  const int share = (n_out + C - 1) / C, begin = static_cast<int>(cl.block_rank()) * share;
  const int end = begin + share < n_out ? begin + share : n_out;
  for (int i = begin + tid; i < end; i += NTHR) {
    const int r = i / D, d = i % D;
    int64_t h, t;
    head_and_token(r, &h, &t);
    if (t >= e.q_count) continue;
    float mc[kMaxClusterSplits], lc[kMaxClusterSplits], ac[kMaxClusterSplits];
#pragma unroll
    for (int c = 0; c < kMaxClusterSplits; ++c) {
      const unsigned rank = static_cast<unsigned>(c < C ? c : C - 1);
      mc[c] = *cl.map_shared_rank(st.m + r, rank);
      lc[c] = *cl.map_shared_rank(st.l + r, rank);
      ac[c] = *cl.map_shared_rank(st.acc + r * st.acc_stride + d, rank);
    }
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < kMaxClusterSplits; ++c) {
      if (c >= C) mc[c] = -INFINITY;  // a repeat of the last peer: no weight
      mx = fmaxf(mx, mc[c]);
    }
    float sum = 0.f, a = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int c = 0; c < kMaxClusterSplits; ++c) {
        const float w = __expf(mc[c] - mx);  // 0 for a split that saw nothing
        sum += w * lc[c];
        a += w * ac[c];
      }
    }
    write_row<T>(p, e, b, t, h, d, mx, sum, a);
  }
  cl.sync();  // no block leaves (its shared memory with it) while a peer may still read it
#else
  __trap();  // unreachable: the host plans clusters only for kernels built for sm_90 or newer
#endif
}

}  // namespace decode_cuda
}  // namespace pvt

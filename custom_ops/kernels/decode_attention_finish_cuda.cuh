// How a tensor-core decode-attention block ends (decode_attention_mma_cuda.cuh): the block's softmax
// partials for its rows (m, l, acc over its split of the keys) are complete in its shared memory, and
// one of three things happens.
//   * One split: the block writes its rows (out, lse).
//   * Splits in one thread-block cluster (Hopper): the blocks of an (entry, kv head, row group) are
//     one cluster (grid y = splits = cluster y). They read each other's partials through distributed
//     shared memory and each writes a share of the rows: no workspace round trip and no second kernel,
//     which is what the latency-bound short contexts pay for otherwise (when the plan picks this:
//     plan_cluster in decode_attention_cuda.cu).
//   * Otherwise: the partials go to the workspace, and merge_splits_kernel (decode_attention_cuda.cu)
//     merges them.
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include <cooperative_groups.h>

#include "decode_attention_common_cuda.cuh"

namespace pvt {
namespace decode_cuda {

// Most blocks of a cluster: the portable limit (Hopper allows 16 as an opt-in, which measured slower).
constexpr int kMaxClusterSplits = 8;

// A block's finished partials in its shared memory, rows 0 .. nrows - 1 of its row group.
struct BlockRows {
  float* m = nullptr;    // [rows] max scaled score, natural-log units; -inf: the split saw no key
  float* l = nullptr;    // [rows] sum of exp(score - m)
  float* acc = nullptr;  // [rows][acc_stride] sum of exp(score - m) * v
  int acc_stride = 0;
};

// Every thread of the block calls it, after a __syncthreads() that completed `st`, and none may
// have returned before (the cluster barrier counts every thread). Row r is query row r of kv head hk
// (rows 0 .. nrows - 1 < 2^31): query head hk * G + r / Tq, token r % Tq. D is the head dim: a
// constant, so that the index arithmetic is a few instructions (a short block's cost is its
// instruction count); NTHR the block's threads.
template <typename T, int D, int NTHR>
__device__ __forceinline__ void finish_block(const DecodeAttentionParams& p, const Entry& e, int64_t b, int64_t hk,
                                             int nrows, int64_t split, int64_t splits, const Workspace& ws,
                                             bool cluster, const BlockRows& st) {
  // 32-bit: a 64-bit division is a subroutine call (the host checks the sizes against the grid limits).
  const int64_t Tq = p.q_len, G = static_cast<int>(p.q_heads) / static_cast<int>(p.kv_heads);
  const int tq = static_cast<int>(Tq);
  const int tid = static_cast<int>(threadIdx.x);
  const int n_out = nrows * D;
  auto head_and_token = [&](int r, int64_t* h, int64_t* t) {
    const int hg = r / tq;
    *h = hk * G + hg;
    *t = r - hg * tq;
  };
  if (!cluster) {
    const int64_t rows_total = p.batch * p.q_heads * Tq;
    for (int i = tid; i < n_out; i += NTHR) {
      const int r = i / D, d = i % D;
      int64_t h, t;
      head_and_token(r, &h, &t);
      if (t >= e.q_count) continue;  // no such query in this entry: nothing to write
      const float m = st.m[r], l = st.l[r], a = st.acc[r * st.acc_stride + d];
      if (splits == 1) {
        write_row<T>(p, e, b, t, h, d, m, l, a);
      } else {
        const int64_t g = (b * p.q_heads + h) * Tq + t;  // row in [B, Hq, Tq]
        if (d == 0) {
          ws.ml[(split * rows_total + g) * 2] = m;
          ws.ml[(split * rows_total + g) * 2 + 1] = l;
        }
        ws.acc[(split * rows_total + g) * D + d] = a;  // zeros when the split saw nothing: the merge reads all
      }
    }
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

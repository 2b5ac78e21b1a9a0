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

// Shared-memory floats `finish_block` needs besides the partials, for up to MAX_ROWS rows.
template <int MAX_ROWS>
__host__ __device__ constexpr int finish_scratch_floats() {
  return 2 * kMaxClusterSplits * MAX_ROWS + 2 * MAX_ROWS;
}

// Every thread of the block calls it, after a __syncthreads() that completed `st`, and none may
// have returned before (the cluster barrier counts every thread). Row r is query row r of kv head hk
// (rows 0 .. nrows - 1 < 2^31): query head hk * G + r / Tq, token r % Tq. D is the head dim: a
// constant, so that the index arithmetic is a few instructions (a short block's cost is its
// instruction count).
template <typename T, int MAX_ROWS, int D>
__device__ __forceinline__ void finish_block(const DecodeAttentionParams& p, const Entry& e, int64_t b, int64_t hk,
                                             int nrows, int64_t split, int64_t splits, const Workspace& ws,
                                             bool cluster, const BlockRows& st, float* scratch) {
  const int64_t Tq = p.q_len, G = p.q_heads / p.kv_heads;
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
    for (int i = tid; i < n_out; i += kThreads) {
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
  float* w = scratch;                                 // [C][nrows]: peers' m, then their weights
  float* pl = scratch + kMaxClusterSplits * MAX_ROWS;  // [C][nrows]: peers' l
  float* mx_row = pl + kMaxClusterSplits * MAX_ROWS;   // [nrows]
  float* sum_row = mx_row + MAX_ROWS;                  // [nrows]
  cl.sync();  // every split's partials are in its block's shared memory (release / acquire)
  for (int i = tid; i < C * nrows; i += kThreads) {  // all peers' (m, l) at once: loads in parallel
    const int c = i / nrows, r = i % nrows;
    w[i] = *cl.map_shared_rank(st.m + r, c);
    pl[i] = *cl.map_shared_rank(st.l + r, c);
  }
  __syncthreads();
  for (int r = tid; r < nrows; r += kThreads) {
    float mx = -INFINITY;
    for (int c = 0; c < C; ++c) mx = fmaxf(mx, w[c * nrows + r]);
    float sum = 0.f;
    for (int c = 0; c < C; ++c) {
      const float mc = w[c * nrows + r];
      const float s = (mx == -INFINITY || mc == -INFINITY) ? 0.f : __expf(mc - mx);
      w[c * nrows + r] = s;
      sum += s * pl[c * nrows + r];
    }
    mx_row[r] = mx;
    sum_row[r] = sum;
  }
  __syncthreads();
  // This block's share of the outputs: a contiguous slice, so every block of the cluster writes.
  const int share = (n_out + C - 1) / C, begin = static_cast<int>(cl.block_rank()) * share;
  const int end = begin + share < n_out ? begin + share : n_out;
  for (int i = begin + tid; i < end; i += kThreads) {
    const int r = i / D, d = i % D;
    int64_t h, t;
    head_and_token(r, &h, &t);
    if (t >= e.q_count) continue;
    float a = 0.f;
#pragma unroll 4
    for (int c = 0; c < C; ++c) a += w[c * nrows + r] * *cl.map_shared_rank(st.acc + r * st.acc_stride + d, c);
    write_row<T>(p, e, b, t, h, d, mx_row[r], sum_row[r], a);
  }
  cl.sync();  // no block leaves (its shared memory with it) while a peer may still read it
#else
  __trap();  // unreachable: the host plans clusters only for kernels built for sm_90 or newer
#endif
}

}  // namespace decode_cuda
}  // namespace pvt

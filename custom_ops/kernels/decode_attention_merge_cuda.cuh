// How the splits of the keys are merged (which one: plan_cluster in decode_attention_plan.cc):
//   * merge_splits_kernel / merge_splits_warp_kernel: a second small kernel merges the partials every split
//     left in the workspace (as FlashInfer's and flash-attention's split-KV decode do), a block or a warp a
//     row, launched as a programmatic dependent launch behind the main kernel.
//   * finish_block: how a tensor-core block ends (decode_attention_mma_cuda.cuh). Its softmax partials
//     for its rows (m, l, acc over its split) are complete in its shared memory, and one of three things
//     happens. One split: the block writes its rows (out, lse). Splits in one thread-block cluster
//     (Hopper): the blocks of an (entry, kv head, row group) are one cluster (grid y = splits = cluster
//     y); they read each other's partials through distributed shared memory and each writes a share of
//     the rows: no workspace round trip and no second kernel, which is what the latency-bound short
//     contexts pay for otherwise (plan_cluster in decode_attention_plan.cc). Otherwise: the partials go
//     to the workspace, for merge_splits_kernel.
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include <cooperative_groups.h>

#include "decode_attention_balance_cuda.cuh"
#include "decode_attention_common_cuda.cuh"
#include "merge_fold_cuda.cuh"

namespace pvt {
namespace decode_cuda {

// A merge row's split count: the entry's own (fixed splits: own_splits; balanced: from the device's chunk), or -1
// where there is nothing to write: no such query in the entry, or a balanced entry of one split (its block wrote the
// row). An empty entry's 0 fixed splits still write its row (zeros).
__device__ __forceinline__ int64_t merge_row_splits(const Entry& e, int t, const SplitCount& all_splits,
                                                    const Workspace& ws) {
  if (t >= e.q_count) return -1;
  if (all_splits.balance_blocks == 0) return own_splits(all_splits, e.n);  // every split, or the entry's own
  const int64_t splits = balanced_own_splits(e, all_splits, ws);
  return splits == 1 ? -1 : splits;
}

// Row g's splits merged for its V elements d0 + dstep v: N splits a step (an online softmax over chunks), the
// chunk's (m, l) and accumulators loaded together, with clamped indices and no branch, so a step is ONE L2 round
// trip. (A loop over the splits with a load behind a branch per split waits out one L2 latency per split: under
// Nsight Compute 19 us for 32 splits on the H200; block-wide reductions of m and then l between the loads cost
// three round trips and four barriers: 3.3-5.2 us a merge against cuDNN's 1.9-2.8 for its own.) Splits that saw
// no key (m = -inf, e.g. past a shorter entry's length) get weight 0; every split wrote its accumulator.
template <int N, int V>
__device__ __forceinline__ void merge_row(const Workspace& ws, int64_t rows_total, int64_t g, int64_t D, int64_t d0,
                                          int64_t dstep, int64_t splits, float* m, float* l, float (&a)[V]) {
  *m = -INFINITY;
  *l = 0.f;
#pragma unroll
  for (int v = 0; v < V; ++v) a[v] = 0.f;
  for (int64_t j0 = 0; j0 < splits; j0 += N) {
    float mj[N], lj[N], aj[N][V];
#pragma unroll
    for (int u = 0; u < N; ++u) {
      const int64_t j = j0 + u < splits ? j0 + u : splits - 1;  // in range: loads without a branch
      const int64_t at = j * rows_total + g;
      mj[u] = ws.ml[at * 2];
      lj[u] = ws.ml[at * 2 + 1];
#pragma unroll
      for (int v = 0; v < V; ++v) aj[u][v] = ws.acc[at * D + d0 + dstep * v];
    }
    fold_partials(mj, lj, aj, splits - j0, m, l, a, [](float x) { return __expf(x); });
  }
}

// One block per (b, h, t) row: merges the splits' partial softmax results, each thread its output elements on
// its own (merge_row).
// N: splits a step (kMergeChunk, or fewer where the plan has fewer splits: a step's 3 N floats are registers, and
// at N = 16 a block of 128 threads took 122 of them a thread, so that a batch's thousands of one-row blocks ran
// in several waves; the launch in decode_attention_cuda.cu picks N).
template <typename T, int N = kMergeChunk>
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
  const int64_t splits = merge_row_splits(e, t, all_splits, ws);
  if (splits < 0) return;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float m, l, a[1];
    merge_row<N, 1>(ws, rows_total, g, D, d, 0, splits, &m, &l, a);
    write_row<T>(p, e, b, t, h, d, m, l, a[0]);
  }
}

// The same merge with a warp a row, kMergeWarpRows rows a block, for head dims of V x 32 (V = 2, 3, 4): lane i
// holds elements i + 32 v, and a split's (m, l) is loaded once a lane for all of them (the same address across
// the warp: one transaction). The block-a-row kernel spends two to four warps a row on the row's entry, split
// count and index arithmetic; under Nsight Compute (H100, MQA 32/1 B=64 S=2k, 4 splits) its 2048 blocks took
// 8.4 µs beside the 33.5 of the attention kernel. Each element's fold is the block kernel's, in the same order:
// the same bits. For many rows only (decode_plan::merge_warp_of).
template <typename T, int N, int V>
__global__ void merge_splits_warp_kernel(const DecodeAttentionParams p, const SplitCount all_splits, Workspace ws) {
  constexpr int D = 32 * V;
  const int64_t rows_total = p.batch * p.q_heads * p.q_len;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kMergeWarpRows + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  wait_for_previous_grid();  // the main kernel's partials are complete
  allow_next_grid();
  if (g >= rows_total) return;
  const int tq = static_cast<int>(p.q_len), hq = static_cast<int>(p.q_heads);  // grid limits checked
  const int row = static_cast<int>(g), t = row % tq, h = (row / tq) % hq, b = row / (tq * hq);
  const Entry e = entry_of(p, b);
  const int64_t splits = merge_row_splits(e, t, all_splits, ws);
  if (splits < 0) return;
  float m, l, a[V];
  merge_row<N, V>(ws, rows_total, g, D, lane, 32, splits, &m, &l, a);
#pragma unroll
  for (int v = 0; v < V; ++v) write_row<T>(p, e, b, t, h, lane + 32 * v, m, l, a[v]);
}

// A block's finished partials in its shared memory, rows 0 .. nrows - 1 of its row group.
struct BlockRows {
  float* m = nullptr;    // [rows] max scaled score, natural-log units; -inf: the split saw no key
  float* l = nullptr;    // [rows] sum of exp(score - m)
  float* acc = nullptr;  // [rows][acc_stride] sum of exp(score - m) * v; 16-byte aligned, acc_stride a multiple
                         // of 8 (finish_block reads whole float4s)
  int acc_stride = 0;
  int row0 = 0;          // row r of the block is row row0 + r of its kv head (a row group's first row)
};

// Whether the output takes whole 16-byte pieces (8 elements of a 16-bit row): contiguous head dim, 16-byte aligned
// rows. finish_block then writes a piece a thread: the row's index arithmetic, its (m, l) and, in a cluster, its
// peers' weights once for 8 elements, not per element (a short block's cost is its instruction count: per element,
// a row's write took ~90 instructions and a cluster's merge of 2 ~130).
template <typename T>
__device__ __forceinline__ bool out_in_pieces(const DecodeAttentionParams& p) {
  constexpr int64_t n = 16 / sizeof(T);
  return sizeof(T) == 2 && p.out_stride[3] == 1 && p.out_stride[0] % n == 0 && p.out_stride[1] % n == 0 &&
         p.out_stride[2] % n == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
}

// write_row for elements d0 .. d0 + 7 of a row in one 16-byte store (out_in_pieces): the same values, rounded the
// same way.
template <typename T>
__device__ __forceinline__ void write_piece(const DecodeAttentionParams& p, const Entry& e, int64_t b, int64_t t,
                                            int64_t h, int d0, float mx, float sum, const float (&a)[8]) {
  const bool seen = sum > 0.f && !e.refused;
  const int64_t prow = e.q_begin + t;  // packed row when cu_seqlens_q is given
  const int64_t o = (p.cu_seqlens_q ? prow * p.out_stride[1] : b * p.out_stride[0] + t * p.out_stride[1]) +
                    h * p.out_stride[2] + d0;
  alignas(16) T v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = from_float<T>(seen ? a[j] / sum : 0.f);
  *reinterpret_cast<uint4*>(static_cast<T*>(p.out) + o) = *reinterpret_cast<const uint4*>(v);
  if (p.lse != nullptr && d0 == 0) p.lse[prow * p.q_heads + h] = seen ? mx + logf(sum) : -INFINITY;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The cluster's end of finish_block: the C <= CB blocks of an (entry, kv head, row group) are one cluster; they
// read each other's partials through distributed shared memory and each writes a share of the rows: no workspace
// round trip and no second kernel, which is what the latency-bound short contexts pay for otherwise
// (plan_cluster in decode_attention_plan.cc). Each element is merged by its own thread: all peers' (m, l, acc)
// are loaded at once (indices clamped to the cluster, no branch), so the merge is one round trip through
// distributed shared memory and no block barrier (a phase of (m, l) loads, then weights, then the accumulators
// cost three round trips and two barriers: 39% of a B=1 S=1k block's stall samples under Nsight Compute, with
// the barriers). CB: a bound on C known at compile time (2, 4 or kMaxClusterSplits).
template <int CB, typename T, int D, int NTHR, class HeadAndToken>
__device__ __forceinline__ void merge_cluster(const DecodeAttentionParams& p, const Entry& e, int64_t b, int n_out, int C,
                                              bool pieces, const BlockRows& st, HeadAndToken head_and_token) {
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  const int tid = static_cast<int>(threadIdx.x);
  cl.sync();  // every split's partials are in its block's shared memory (release / acquire)
  // This block's share of the outputs: a contiguous slice, so every block of the cluster writes.
  if (pieces) {  // 8 elements a thread: each peer's (m, l) and weight once for them
    constexpr int P = D / 8;  // pieces a row
    const int n_pieces = n_out / 8, share = (n_pieces + C - 1) / C, begin = static_cast<int>(cl.block_rank()) * share;
    const int end = begin + share < n_pieces ? begin + share : n_pieces;
    for (int i = begin + tid; i < end; i += NTHR) {
      const int r = i / P, d0 = (i % P) * 8;
      int64_t h, t;
      head_and_token(r, &h, &t);
      if (t >= e.q_count) continue;
      float mc[CB], lc[CB];
      float4 ac[CB][2];
#pragma unroll
      for (int c = 0; c < CB; ++c) {
        const unsigned rank = static_cast<unsigned>(c < C ? c : C - 1);
        mc[c] = *cl.map_shared_rank(st.m + r, rank);
        lc[c] = *cl.map_shared_rank(st.l + r, rank);
        // 16-byte aligned: st.acc is, and its rows are whole float4s (acc_stride a multiple of 8)
        const float4* pa = reinterpret_cast<const float4*>(cl.map_shared_rank(st.acc + r * st.acc_stride + d0, rank));
        ac[c][0] = pa[0];
        ac[c][1] = pa[1];
      }
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < CB; ++c) {
        if (c >= C) mc[c] = -INFINITY;  // a repeat of the last peer: no weight
        mx = fmaxf(mx, mc[c]);
      }
      float sum = 0.f, a[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      if (mx != -INFINITY) {
#pragma unroll
        for (int c = 0; c < CB; ++c) {
          const float w = __expf(mc[c] - mx);  // 0 for a split that saw nothing
          sum += w * lc[c];
          a[0] += w * ac[c][0].x, a[1] += w * ac[c][0].y, a[2] += w * ac[c][0].z, a[3] += w * ac[c][0].w;
          a[4] += w * ac[c][1].x, a[5] += w * ac[c][1].y, a[6] += w * ac[c][1].z, a[7] += w * ac[c][1].w;
        }
      }
      write_piece<T>(p, e, b, t, h, d0, mx, sum, a);
    }
    cl.sync();  // no block leaves (its shared memory with it) while a peer may still read it
    return;
  }
  const int share = (n_out + C - 1) / C, begin = static_cast<int>(cl.block_rank()) * share;
  const int end = begin + share < n_out ? begin + share : n_out;
  for (int i = begin + tid; i < end; i += NTHR) {
    const int r = i / D, d = i % D;
    int64_t h, t;
    head_and_token(r, &h, &t);
    if (t >= e.q_count) continue;
    float mc[CB], lc[CB], ac[CB];
#pragma unroll
    for (int c = 0; c < CB; ++c) {
      const unsigned rank = static_cast<unsigned>(c < C ? c : C - 1);
      mc[c] = *cl.map_shared_rank(st.m + r, rank);
      lc[c] = *cl.map_shared_rank(st.l + r, rank);
      ac[c] = *cl.map_shared_rank(st.acc + r * st.acc_stride + d, rank);
    }
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < CB; ++c) {
      if (c >= C) mc[c] = -INFINITY;  // a repeat of the last peer: no weight
      mx = fmaxf(mx, mc[c]);
    }
    float sum = 0.f, a = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int c = 0; c < CB; ++c) {
        const float w = __expf(mc[c] - mx);  // 0 for a split that saw nothing
        sum += w * lc[c];
        a += w * ac[c];
      }
    }
    write_row<T>(p, e, b, t, h, d, mx, sum, a);
  }
  cl.sync();  // no block leaves (its shared memory with it) while a peer may still read it
}
#endif

// Every thread of the block calls it, after a __syncthreads() that completed `st`, and none may
// have returned before (the cluster barrier counts every thread). Row r is query row st.row0 + r of kv
// head hk (rows 0 .. nrows - 1 < 2^31): query head hk * G + r / Tq, token r % Tq. D is the head dim: a
// constant, so that the index arithmetic is a few instructions (a short block's cost is its
// instruction count); NTHR the block's threads.
template <typename T, int D, int NTHR, bool PIECES = true>
__device__ __forceinline__ void finish_block(const DecodeAttentionParams& p, const Entry& e, int64_t b, int64_t hk,
                                             int nrows, int64_t split, int64_t splits, const Workspace& ws,
                                             bool cluster, const BlockRows& st) {
  // 32-bit: a 64-bit division is a subroutine call (the host checks the sizes against the grid limits).
  const int64_t Tq = p.q_len, G = static_cast<int>(p.q_heads) / static_cast<int>(p.kv_heads);
  const int tq = static_cast<int>(Tq);
  const int tid = static_cast<int>(threadIdx.x);
  const int n_out = nrows * D;
  static_assert(D % 8 == 0, "whole 16-byte pieces of a row");
  // Pieces where this block's share keeps a quarter of its threads busy or more: with fewer, one warp's chain of 8
  // elements is the block's last work (MHA, one row a block: 8 of 128 threads, 3-4 % slower on the H100).
  const int C = static_cast<int>(splits);  // a cluster's blocks (32-bit: a 64-bit division is a subroutine call)
  const int share = cluster ? (nrows * (D / 8) + C - 1) / C : nrows * (D / 8);
  const bool pieces = PIECES && out_in_pieces<T>(p) && share * 4 >= NTHR;
  auto head_and_token = [&](int r, int64_t* h, int64_t* t) {
    const int hg = tq == 1 ? st.row0 + r : (st.row0 + r) / tq;  // decode: no division (a 32-bit one is ~20 instructions)
    *h = hk * G + hg;
    *t = st.row0 + r - hg * tq;
  };
  if (!cluster && splits > 1) {
    // The split's partials into the workspace (store_partial's places), the index arithmetic a row's and the
    // split's, not an element's: row r is query head hk * G + hg, token t with hg * Tq + t = row0 + r, so its
    // workspace row (b * Hq + h) * Tq + t is g0 + row0 + r; a token past the entry's queries (packed rows)
    // only where the entry has fewer than Tq. (Per element, with a division by Tq and 64-bit products, this
    // was a short block's largest cost after its tiles: Nsight Compute, H200, 2026-12-03.)
    const int64_t rows_total = p.batch * p.q_heads * Tq;
    float* acc = ws.acc + split * rows_total * D;
    float* ml = ws.ml + split * rows_total * 2;
    const int64_t g0 = (b * p.q_heads + hk * G) * Tq + st.row0;
    const bool every_token = e.q_count >= Tq;
    for (int i = tid; i < n_out; i += NTHR) {
      const int r = i / D, d = i % D;  // D is a constant: no division
      if (!every_token && (st.row0 + r) % tq >= e.q_count) continue;  // no such query in this entry
      const int64_t g = g0 + r;
      if (d == 0) {
        ml[g * 2] = st.m[r];
        ml[g * 2 + 1] = st.l[r];
      }
      acc[g * D + d] = st.acc[r * st.acc_stride + d];
    }
    return;
  }
  if (!cluster && pieces) {  // one split: the block writes its rows, 8 elements a thread
    constexpr int P = D / 8;  // pieces a row
    for (int i = tid; i < n_out / 8; i += NTHR) {
      const int r = i / P, d0 = (i % P) * 8;
      int64_t h, t;
      head_and_token(r, &h, &t);
      if (t >= e.q_count) continue;  // no such query in this entry: nothing to write
      const float4* pa = reinterpret_cast<const float4*>(st.acc + r * st.acc_stride + d0);  // 16-byte aligned
      const float4 a0 = pa[0], a1 = pa[1];
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      write_piece<T>(p, e, b, t, h, d0, st.m[r], st.l[r], a);
    }
    return;
  }
  if (!cluster) {  // one split: the block writes its rows
    for (int i = tid; i < n_out; i += NTHR) {
      const int r = i / D, d = i % D;
      int64_t h, t;
      head_and_token(r, &h, &t);
      if (t >= e.q_count) continue;  // no such query in this entry: nothing to write
      write_row<T>(p, e, b, t, h, d, st.m[r], st.l[r], st.acc[r * st.acc_stride + d]);
    }
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Each peer's partials loaded once: a cluster of C blocks (exactly this row group's splits) reads C of them, not
  // kMaxClusterSplits (a cluster of 2 read 8, 6 of them repeats, with their address arithmetic: ~300 instructions
  // an element).
  if (C <= 2) {
    merge_cluster<2, T, D, NTHR>(p, e, b, n_out, C, pieces, st, head_and_token);
  } else if (C <= 4) {
    merge_cluster<4, T, D, NTHR>(p, e, b, n_out, C, pieces, st, head_and_token);
  } else {
    merge_cluster<kMaxClusterSplits, T, D, NTHR>(p, e, b, n_out, C, pieces, st, head_and_token);
  }
#else
  __trap();  // unreachable: the host plans clusters only for kernels built for sm_90 or newer
#endif
}

}  // namespace decode_cuda
}  // namespace pvt

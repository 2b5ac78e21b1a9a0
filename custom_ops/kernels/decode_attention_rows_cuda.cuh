// Decode attention for several query rows per kv head (GQA groups, Tq > 1), FlashInfer-style: the
// block's threads copy each tile of K and V (8 KiB each) into shared memory with 16-byte cp.async,
// double-buffered so the next tile streams in while this one is used, and each warp then computes
// ONE query row over the tile from shared memory. K/V leave HBM once for the whole group, while each
// thread keeps only its row's q and accumulator in registers (the register-held variant in
// decode_attention_one_row_cuda.cuh needs 4x that for 4 rows, which halves occupancy and stalls on HBM).
// Unmasked, 16-byte-loadable layouts with head_dim = LANES x 16 bytes (128 for fp16/bf16).
#pragma once

#include "decode_attention_common_cuda.cuh"

namespace pvt {
namespace decode_cuda {

constexpr int kRowsTileBytes = 8192;  // bytes of K (and of V) per tile and stage

// Block = kWarps warps = kWarps query rows (row group blockIdx.z) of one (entry, kv head) and one
// split of the keys (blockIdx.y). LANES lanes hold one key (LANES x 16 bytes = head_dim).
template <typename T, int LANES>
__global__ void __launch_bounds__(kThreads)
    decode_attention_rows_kernel(const DecodeAttentionParams p, const SplitCount splits, Workspace ws) {
  constexpr int VEC = static_cast<int>(16 / sizeof(T));
  constexpr int CH = LANES;                                    // 16-byte chunks per key
  constexpr int KT = kRowsTileBytes / (CH * 16);               // keys per tile
  constexpr int KPW = 32 / LANES;                              // keys a warp scores per step
  constexpr int STEPS = KT / KPW;
  __shared__ __align__(16) uint4 sk[2][KT * CH];
  __shared__ __align__(16) uint4 sv[2][KT * CH];

  const int64_t Tq = p.q_len, G = p.q_heads / p.kv_heads, R = G * Tq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int lk = lane % LANES, kg = lane / LANES;
  const int64_t b = blockIdx.x / p.kv_heads, hk = blockIdx.x % p.kv_heads;
  const int64_t split = blockIdx.y;
  const int64_t row = static_cast<int64_t>(blockIdx.z) * kWarps + warp;

  wait_for_previous_grid();
  const Entry e = entry_of(p, b);
  if (e.refused && p.error_flag != nullptr && split == 0 && blockIdx.z == 0 && threadIdx.x == 0) {
    *p.error_flag = 1;
  }
  int64_t s_lo, s_hi;
  split_range<KT, uint32_t>(e.n, split, splits, &s_lo, &s_hi);
  if (past_own_keys(splits, s_lo, s_hi)) return;  // the merge does not read it (own_splits)

  const int64_t h = hk * G + row / Tq, t = row % Tq;
  const bool live = row < R && t < e.q_count;
  // Causal, clipped to this split; a row that is not this entry's sees nothing.
  const int64_t visible_end = live ? (e.past + t + 1 < s_hi ? e.past + t + 1 : s_hi) : s_lo;

  float qf[VEC], acc[VEC], m = -INFINITY, l = 0.f;
  {
    const T* q = static_cast<const T*>(p.q);
    const int64_t qoff = (p.cu_seqlens_q ? (e.q_begin + t) * p.q_stride[1] : b * p.q_stride[0] + t * p.q_stride[1]) +
                         h * p.q_stride[2];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      acc[i] = 0.f;
      qf[i] = live ? to_float(q[qoff + static_cast<int64_t>(lk * VEC + i) * p.q_stride[3]]) * p.scale : 0.f;
    }
  }

  const T* kb = static_cast<const T*>(p.k) + e.kv_row * p.k_stride[1] + hk * p.k_stride[2];
  const T* vb = static_cast<const T*>(p.v) + e.kv_row * p.v_stride[1] + hk * p.v_stride[2];
  const int64_t ks0 = p.k_stride[0], vs0 = p.v_stride[0];
  const int64_t n_tiles = s_hi > s_lo ? (s_hi - s_lo + KT - 1) / KT : 0;

  auto load_tile = [&](int64_t tile, int stage) {
    const int64_t t0 = s_lo + tile * KT;
    static_assert((KT * CH) % kThreads == 0, "a tile is a whole number of 16-byte chunks per thread");
#pragma unroll
    for (int it = 0; it < KT * CH / kThreads; ++it) {
      const int c = it * kThreads + static_cast<int>(threadIdx.x);
      const int key = c / CH, ch = c % CH;
      const int64_t s = t0 + key;
      const bool ok = s < s_hi;
      cp_async16(&sk[stage][c], ok ? kb + s * ks0 + ch * VEC : kb, ok);
      cp_async16(&sv[stage][c], ok ? vb + s * vs0 + ch * VEC : vb, ok);
    }
    cp_async_commit();
  };

  if (n_tiles > 0) load_tile(0, 0);
  for (int64_t i = 0; i < n_tiles; ++i) {
    if (i + 1 < n_tiles) {
      load_tile(i + 1, static_cast<int>((i + 1) & 1));
      cp_async_wait<1>();  // tile i has landed; tile i + 1 stays in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int stage = static_cast<int>(i & 1);
    const int64_t t0 = s_lo + i * KT;
    float x[STEPS];
#pragma unroll
    for (int j = 0; j < STEPS; ++j) {
      const int key = j * KPW + kg;
      float kf[VEC];
      unpack<T, VEC>(sk[stage][key * CH + lk], kf);
      float dot = 0.f;
#pragma unroll
      for (int d = 0; d < VEC; ++d) dot += qf[d] * kf[d];
#pragma unroll
      for (int off = LANES / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      x[j] = t0 + key < visible_end ? dot : -INFINITY;
    }
    float mx = m;
#pragma unroll
    for (int j = 0; j < STEPS; ++j) mx = fmaxf(mx, x[j]);
    if (mx != -INFINITY) {  // no shuffles below: key groups may diverge here
      const float corr = __expf(m - mx);
      l *= corr;
#pragma unroll
      for (int d = 0; d < VEC; ++d) acc[d] *= corr;
      m = mx;
#pragma unroll
      for (int j = 0; j < STEPS; ++j) {
        const float w = __expf(x[j] - mx);
        float vf[VEC];
        unpack<T, VEC>(sv[stage][(j * KPW + kg) * CH + lk], vf);
        l += w;
#pragma unroll
        for (int d = 0; d < VEC; ++d) acc[d] += w * vf[d];
      }
    }
    __syncthreads();  // every warp is done with this stage before a later load refills it
  }

  allow_next_grid();  // see decode_attention_kernel
  // Merge the warp's key groups (lanes with the same lk).
#pragma unroll
  for (int off = LANES; off < 32; off *= 2) {
    const float m_b = __shfl_xor_sync(0xffffffffu, m, off);
    const float l_b = __shfl_xor_sync(0xffffffffu, l, off);
    float ca, cb, m_new;
    merge_scales(m, m_b, &ca, &cb, &m_new);
#pragma unroll
    for (int d = 0; d < VEC; ++d) acc[d] = acc[d] * ca + __shfl_xor_sync(0xffffffffu, acc[d], off) * cb;
    l = l * ca + l_b * cb;
    m = m_new;
  }
  if (kg != 0 || !live) return;
  // The branch outside the loop (not store_split_row's per element): the fp32 instance with 8 lanes
  // otherwise compiles to 108 registers instead of 96 (ptxas -v), one block an SM fewer.
  if (splits.n == 1) {
#pragma unroll
    for (int d = 0; d < VEC; ++d) write_row<T>(p, e, b, t, h, lk * VEC + d, m, l, acc[d]);
  } else {
#pragma unroll
    for (int d = 0; d < VEC; ++d) store_partial(p, b, t, h, lk * VEC + d, p.head_dim, split, ws, m, l, acc[d]);
  }
}

}  // namespace decode_cuda
}  // namespace pvt

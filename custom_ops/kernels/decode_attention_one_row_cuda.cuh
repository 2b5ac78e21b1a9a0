// Decode attention with up to ROWS query rows of one kv head held in registers (one-row decode: MHA,
// masks, layouts without 16-byte loads). A "key group" of LANES lanes holds one key: each lane loads VEC
// contiguous elements per chunk (16-byte loads when the layout allows), so a head_dim-128 fp16 key is 16
// lanes x 16 bytes and a warp reads two keys per load instruction. Each lane first issues the loads of
// kTile keys of K and V (8 x 16 bytes in flight per lane, what keeps HBM busy), then scores them and
// folds them into a float32 online softmax with ONE rescale per tile. Key groups merge by shuffles,
// warps through shared memory. Block = (entry b, kv head) x split (grid y) x row group (grid z).
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include "decode_attention_common_cuda.cuh"

namespace pvt {
namespace decode_cuda {

template <typename T, int VEC, int CPL, int ROWS, int LANES, bool MASKED>
__global__ void __launch_bounds__(kThreads)
    decode_attention_kernel(const DecodeAttentionParams p, const SplitCount splits, Workspace ws,
                            const bool /*cluster: never, see plan_cluster*/) {
  constexpr int E = VEC * CPL;  // elements of one row a lane holds
  constexpr int kKeysPerWarp = 32 / LANES;
  constexpr int kGroups = kWarps * kKeysPerWarp;  // key groups in the block
  constexpr int kStep = block_step(LANES);
  const int64_t D = p.head_dim, Tq = p.q_len;
  const int64_t G = p.q_heads / p.kv_heads, R = G * Tq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int lk = lane % LANES;                        // lane within the key group
  const int kg = warp * kKeysPerWarp + lane / LANES;  // key group in the block
  const int64_t b = blockIdx.x / p.kv_heads, hk = blockIdx.x % p.kv_heads;
  const int64_t split = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.z) * ROWS;
  const int nrows = static_cast<int>(R - row0 < ROWS ? R - row0 : ROWS);

  wait_for_previous_grid();
  const Entry e = entry_of(p, b);
  if (e.refused && p.error_flag != nullptr && split == 0 && blockIdx.z == 0 && threadIdx.x == 0) {
    *p.error_flag = 1;
  }
  int64_t s_lo, s_hi;
  split_range<kStep, int64_t>(e.n, split, splits, &s_lo, &s_hi);
  if (past_own_keys(splits, s_lo, s_hi)) return;  // the merge does not read it (own_splits)

  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int64_t kbase = e.kv_row * p.k_stride[1] + hk * p.k_stride[2];
  const int64_t vbase = e.kv_row * p.v_stride[1] + hk * p.v_stride[2];

  float qf[ROWS][E], acc[ROWS][E], m[ROWS], l[ROWS];
  int64_t mask_off[ROWS], visible_end[ROWS];
  // Per-lane element offsets of its chunks within a key row.
  int64_t kd[CPL], vd[CPL];
#pragma unroll
  for (int j = 0; j < CPL; ++j) {
    const int64_t d = static_cast<int64_t>(j * LANES + lk) * VEC;
    kd[j] = d < D ? kbase + d * p.k_stride[3] : -1;
    vd[j] = vbase + d * p.v_stride[3];
  }
  const int64_t ks0 = p.k_stride[0], vs0 = p.v_stride[0];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
    const int64_t row = row0 + r, h = hk * G + row / Tq, t = row % Tq;
    const bool live = r < nrows && t < e.q_count;
    if constexpr (MASKED) mask_off[r] = b * p.mask_stride[0] + h * p.mask_stride[1] + t * p.mask_stride[2];
    // Causal, and clipped to this split's end; a row past the entry's queries sees nothing.
    visible_end[r] = live ? (e.past + t + 1 < s_hi ? e.past + t + 1 : s_hi) : 0;
    const int64_t qoff = p.cu_seqlens_q ? (e.q_begin + t) * p.q_stride[1]
                                        : b * p.q_stride[0] + t * p.q_stride[1];
#pragma unroll
    for (int j = 0; j < CPL; ++j) {
#pragma unroll
      for (int x = 0; x < VEC; ++x) {
        const int64_t d = static_cast<int64_t>(j * LANES + lk) * VEC + x;
        acc[r][j * VEC + x] = 0.f;
        qf[r][j * VEC + x] =
            live && d < D ? to_float(q[qoff + h * p.q_stride[2] + d * p.q_stride[3]]) * p.scale : 0.f;
      }
    }
  }

  // The loop bound is the warp's first key, the same for all its lanes: every lane of a warp must
  // reach each shuffle below, also the key groups whose key lies past the end (they score -inf).
  for (int64_t warp_s = s_lo + warp * kKeysPerWarp; warp_s < s_hi; warp_s += kStep) {
    const int64_t s0 = warp_s + (kg - warp * kKeysPerWarp);
    Raw<T, VEC> kr[kTile][CPL], vr[kTile][CPL];
    // All loads of the tile first: 2 * kTile * CPL independent loads in flight per lane.
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      const int64_t s = s0 + static_cast<int64_t>(u) * kGroups;
#pragma unroll
      for (int j = 0; j < CPL; ++j) {
        if (s < s_hi && kd[j] >= 0) {
          kr[u][j] = load_raw<T, VEC>(k + kd[j] + s * ks0);
          vr[u][j] = load_raw<T, VEC>(v + vd[j] + s * vs0);
        } else {
          kr[u][j] = Raw<T, VEC>{};
          vr[u][j] = Raw<T, VEC>{};
        }
      }
    }
    // Scores of the tile, each reduced over the key group's lanes (all lanes end with the sum).
    float x[kTile][ROWS];
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      float kf[E];
#pragma unroll
      for (int j = 0; j < CPL; ++j) unpack<T, VEC>(kr[u][j], &kf[j * VEC]);
      const int64_t s = s0 + static_cast<int64_t>(u) * kGroups;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < E; ++i) dot += qf[r][i] * kf[i];
#pragma unroll
        for (int off = LANES / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if constexpr (MASKED) {
          if (s >= s_hi) {
            dot = -INFINITY;
          } else if (r < nrows) {
            dot += mask_value(p.mask, mask_off[r] + s * p.mask_stride[3], p.mask_type);
          }
        } else if (s >= visible_end[r]) {  // clipped to this split's end at the start
          dot = -INFINITY;
        }
        x[u][r] = dot;
      }
    }
    // One online-softmax step per row for the whole tile.
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float mx = m[r];
#pragma unroll
      for (int u = 0; u < kTile; ++u) mx = fmaxf(mx, x[u][r]);
      if (mx == -INFINITY) continue;  // nothing visible yet
      const float corr = __expf(m[r] - mx);  // 0 when m was -inf
      l[r] *= corr;
#pragma unroll
      for (int i = 0; i < E; ++i) acc[r][i] *= corr;
      m[r] = mx;
#pragma unroll
      for (int u = 0; u < kTile; ++u) x[u][r] = __expf(x[u][r] - mx);  // weight; exp(-inf) = 0
    }
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      float vf[E];
#pragma unroll
      for (int j = 0; j < CPL; ++j) unpack<T, VEC>(vr[u][j], &vf[j * VEC]);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        if (m[r] == -INFINITY) continue;
        const float w = x[u][r];
        l[r] += w;
#pragma unroll
        for (int i = 0; i < E; ++i) acc[r][i] += w * vf[i];
      }
    }
  }

  // K/V are read: the merge kernel (or the next call) may be placed now; it waits for this grid's results.
  allow_next_grid();
  // Merge the key groups of each warp (lanes with the same lk), then the warps.
#pragma unroll
  for (int off = LANES; off < 32; off *= 2) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float m_b = __shfl_xor_sync(0xffffffffu, m[r], off);
      const float l_b = __shfl_xor_sync(0xffffffffu, l[r], off);
      float ca, cb, m_new;
      merge_scales(m[r], m_b, &ca, &cb, &m_new);
#pragma unroll
      for (int i = 0; i < E; ++i) {
        const float a_b = __shfl_xor_sync(0xffffffffu, acc[r][i], off);
        acc[r][i] = acc[r][i] * ca + a_b * cb;
      }
      l[r] = l[r] * ca + l_b * cb;
      m[r] = m_new;
    }
  }

  __shared__ float sm_m[kWarps][ROWS], sm_l[kWarps][ROWS];
  __shared__ float sm_acc[kWarps][ROWS][kCudaMaxHeadDim];
  if (lane < LANES) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (lane == 0) {
        sm_m[warp][r] = m[r];
        sm_l[warp][r] = l[r];
      }
#pragma unroll
      for (int j = 0; j < CPL; ++j) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const int64_t d = static_cast<int64_t>(j * LANES + lk) * VEC + i;
          if (d < D) sm_acc[warp][r][d] = acc[r][j * VEC + i];
        }
      }
    }
  }
  __syncthreads();

  for (int64_t i = threadIdx.x; i < nrows * D; i += kThreads) {
    const int r = static_cast<int>(i / D);
    const int64_t d = i % D;
    const int64_t row = row0 + r, h = hk * G + row / Tq, t = row % Tq;
    if (t >= e.q_count) continue;  // no such query in this entry: nothing to write
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w][r]);
    float sum = 0.f, a = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float c = __expf(sm_m[w][r] - mx);
        sum += sm_l[w][r] * c;
        a += sm_acc[w][r][d] * c;
      }
    }
    store_split_row<T>(p, e, b, t, h, d, D, split, splits.n, ws, mx, sum, a);
  }
}

}  // namespace decode_cuda
}  // namespace pvt

// The keys on the MMA's M side: mma_keys_kernel, the 8-bit tensor-core kernel for groups of at most 8 query
// heads a kv head (Launch::keys_on_m; larger groups: kv_quant_attention_mma_rows_cuda.cuh). S^T = K Q^T and O^T
// = V^T P^T on mma.m16n8k16 with 16 keys (for P V: 16 dims) as M and the query heads as N (8, the rows past the
// group zero). mma_split_kernel puts the query heads on M, where a group of 1-8 fills at most half the 16 rows:
// here the same codes take half the MMAs and O half the registers (D / 16 m16 tiles of 4 floats a lane instead
// of D / 8 n8 tiles). Same tiles, split ranges, scales, int8 bias and end as mma_split_kernel. A lane's S^T
// holds keys g and g + 8 of each m16 tile for query rows 2t and 2t + 1, so a row's maximum and sum run over the
// lanes of one t (xor 4, 8, 16); P becomes the B operand of P V through one movmatrix a register. O^T's m16
// tile mt holds dims VB g + 2 mt (its rows g) and VB g + 2 mt + 1 (rows g + 8): the dims each lane reads of V,
// so V's A fragments are mma_split_kernel's byte permutes of the same loads.
#pragma once

#include "kv_quant_attention_mma_common_cuda.cuh"

namespace pvt {
namespace quant_cuda {
namespace mma {

// The 8x8 matrix of 16-bit values a warp holds one register a lane (row lane / 4, columns 2 (lane % 4)
// and + 1), transposed in registers.
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
  return r;
#else
  return x;  // never run: the tensor-core kernels need compute capability 8.0 (mma_takes), as mma_16816 does
#endif
}

// Blocks an SM the kernel is compiled for (a register cap, no spill at 4 warps): fp8 4 (128 registers);
// int8 3 (its scales and bias: at 128 registers int8 took 1.10-1.21x the time at B >= 8 of 3 blocks an SM
// and 140 registers, H200, docs/QUANTIZED_CACHE.md).
template <KvQuant kKind, int W>
__host__ __device__ constexpr int keys_min_blocks() {
  return (kKind == KvQuant::kInt8 ? 384 : 512) / (32 * W);
}

// How far (log2 units) a score may pass its row's running maximum m before m moves (FlashAttention-4's
// conditional rescale): P = exp2(x - m) stays at most 256, which float16 and bfloat16 hold with their full
// precision, and O and l accumulate in float32; the shuffles of a row maximum and O's rescale then run only where
// some score passes it (a split's first tile, then seldom).
constexpr float kLazyLog2 = 8.f;

template <typename T, KvQuant kKind, int D, int W, int KPW>
__global__ void __launch_bounds__(32 * W, keys_min_blocks<kKind, W>()) mma_keys_kernel(const QuantAttentionParams p, const Launch l, float* ws) {
  constexpr int KS = D / 16, MT = D / 16, VB = D / 8;
  constexpr int kWarps = W, kTileKeys = mma_tile_keys(W, KPW);
  constexpr int MK = KPW / 16;  // a warp's m16 tiles of keys (and k16 steps of P V)
  constexpr bool kPerToken = kKind == KvQuant::kInt8;
  constexpr bool kBiased = biased_int8<T, kKind>();
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(KPW == 16 || KPW == 32, "16 or 32 keys a warp");
  static_assert((kWarps * kMmaHeads * D + 2 * kWarps * kMmaHeads) * 4 <= smem_bytes<D, W, KPW>(), "the merge fits the tiles");
  extern __shared__ __align__(16) uint8_t smem[];

  const int64_t b = blockIdx.z;
  const int hk = static_cast<int>(blockIdx.y);  // one chunk a kv head: group <= 8
  const int split = static_cast<int>(blockIdx.x);
  prefetch_split_start<D, W, KPW, kPerToken>(p, l, b, hk, split);
  decode_cuda::wait_for_previous_grid();  // as mma_split_kernel
  const DecodeAttentionParams& a = p.attn;
  const int rows = l.group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const EntryView e = entry_of(a, b);
  const int64_t s0 = split * l.keys_per_split;
  const int64_t s1 = e.n < s0 + l.keys_per_split ? e.n : s0 + l.keys_per_split;
  const int n_tiles = s1 > s0 ? static_cast<int>((s1 - s0 + kTileKeys - 1) / kTileKeys) : 0;

  SplitTiles<D, W, KPW, kPerToken> tiles(smem, p, e, hk, s0, s1);
  tiles.prime();

  // Q^T as the B operand: query row g (zeros past the group), dims of step ks as mma_split_kernel orders them.
  uint32_t qb[KS][2];
  {
    const T* q = static_cast<const T*>(a.q);
    const int64_t row_stride = a.cu_seqlens_q ? a.q_stride[1] : a.q_stride[0];
    const bool live = g < rows && e.q_row >= 0;
    const T* qr = q + (live ? e.q_row * row_stride + (static_cast<int64_t>(hk) * l.group + g) * a.q_stride[2] : 0);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const int d0 = 64 * (ks / 4) + 16 * t + 4 * (ks % 4);
      float x[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = live ? cuda_float::to_float(qr[(d0 + j) * a.q_stride[3]]) : 0.f;
      qb[ks][0] = pack2<T>(x[0], x[1]);
      qb[ks][1] = pack2<T>(x[2], x[3]);
    }
  }
  // Biased int8: -1152 sum(q) of rows 2t and 2t + 1 (quad r sums row r).
  float s_bias[2] = {0.f, 0.f};
  if constexpr (kBiased) {
    float sum = 0.f;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&qb[ks][0]));
      const float2 y = __half22float2(*reinterpret_cast<const __half2*>(&qb[ks][1]));
      sum += (x.x + x.y) + (y.x + y.y);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    s_bias[0] = -kInt8Bias * __shfl_sync(0xffffffffu, sum, 8 * t);
    s_bias[1] = -kInt8Bias * __shfl_sync(0xffffffffu, sum, 8 * t + 4);
  }

  float scale2 = a.scale * kLog2e, out_factor = 1.f;
  if constexpr (!kPerToken) {
    scale2 *= __ldg(tiles.ksb);
    out_factor = __ldg(tiles.vsb);
  }
  // Rows 2t (index 0) and 2t + 1 (index 1) of this lane.
  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f}, U = 0.f, inv_u = 0.f;
  float o[kBiased ? MT + 1 : MT][4];  // O^T; for biased int8 one more tile: -1152 sum(p) of each row
#pragma unroll
  for (int n = 0; n < (kBiased ? MT + 1 : MT); ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  auto fold_bias = [&]() {
    if constexpr (kBiased) fold_bias_tile(o);
  };

  const int kw = opaque(warp * KPW), g_key = opaque(g);  // (g_key: key g of each m16 tile, for the split's end)
  // This lane's byte offsets in a stage, worked out once (ptxas otherwise recomputes the swizzle from the thread
  // index every tile): K chunk 4 kg + t of key kw + g (key + 8 and m16 tile mk: + 8 D and + 16 D mk, the swizzle
  // the same), V chunk VB g of keys kw + 2t and + 1 (VStepCodes), the scale of key kw + g.
  int k_off[D / 64];
#pragma unroll
  for (int kg = 0; kg < D / 64; ++kg) k_off[kg] = opaque(chunk_at<D>(kw + g, 4 * kg + t));
  const int2 v_off = VStepCodes<D>::lane_offsets(kw, g, t);
  const int s_off = opaque(kw + g);
  for (int i = 0; i < n_tiles; ++i) {
    tiles.step();  // tile i has landed for every thread; tile i + stages<D>() - 1 is on its way
    const int visible = tiles.visible(kw);
    if (visible == 0) continue;

    // Per key (this lane's keys g and g + 8 of each m16 tile): the softmax scale (times int8's K scale) and P's
    // factor (int8's V scale, over U below), loaded before the MMAs so that their latency is hidden.
    float kf[MK][2], pf[MK][2], cv = 1.f;
#pragma unroll
    for (int mk = 0; mk < MK; ++mk) kf[mk][0] = kf[mk][1] = scale2, pf[mk][0] = pf[mk][1] = 1.f;
    if constexpr (kPerToken) {
#pragma unroll
      for (int mk = 0; mk < MK; ++mk) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          kf[mk][h] = scale2 * tiles.scale_k()[s_off + 16 * mk + 8 * h];
          pf[mk][h] = tiles.scale_v()[s_off + 16 * mk + 8 * h];
        }
      }
    }
    // S^T = K Q^T: m16 tile mk holds keys kw + 16 mk + g (c0, c1) and + 8 (c2, c3), rows 2t, 2t + 1. Biased int8:
    // the accumulators start at -1152 sum(q) of their row, so the MMAs add the bias's correction.
    float s[MK][4];
#pragma unroll
    for (int mk = 0; mk < MK; ++mk) s[mk][0] = s[mk][2] = s_bias[0], s[mk][1] = s[mk][3] = s_bias[1];
#pragma unroll
    for (int kg = 0; kg < D / 64; ++kg) {
      uint4 wa[MK], wb[MK];
#pragma unroll
      for (int mk = 0; mk < MK; ++mk) {
        wa[mk] = *reinterpret_cast<const uint4*>(tiles.k() + k_off[kg] + 16 * D * mk);
        wb[mk] = *reinterpret_cast<const uint4*>(tiles.k() + k_off[kg] + 16 * D * mk + 8 * D);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int mk = 0; mk < MK; ++mk) {
          const uint32_t x = j == 0 ? wa[mk].x : j == 1 ? wa[mk].y : j == 2 ? wa[mk].z : wa[mk].w;
          const uint32_t y = j == 0 ? wb[mk].x : j == 1 ? wb[mk].y : j == 2 ? wb[mk].z : wb[mk].w;
          const uint32_t af[4] = {code_pair<T, kKind, 0>(x), code_pair<T, kKind, 0>(y), code_pair<T, kKind, 1>(x),
                                  code_pair<T, kKind, 1>(y)};
          mma_16816<T>(s[mk], af, qb[4 * kg + j][0], qb[4 * kg + j][1]);
        }
      }
    }
    if constexpr (kPerToken) {  // int8: the warp's largest V scale of the tile (lanes of one t hold every key)
      float vmax = 0.f;
#pragma unroll
      for (int mk = 0; mk < MK; ++mk) vmax = fmaxf(vmax, fmaxf(pf[mk][0], pf[mk][1]));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 4));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 8));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 16));
      grow_v_scale(vmax, U, inv_u, cv);
#pragma unroll
      for (int mk = 0; mk < MK; ++mk) pf[mk][0] *= inv_u, pf[mk][1] *= inv_u;
    }
    // Scores in log2 units; past the split's end -inf (a warp-uniform test: only a split's last tile has any).
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int mk = 0; mk < MK; ++mk) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int jr = 0; jr < 2; ++jr) {
          float& x = s[mk][2 * h + jr];
          x *= kf[mk][h];
          if (visible < KPW && 16 * mk + g_key + 8 * h >= visible) x = -INFINITY;
          mx[jr] = fmaxf(mx[jr], x);
        }
      }
    }
    // The rows' maxima move only where some score passes its row's m by more than kLazyLog2 (the first tile, then
    // rarely): otherwise P = exp2(x - m) <= 2^kLazyLog2 against the same m, no shuffles and O not rescaled.
    float corr[2] = {cv, cv};
    if (__any_sync(0xffffffffu, mx[0] > m[0] + kLazyLog2 || mx[1] > m[1] + kLazyLog2)) {
#pragma unroll
      for (int jr = 0; jr < 2; ++jr) {
        float r = mx[jr];
        r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, 4));  // the lanes of one t share its rows
        r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, 8));
        r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, 16));
        const float m_new = fmaxf(m[jr], r);
        const float c = m_new == -INFINITY ? 1.f : exp2_ftz(m[jr] - m_new);
        lsum[jr] *= c;
        m[jr] = m_new;
        corr[jr] = c * cv;
      }
    }
#pragma unroll
    for (int jr = 0; jr < 2; ++jr) {
      float sum = 0.f;
      const float m_sub = m[jr] == -INFINITY ? 0.f : m[jr];  // nothing seen yet: every x is -inf, exp2 gives 0
#pragma unroll
      for (int mk = 0; mk < MK; ++mk) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float& x = s[mk][2 * h + jr];
          x = exp2_ftz(x - m_sub);
          sum += x;
        }
      }
      lsum[jr] += sum;  // without V scales
    }
    if (corr[0] != 1.f || corr[1] != 1.f) {
#pragma unroll
      for (int n = 0; n < (kBiased ? MT + 1 : MT); ++n) {
        o[n][0] *= corr[0], o[n][1] *= corr[1], o[n][2] *= corr[0], o[n][3] *= corr[1];
      }
    }
#pragma unroll
    for (int mk = 0; mk < MK; ++mk) {  // k16 steps of P V: keys kw + 16 mk .. + 15
      // P^T's B fragments: (key g | g + 8; rows 2t, 2t + 1) transposed to (row g; keys 2t, 2t + 1 | + 8).
      const uint32_t pb0 = transpose8x8(pack2<T>(s[mk][0] * pf[mk][0], s[mk][1] * pf[mk][0]));
      const uint32_t pb1 = transpose8x8(pack2<T>(s[mk][2] * pf[mk][1], s[mk][3] * pf[mk][1]));
      const VStepCodes<D> vc(tiles.v() + 16 * D * mk, v_off);
#pragma unroll
      for (int j = 0; j < VB / 4; ++j) {
        const uint32_t lo01 = vc.lo01(j), hi01 = vc.hi01(j), lo89 = vc.lo89(j), hi89 = vc.hi89(j);
        const uint32_t a0[4] = {code_pair<T, kKind, 0>(lo01), code_pair<T, kKind, 1>(lo01), code_pair<T, kKind, 0>(lo89),
                                code_pair<T, kKind, 1>(lo89)};
        const uint32_t a1[4] = {code_pair<T, kKind, 0>(hi01), code_pair<T, kKind, 1>(hi01), code_pair<T, kKind, 0>(hi89),
                                code_pair<T, kKind, 1>(hi89)};
        mma_16816<T>(o[2 * j], a0, pb0, pb1);
        mma_16816<T>(o[2 * j + 1], a1, pb0, pb1);
      }
      if constexpr (kBiased) {
        const uint32_t bias[4] = {kNegBiasPair, kNegBiasPair, kNegBiasPair, kNegBiasPair};
        mma_16816<T>(o[MT], bias, pb0, pb1);
      }
    }
    if constexpr (kBiased) {
      if (i % (kBiasFoldTiles / MK) == kBiasFoldTiles / MK - 1) fold_bias();
    }
  }
  fold_bias();
  cp_async_wait<0>();
  __syncthreads();
  decode_cuda::allow_next_grid();

#pragma unroll
  for (int jr = 0; jr < 2; ++jr) {
    lsum[jr] += __shfl_xor_sync(0xffffffffu, lsum[jr], 4);
    lsum[jr] += __shfl_xor_sync(0xffffffffu, lsum[jr], 8);
    lsum[jr] += __shfl_xor_sync(0xffffffffu, lsum[jr], 16);
  }
  const float ofac = kPerToken ? U : out_factor;
  const WarpStates<D, W> states(smem);
#pragma unroll
  for (int jr = 0; jr < 2; ++jr) {
    const int r = 2 * t + jr;
    if (r >= rows) continue;
    if (g == 0) {
      states.m[warp * kMmaHeads + r] = m[jr];
      states.l[warp * kMmaHeads + r] = lsum[jr];
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) states.o[(warp * kMmaHeads + r) * D + VB * g + 2 * mt + h] = o[mt][2 * h + jr] * ofac;
    }
  }
  __syncthreads();
  finish_block<T, D, W>(a, l, e, b, static_cast<int64_t>(hk) * l.group, rows, split, ws, states);
}

}  // namespace mma
}  // namespace quant_cuda
}  // namespace pvt

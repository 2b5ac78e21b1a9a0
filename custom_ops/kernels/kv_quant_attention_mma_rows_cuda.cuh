// The query heads on the MMA's M side: mma_split_kernel, the 8-bit tensor-core kernel for groups of more than 8
// query heads a kv head (kv_quant_attention_mma_keys_cuda.cuh takes smaller ones). As
// decode_attention_mma_cuda.cuh does for 16-bit caches, the query heads of one kv head (up to 16) are the M
// side of mma.sync.m16n8k16, so each code is read and converted once for all of them (the CUDA-core kernel
// converts and multiplies every code once per query head: 0.27-0.45x cuDNN's fp16 speed for GQA 32/8,
// docs/QUANTIZED_CACHE.md). Block = W warps (4, or 8 where forced), one (entry, kv head, chunk of 16 query
// heads, split of the keys); tiles of KPW W keys' codes (KPW = 16, or 32 with 4 warps: the plan's
// choose_block_shape, kv_quant_attention_plan.h) and their int8 scales go to shared memory by cp.async, 3 or 4
// stages deep; warp w takes keys [KPW w, KPW w + KPW) of every tile with its own online softmax (KPW / 8
// independent Q K^T chains); the warps merge at the end, and the block writes its rows (one split) or the
// split's partial state to the workspace (kv_quant_attention_cuda.cuh) for merge_kernel. Codes become 16-bit
// MMA operands in registers, straight from shared memory (ldmatrix moves 16-bit elements only), in orders that
// need no shuffles:
//  * S = Q K^T: the dims of k16 step ks, lane quad t, are 64 (ks / 4) + 16 t + 4 (ks % 4) + 0..3 for Q and K
//    alike (a permutation of the dot product's terms), so one 16-byte load of a key gives a lane four steps' B
//    fragments.
//  * O += P V: the B fragment pairs two keys at one dim. A lane reads D/8 codes of each of its keys 2t, 2t+1,
//    2t+8, 2t+9 and interleaves pairs with byte permutes; column n of n8 tile dn is dim (D/8) n + dn, undone
//    where the output is written.
// Scales never touch the codes: fp8's per-head K scale joins the softmax scale and its V scale the output;
// int8's per-token K scale multiplies the float32 scores column-wise after the MMA, its per-token V scale
// multiplies P before P V, relative to U, the largest V scale the warp has seen (a running maximum that
// rescales O like the softmax maximum does), so P stays in [0, 1]: no 16-bit overflow whatever the scales. P is
// rounded to 16 bits as in the 16-bit kernel; all else is float32.
#pragma once

#include "kv_quant_attention_mma_common_cuda.cuh"

namespace pvt {
namespace quant_cuda {
namespace mma {

using decode_cuda::online_softmax_row;
using decode_cuda::rescale_rows;

template <typename T, KvQuant kKind, int D, int W, int KPW>
__global__ void __launch_bounds__(32 * W) mma_split_kernel(const QuantAttentionParams p, const Launch l, float* ws) {
  constexpr int KS = D / 16, NT = D / 8, VB = D / 8;
  constexpr int kWarps = W, kTileKeys = mma_tile_keys(W, KPW);
  constexpr int NK = KPW / 8, KK = KPW / 16;  // a warp's n8 tiles of scores, and its k16 steps of P V
  constexpr bool kPerToken = kKind == KvQuant::kInt8;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(KPW == 16 || KPW == 32, "16 or 32 keys a warp");
  static_assert((kWarps * kMmaHeads * D + 2 * kWarps * kMmaHeads) * 4 <= smem_bytes<D, W, KPW>(), "the merge fits the tiles");
  extern __shared__ __align__(16) uint8_t smem[];

  const int64_t b = blockIdx.z;
  const int chunks = (l.group + kMmaHeads - 1) / kMmaHeads;
  const int hk = static_cast<int>(blockIdx.y) / chunks;                       // kv head
  const int split = static_cast<int>(blockIdx.x);
  // Launched programmatically: nothing global is read before the kernel ahead (the append of this
  // step's K/V, the last call's merge reading the workspace) has finished; only L2 is asked for the split's
  // first tiles meanwhile (prefetch_split_start).
  prefetch_split_start<D, W, KPW, kPerToken>(p, l, b, hk, split);
  decode_cuda::wait_for_previous_grid();
  const DecodeAttentionParams& a = p.attn;
  const int h0 = (static_cast<int>(blockIdx.y) - hk * chunks) * kMmaHeads;     // first query head of the chunk, in the group
  const int rows = l.group - h0 < kMmaHeads ? l.group - h0 : kMmaHeads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const EntryView e = entry_of(a, b);
  const int64_t s0 = split * l.keys_per_split;
  const int64_t s1 = e.n < s0 + l.keys_per_split ? e.n : s0 + l.keys_per_split;
  const int n_tiles = s1 > s0 ? static_cast<int>((s1 - s0 + kTileKeys - 1) / kTileKeys) : 0;

  SplitTiles<D, W, KPW, kPerToken> tiles(smem, p, e, hk, s0, s1);
  tiles.prime();

  // Q as the A operand (rows g and g + 8 of the chunk, dims in the permuted order above), while the
  // first tiles fly; zeros for rows that are not query heads of this entry.
  uint32_t qa[KS][4];
  {
    const T* q = static_cast<const T*>(a.q);
    const int64_t row_stride = a.cu_seqlens_q ? a.q_stride[1] : a.q_stride[0];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int r = g + 8 * hi;
      const bool live = r < rows && e.q_row >= 0;
      const T* qr = q + (live ? e.q_row * row_stride + (static_cast<int64_t>(hk) * l.group + h0 + r) * a.q_stride[2] : 0);
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const int d0 = 64 * (ks / 4) + 16 * t + 4 * (ks % 4);
        float x[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x[j] = live ? cuda_float::to_float(qr[(d0 + j) * a.q_stride[3]]) : 0.f;
        qa[ks][hi] = pack2<T>(x[0], x[1]);
        qa[ks][2 + hi] = pack2<T>(x[2], x[3]);
      }
    }
  }

  // Biased int8 codes: each row's scores less 1152 sum(q), over the row's float16 q (the quad's lanes
  // hold a row's dims between them).
  constexpr bool kBiased = biased_int8<T, kKind>();
  float s_bias[2] = {0.f, 0.f};
  if constexpr (kBiased) {
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      float sum = 0.f;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&qa[ks][hi]));
        const float2 y = __half22float2(*reinterpret_cast<const __half2*>(&qa[ks][2 + hi]));
        sum += (x.x + x.y) + (y.x + y.y);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      s_bias[hi] = -kInt8Bias * sum;
    }
  }

  // Scores in the log2 domain; fp8's per-head scales: K's here, V's on the output.
  float scale2 = a.scale * kLog2e, out_factor = 1.f;
  if constexpr (!kPerToken) {
    scale2 *= __ldg(tiles.ksb);
    out_factor = __ldg(tiles.vsb);
  }
  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f}, U = 0.f, inv_u = 0.f;
  // O's n8 tiles, and for biased int8 one more: -1152 sum(p) of each row (every column alike).
  float o[kBiased ? NT + 1 : NT][4];
#pragma unroll
  for (int n = 0; n < (kBiased ? NT + 1 : NT); ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  // Adds the bias tile into O's tiles and clears it.
  auto fold_bias = [&]() {
    if constexpr (kBiased) fold_bias_tile(o);
  };

  const int kw = warp * KPW;  // the warp's first key in every tile
  for (int i = 0; i < n_tiles; ++i) {
    tiles.step();  // tile i has landed for every thread; tile i + stages<D>() - 1 is on its way
    const int visible = tiles.visible(kw);
    if (visible == 0) continue;  // warp-uniform (only a split's last tile)

    // S = Q K^T over the warp's KPW keys (NK n8 tiles): key kw + nt * 8 + g per lane.
    float s[NK][4];
#pragma unroll
    for (int nt = 0; nt < NK; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
    // kg and j outer, the n8 tile inner: the NK accumulator chains (8 MMAs each at D = 128) interleave.
#pragma unroll
    for (int kg = 0; kg < D / 64; ++kg) {
      uint4 w4[NK];
#pragma unroll
      for (int nt = 0; nt < NK; ++nt) {
        w4[nt] = *reinterpret_cast<const uint4*>(tiles.k() + chunk_at<D>(kw + nt * 8 + g, 4 * kg + t));
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int nt = 0; nt < NK; ++nt) {
          const uint32_t w = j == 0 ? w4[nt].x : j == 1 ? w4[nt].y : j == 2 ? w4[nt].z : w4[nt].w;
          mma_16816<T>(s[nt], qa[4 * kg + j], code_pair<T, kKind, 0>(w), code_pair<T, kKind, 1>(w));
        }
      }
    }
    if constexpr (kBiased) {  // after the MMAs (as their first accumulator it kept ptxas from interleaving the chains)
#pragma unroll
      for (int nt = 0; nt < NK; ++nt) {
#pragma unroll
        for (int r = 0; r < 4; ++r) s[nt][r] += s_bias[r >> 1];
      }
    }
    // This lane's columns are keys kw + nt * 8 + 2t + j; rows g (s[.][0..1]) and g + 8 (s[.][2..3]).
    float kf[NK][2], pf[NK][2], cv = 1.f;
#pragma unroll
    for (int nt = 0; nt < NK; ++nt) kf[nt][0] = kf[nt][1] = scale2, pf[nt][0] = pf[nt][1] = 1.f;
    if constexpr (kPerToken) {
      float vmax = 0.f;
#pragma unroll
      for (int nt = 0; nt < NK; ++nt) {
        const float2 ksc = *reinterpret_cast<const float2*>(tiles.scale_k() + kw + nt * 8 + 2 * t);
        const float2 vsc = *reinterpret_cast<const float2*>(tiles.scale_v() + kw + nt * 8 + 2 * t);
        kf[nt][0] = scale2 * ksc.x, kf[nt][1] = scale2 * ksc.y;
        pf[nt][0] = vsc.x, pf[nt][1] = vsc.y;
        vmax = fmaxf(vmax, fmaxf(vsc.x, vsc.y));
      }
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 1));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 2));  // the warp's KPW keys
      grow_v_scale(vmax, U, inv_u, cv);  // warp-uniform: every quad holds the same keys' scales
#pragma unroll
      for (int nt = 0; nt < NK; ++nt) pf[nt][0] *= inv_u, pf[nt][1] *= inv_u;
    }
    float corr[2];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      // lsum: this lane's share of the sum of P, without V scales; O also rescales when U grew (cv)
      corr[hi] = cv * online_softmax_row(s, hi, 2 * t, visible, m[hi], lsum[hi], [&](int nt, int j) { return kf[nt][j]; });
    }
    rescale_rows(o, corr);
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {  // k16 steps of P V: keys kw + 16 kk .. + 15 (n8 tiles 2 kk, 2 kk + 1)
      const int a0 = 2 * kk, a1 = 2 * kk + 1;
      // O += P V: P (times int8's V scales over U) as the A operand straight from the scores.
      const uint32_t pa[4] = {pack2<T>(s[a0][0] * pf[a0][0], s[a0][1] * pf[a0][1]), pack2<T>(s[a0][2] * pf[a0][0], s[a0][3] * pf[a0][1]),
                              pack2<T>(s[a1][0] * pf[a1][0], s[a1][1] * pf[a1][1]), pack2<T>(s[a1][2] * pf[a1][0], s[a1][3] * pf[a1][1])};
      const VStepCodes<D> vc(tiles.v(), kw + 16 * kk, g, t);
#pragma unroll
      for (int j = 0; j < VB / 4; ++j) {
        // [k0.b0, k1.b0, k0.b1, k1.b1] and [k0.b2, k1.b2, k0.b3, k1.b3]: dims 4j .. 4j + 3 as key pairs.
        const uint32_t lo01 = vc.lo01(j), hi01 = vc.hi01(j), lo89 = vc.lo89(j), hi89 = vc.hi89(j);
        mma_16816<T>(o[4 * j + 0], pa, code_pair<T, kKind, 0>(lo01), code_pair<T, kKind, 0>(lo89));
        mma_16816<T>(o[4 * j + 1], pa, code_pair<T, kKind, 1>(lo01), code_pair<T, kKind, 1>(lo89));
        mma_16816<T>(o[4 * j + 2], pa, code_pair<T, kKind, 0>(hi01), code_pair<T, kKind, 0>(hi89));
        mma_16816<T>(o[4 * j + 3], pa, code_pair<T, kKind, 1>(hi01), code_pair<T, kKind, 1>(hi89));
      }
      if constexpr (kBiased) mma_16816<T>(o[NT], pa, kNegBiasPair, kNegBiasPair);
    }
    if constexpr (kBiased) {
      if (i % (kBiasFoldTiles / KK) == kBiasFoldTiles / KK - 1) fold_bias();  // every 64 warp tiles of 16 keys
    }
  }
  fold_bias();
  cp_async_wait<0>();
  __syncthreads();  // the tiles' space is free for the merge
  decode_cuda::allow_next_grid();  // the merge kernel's blocks may be placed (they wait for this grid)

  // Each row's sum over its 4 lanes, then the warps' states through shared memory, in natural dim order.
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    lsum[hi] += __shfl_xor_sync(0xffffffffu, lsum[hi], 1);
    lsum[hi] += __shfl_xor_sync(0xffffffffu, lsum[hi], 2);
  }
  const float ofac = kPerToken ? U : out_factor;
  const WarpStates<D, W> states(smem);
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int r = g + 8 * hi;
    if (r >= rows) continue;
    if (t == 0) {
      states.m[warp * kMmaHeads + r] = m[hi];
      states.l[warp * kMmaHeads + r] = lsum[hi];
    }
#pragma unroll
    for (int dn = 0; dn < NT; ++dn) {
#pragma unroll
      for (int j = 0; j < 2; ++j) states.o[(warp * kMmaHeads + r) * D + VB * (2 * t + j) + dn] = o[dn][2 * hi + j] * ofac;
    }
  }
  __syncthreads();
  // The block's rows merged over its warps: written (one split: no merge kernel, 1-2 us less at B = 1 on the
  // H200, docs/QUANTIZED_CACHE.md) or left in the workspace for merge_kernel.
  finish_block<T, D, W>(a, l, e, b, static_cast<int64_t>(hk) * l.group + h0, rows, split, ws, states);
}

}  // namespace mma
}  // namespace quant_cuda
}  // namespace pvt

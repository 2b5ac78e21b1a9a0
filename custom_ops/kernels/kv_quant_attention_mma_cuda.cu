// Decode attention over an 8-bit cache on tensor cores (kv_quant_attention.h, the CUDA-core kernel's
// contract: one query token per entry, no mask) for q of float16 / bfloat16 at head_dim 64 and 128.
// As decode_attention_mma_cuda.cuh does for 16-bit caches, the query heads of one kv head (up to 16)
// are the M side of mma.sync.m16n8k16, so each code is read and converted once for all of them (the
// CUDA-core kernel converts and multiplies every code once per query head: 0.27-0.45x cuDNN's fp16
// speed for GQA 32/8, docs/QUANTIZED_CACHE.md). Block = W warps (4, or 8 where forced), one (entry, kv
// head, chunk of 16 query heads, split of the keys); tiles of KPW W keys' codes (KPW = 16, or 32 with 4
// warps: the plan's choose_block_shape, kv_quant_attention_plan.h) and their int8
// scales go to shared memory by cp.async, 3 or 4 stages deep; warp w takes keys [KPW w, KPW w + KPW) of
// every tile with its own online softmax (KPW / 8 independent Q K^T chains); the warps merge at the end,
// and the block writes its rows (one split) or the split's partial state to the workspace
// (kv_quant_attention_cuda.cuh) for merge_kernel.
//
// Codes become 16-bit MMA operands in registers, straight from shared memory (ldmatrix moves 16-bit
// elements only), in orders that need no shuffles:
//  * S = Q K^T: the dims of k16 step ks, lane quad t, are 64 (ks / 4) + 16 t + 4 (ks % 4) + 0..3 for
//    Q and K alike (a permutation of the dot product's terms), so one 16-byte load of a key gives a
//    lane four steps' B fragments.
//  * O += P V: the B fragment pairs two keys at one dim. A lane reads D/8 codes of each of its keys
//    2t, 2t+1, 2t+8, 2t+9 and interleaves pairs with byte permutes; column n of n8 tile dn is dim
//    (D/8) n + dn, undone where the output is written.
// Scales never touch the codes: fp8's per-head K scale joins the softmax scale and its V scale the
// output; int8's per-token K scale multiplies the float32 scores column-wise after the MMA, its
// per-token V scale multiplies P before P V, relative to U, the largest V scale the warp has seen
// (a running maximum that rescales O like the softmax maximum does), so P stays in [0, 1]: no 16-bit
// overflow whatever the scales. P is rounded to 16 bits as in the 16-bit kernel; all else is float32.
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../core/cuda_check.h"
#include "decode_attention_launch_cuda.cuh"  // launch_kernel, query_resident
#include "decode_attention_mma_cuda.cuh"  // mma_16816, pack2, the cp.async helpers
#include "kv_quant_attention_cuda.cuh"

namespace pvt {
namespace quant_cuda {
namespace {

using decode_cuda::cp_async16;
using decode_cuda::cp_async_commit;
using decode_cuda::cp_async_wait;
using decode_cuda::mma_16816;
using decode_cuda::online_softmax_row;
using decode_cuda::pack2;
using decode_cuda::prime_pipeline;
using decode_cuda::rescale_rows;

template <int D>
__host__ __device__ constexpr int stages() {
  // ~50 KB of tiles a block with 16 keys a warp (3 blocks an SM, by registers). 4 stages at D = 128 took
  // 0.94-1.07x the time for fp8 and 1.01-1.19x for int8 (H200, 2026-12-02, docs/QUANTIZED_CACHE.md).
  // With 32 keys a warp ~100 KB: 2 blocks an SM, as its 208-230 registers allow anyway (held to 168 with 2
  // stages for 3 blocks an SM, int8 ran up to 13% slower and fp8 -4% to +7%: docs/QUANTIZED_CACHE.md).
  return D == 64 ? 4 : 3;
}
template <int D, int W, int KPW>
__host__ __device__ constexpr int stage_bytes() {
  return 2 * mma_tile_keys(W, KPW) * D + 2 * mma_tile_keys(W, KPW) * 4;  // K codes, V codes, K scales, V scales
}
template <int D, int W, int KPW>
__host__ __device__ constexpr int smem_bytes() {
  return stages<D>() * stage_bytes<D, W, KPW>();
}

// Byte offset of 16-byte chunk c of tile key `key` (rows of D codes), XOR-swizzled so that neither
// the K reads (keys 2p, 2p + 1 x chunks 4kg + 0..3 in one quarter warp) nor the V reads (keys
// 2t + c, t = 0..3 x chunks 2p, 2p + 1) meet in a bank at D = 128 (2-way for V at D = 64).
template <int D>
__device__ __forceinline__ int chunk_at(int key, int c) {
  constexpr int CH = D / 16;
  return key * D + 16 * (c ^ ((((key & 1) << 2) ^ (key & 6)) & (CH - 1)));
}

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool pred) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = pred ? 4 : 0;  // 0: a zero, nothing read
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
#else
  *static_cast<float*>(smem) = pred ? __ldg(static_cast<const float*>(gmem)) : 0.f;
#endif
}

// int8 codes under float16 q are decoded with a bias: the code b as the float16 b + 1152, exactly (b ^ 0x80
// into the mantissa of 1024, half 0x6400: 1024 + b + 128), one byte permute a pair and no subtraction (a
// float16 subtraction a pair was 64 of the int8 loop's ~790 instructions a warp and tile). The bias is taken
// out whole: each score gets -1152 sum(q) of its row added after the MMAs (sum over the float16 q the MMA
// multiplies), and an extra n8 tile of O accumulates P times a column of -1152, i.e. -1152 sum(p) of its
// row with P as the MMA rounds it, added to O at the end and every kBiasFoldTiles tiles (so O never
// carries more than that many tiles' bias: the MMA truncates its float32 sums, about an ulp of the
// accumulator a tile). Executed instructions -9%, time within +-2% of the subtracting kernel (H200,
// docs/QUANTIZED_CACHE.md): the loop is bound by latency, not by issue.
template <typename T, KvQuant kKind>
__host__ __device__ constexpr bool biased_int8() {
  return kKind == KvQuant::kInt8 && std::is_same_v<T, __half>;
}
constexpr float kInt8Bias = 1152.f;
constexpr uint32_t kNegBiasPair = 0xE480E480u;  // float16 -1152 twice
constexpr int kBiasFoldTiles = 64;

// Codes 2i and 2i + 1 of w (bytes, the lower one first) as one register of two T values, exact (int8
// under float16 q: each plus 1152, above).
template <typename T, KvQuant kKind, int i>
__device__ __forceinline__ uint32_t code_pair(uint32_t w) {
  if constexpr (biased_int8<T, kKind>()) {
    return __byte_perm(w ^ 0x80808080u, 0x64646464u, i == 0 ? 0x4140 : 0x4342);
  } else if constexpr (kKind == KvQuant::kInt8) {
    return pack2<T>(static_cast<float>(static_cast<int8_t>(w >> (16 * i))),
                    static_cast<float>(static_cast<int8_t>(w >> (16 * i + 8))));
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    if constexpr (std::is_same_v<T, __half>) {
      // One cvt.rn.f16x2.e4m3x2 a pair on the register's half i, as CUTLASS converts (no shift of w).
      uint32_t r;
      if constexpr (i == 0) {
        asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(r) : "r"(w));
      } else {
        asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n}" : "=r"(r) : "r"(w));
      }
      return r;
    } else {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> (16 * i)), __NV_E4M3);
      const float2 f = __half22float2(__half2(h));
      return pack2<T>(f.x, f.y);
    }
#else
    return pack2<T>(kv_quant::fp8_e4m3_decode(static_cast<uint8_t>(w >> (16 * i))),
                    kv_quant::fp8_e4m3_decode(static_cast<uint8_t>(w >> (16 * i + 8))));
#endif
  }
}

template <typename T, KvQuant kKind, int D, int W, int KPW>
__global__ void __launch_bounds__(32 * W) mma_split_kernel(const QuantAttentionParams p, const Launch l, float* ws) {
  constexpr int KS = D / 16, NT = D / 8, VB = D / 8, CH = D / 16, STAGES = stages<D>();
  constexpr int kWarps = W, kThreads = 32 * W, kTileKeys = mma_tile_keys(W, KPW);
  constexpr int NK = KPW / 8, KK = KPW / 16;  // a warp's n8 tiles of scores, and its k16 steps of P V
  constexpr int kPasses = kTileKeys * CH / kThreads;  // 16-byte chunks of K (and of V) a thread copies a tile
  constexpr int kScalePasses = 2 * kTileKeys / kThreads;  // int8: K and V scales a thread copies a tile
  constexpr bool kPerToken = kKind == KvQuant::kInt8;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(KPW == 16 || KPW == 32, "16 or 32 keys a warp");
  static_assert(kThreads % CH == 0 && kTileKeys * CH % kThreads == 0 && 2 * kTileKeys % kThreads == 0, "copy shape");
  static_assert((kWarps * kMmaHeads * D + 2 * kWarps * kMmaHeads) * 4 <= smem_bytes<D, W, KPW>(), "the merge fits the tiles");
  extern __shared__ __align__(16) uint8_t smem[];

  // Launched programmatically: nothing global is read before the kernel ahead (the append of this
  // step's K/V, the last call's merge reading the workspace) has finished.
  decode_cuda::wait_for_previous_grid();
  const DecodeAttentionParams& a = p.attn;
  const int64_t b = blockIdx.z;
  const int chunks = (l.group + kMmaHeads - 1) / kMmaHeads;
  const int hk = static_cast<int>(blockIdx.y) / chunks;                       // kv head
  const int h0 = (static_cast<int>(blockIdx.y) - hk * chunks) * kMmaHeads;     // first query head of the chunk, in the group
  const int rows = l.group - h0 < kMmaHeads ? l.group - h0 : kMmaHeads;
  const int split = static_cast<int>(blockIdx.x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const EntryView e = entry_of(a, b);
  const int64_t s0 = split * l.keys_per_split;
  const int64_t s1 = e.n < s0 + l.keys_per_split ? e.n : s0 + l.keys_per_split;
  const int n_tiles = s1 > s0 ? static_cast<int>((s1 - s0 + kTileKeys - 1) / kTileKeys) : 0;  // 32-bit: cheap % STAGES

  const uint8_t* kb = static_cast<const uint8_t*>(a.k) + e.row * a.k_stride[1] + hk * a.k_stride[2];
  const uint8_t* vb = static_cast<const uint8_t*>(a.v) + e.row * a.v_stride[1] + hk * a.v_stride[2];
  const float* ksb = p.k_scale + e.row * p.k_scale_stride[1] + hk * p.k_scale_stride[2];
  const float* vsb = p.v_scale + e.row * p.v_scale_stride[1] + hk * p.v_scale_stride[2];
  auto tile_k = [&](int st) { return smem + st * stage_bytes<D, W, KPW>(); };
  auto tile_v = [&](int st) { return tile_k(st) + kTileKeys * D; };
  auto scale_k = [&](int st) { return reinterpret_cast<float*>(tile_v(st) + kTileKeys * D); };
  auto scale_v = [&](int st) { return scale_k(st) + kTileKeys; };

  // Thread: chunk column ch of keys key0 + it * (kThreads / CH); for int8, one scale (K: the first half of
  // the threads).
  const int ch = static_cast<int>(threadIdx.x) % CH, key0 = static_cast<int>(threadIdx.x) / CH;
  auto load_tile = [&](int i, int st) {
    const int64_t t0 = s0 + static_cast<int64_t>(i) * kTileKeys, left = s1 - t0;  // keys of the tile inside the split
#pragma unroll
    for (int it = 0; it < kPasses; ++it) {
      const int key = key0 + it * (kThreads / CH);
      const bool ok = key < left;  // past the split: zeros, masked below
      cp_async16(tile_k(st) + chunk_at<D>(key, ch), ok ? kb + (t0 + key) * a.k_stride[0] + 16 * ch : kb, ok);
      cp_async16(tile_v(st) + chunk_at<D>(key, ch), ok ? vb + (t0 + key) * a.v_stride[0] + 16 * ch : vb, ok);
    }
    if constexpr (kPerToken) {
#pragma unroll
      for (int sp = 0; sp < kScalePasses; ++sp) {
        const int idx = static_cast<int>(threadIdx.x) + sp * kThreads, key = idx % kTileKeys;
        const bool ok = key < left, is_v = idx >= kTileKeys;
        const float* src = is_v ? vsb + (t0 + key) * p.v_scale_stride[0] : ksb + (t0 + key) * p.k_scale_stride[0];
        cp_async4((is_v ? scale_v(st) : scale_k(st)) + key, ok ? src : ksb, ok);
      }
    }
    cp_async_commit();
  };
  prime_pipeline<STAGES>(n_tiles, load_tile);

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
    scale2 *= __ldg(ksb);
    out_factor = __ldg(vsb);
  }
  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f}, U = 0.f, inv_u = 0.f;
  // O's n8 tiles, and for biased int8 one more: -1152 sum(p) of each row (every column alike).
  float o[kBiased ? NT + 1 : NT][4];
#pragma unroll
  for (int n = 0; n < (kBiased ? NT + 1 : NT); ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  // Adds the bias tile into O's tiles and clears it.
  auto fold_bias = [&]() {
    if constexpr (kBiased) {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int j = 0; j < 4; ++j) o[n][j] += o[NT][j];
      }
      o[NT][0] = o[NT][1] = o[NT][2] = o[NT][3] = 0.f;
    }
  };

  const int kw = warp * KPW;  // the warp's first key in every tile
  for (int i = 0; i < n_tiles; ++i) {
    cp_async_wait<STAGES - 2>();  // tile i has landed
    __syncthreads();              // ... for every thread; and every warp is done with tile i - 1
    const int next = i + STAGES - 1;
    if (next < n_tiles) {
      load_tile(next, next % STAGES);
    } else {
      cp_async_commit();
    }
    const int st = i % STAGES;
    const int64_t ahead = s1 - (s0 + static_cast<int64_t>(i) * kTileKeys + kw);
    const int visible = ahead <= 0 ? 0 : ahead >= KPW ? KPW : static_cast<int>(ahead);
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
        w4[nt] = *reinterpret_cast<const uint4*>(tile_k(st) + chunk_at<D>(kw + nt * 8 + g, 4 * kg + t));
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
        const float2 ksc = *reinterpret_cast<const float2*>(scale_k(st) + kw + nt * 8 + 2 * t);
        const float2 vsc = *reinterpret_cast<const float2*>(scale_v(st) + kw + nt * 8 + 2 * t);
        kf[nt][0] = scale2 * ksc.x, kf[nt][1] = scale2 * ksc.y;
        pf[nt][0] = vsc.x, pf[nt][1] = vsc.y;
        vmax = fmaxf(vmax, fmaxf(vsc.x, vsc.y));
      }
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 1));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 2));  // the warp's KPW keys
      if (vmax > U) {  // warp-uniform (every quad holds the same keys' scales); rare past the first tiles
        inv_u = 1.f / vmax;
        cv = U * inv_u;
        U = vmax;
      }
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
      uint32_t vw[4][VB / 4];  // keys 2t, 2t + 1, 2t + 8, 2t + 9 of the step: codes VB g .. VB g + VB - 1
  #pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int key = kw + 16 * kk + 2 * t + (r & 1) + 8 * (r >> 1);
        if constexpr (VB == 16) {
          const uint4 x = *reinterpret_cast<const uint4*>(tile_v(st) + chunk_at<D>(key, g));
          vw[r][0] = x.x, vw[r][1] = x.y, vw[r][2] = x.z, vw[r][3] = x.w;
        } else {
          const uint2 x = *reinterpret_cast<const uint2*>(tile_v(st) + chunk_at<D>(key, g >> 1) + 8 * (g & 1));
          vw[r][0] = x.x, vw[r][1] = x.y;
        }
      }
  #pragma unroll
      for (int j = 0; j < VB / 4; ++j) {
        // [k0.b0, k1.b0, k0.b1, k1.b1] and [k0.b2, k1.b2, k0.b3, k1.b3]: dims 4j .. 4j + 3 as key pairs.
        const uint32_t lo01 = __byte_perm(vw[0][j], vw[1][j], 0x5140), hi01 = __byte_perm(vw[0][j], vw[1][j], 0x7362);
        const uint32_t lo89 = __byte_perm(vw[2][j], vw[3][j], 0x5140), hi89 = __byte_perm(vw[2][j], vw[3][j], 0x7362);
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
  float* sm_o = reinterpret_cast<float*>(smem);  // [kWarps][16][D]
  float* sm_m = sm_o + kWarps * kMmaHeads * D;   // [kWarps][16]
  float* sm_l = sm_m + kWarps * kMmaHeads;       // [kWarps][16]
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int r = g + 8 * hi;
    if (r >= rows) continue;
    if (t == 0) {
      sm_m[warp * kMmaHeads + r] = m[hi];
      sm_l[warp * kMmaHeads + r] = lsum[hi];
    }
#pragma unroll
    for (int dn = 0; dn < NT; ++dn) {
#pragma unroll
      for (int j = 0; j < 2; ++j) sm_o[(warp * kMmaHeads + r) * D + VB * (2 * t + j) + dn] = o[dn][2 * hi + j] * ofac;
    }
  }
  __syncthreads();
  // The block's rows merged over its warps: written (one split: no merge kernel, 1-2 us less at B = 1 on the
  // H200, docs/QUANTIZED_CACHE.md) or left in the workspace for merge_kernel.
  const int64_t head0 = static_cast<int64_t>(hk) * l.group + h0;  // the chunk's first query head
  for (int idx = threadIdx.x; idx < rows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w * kMmaHeads + r]);
    float sum = 0.f, acc = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float c = exp2f(sm_m[w * kMmaHeads + r] - mx);
        sum += sm_l[w * kMmaHeads + r] * c;
        acc += sm_o[(w * kMmaHeads + r) * D + d] * c;
      }
    }
    if (l.mma_writes_rows()) {
      if (e.q_row >= 0) write_head<T>(a, e, head0 + r, d, mx, sum, acc);
    } else {
      float* out = ws + partial_at(a, l, b, head0 + r, split);
      out[2 + d] = acc;
      if (d == 0) {
        out[0] = mx;
        out[1] = sum;
      }
    }
  }
  if (l.mma_writes_rows() && threadIdx.x == 0 && e.refused && a.error_flag) *a.error_flag = 1;
}

// The 8x8 matrix of 16-bit values a warp holds one register a lane (row lane / 4, columns 2 (lane % 4)
// and + 1), transposed in registers.
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
  return r;
#else
  return x;
#endif
}

// Keys on the M side, for groups of at most 8 query heads (Launch::keys_on_m): S^T = K Q^T and O^T = V^T P^T
// on mma.m16n8k16 with 16 keys (for P V: 16 dims) as M and the query heads as N (8, the rows past the group
// zero). mma_split_kernel puts the query heads on M, where a group of 1-8 fills at most half the 16 rows:
// here the same codes take half the MMAs and O half the registers (D / 16 m16 tiles of 4 floats a lane
// instead of D / 8 n8 tiles). Same tiles, split ranges, scales, int8 bias and end as mma_split_kernel.
// A lane's S^T holds keys g and g + 8 of each m16 tile for query rows 2t and 2t + 1, so a row's maximum and
// sum run over the lanes of one t (xor 4, 8, 16); P becomes the B operand of P V through one movmatrix a
// register. O^T's m16 tile mt holds dims VB g + 2 mt (its rows g) and VB g + 2 mt + 1 (rows g + 8): the dims
// each lane reads of V, so V's A fragments are mma_split_kernel's byte permutes of the same loads.
template <typename T, KvQuant kKind, int D, int W, int KPW>
__global__ void __launch_bounds__(32 * W, 512 / (32 * W)) mma_keys_kernel(const QuantAttentionParams p, const Launch l, float* ws) {
  constexpr int KS = D / 16, MT = D / 16, VB = D / 8, CH = D / 16, STAGES = stages<D>();
  constexpr int kWarps = W, kThreads = 32 * W, kTileKeys = mma_tile_keys(W, KPW);
  constexpr int MK = KPW / 16;  // a warp's m16 tiles of keys (and k16 steps of P V)
  constexpr int kPasses = kTileKeys * CH / kThreads;
  constexpr int kScalePasses = 2 * kTileKeys / kThreads;
  constexpr bool kPerToken = kKind == KvQuant::kInt8;
  constexpr bool kBiased = biased_int8<T, kKind>();
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(KPW == 16 || KPW == 32, "16 or 32 keys a warp");
  static_assert(kThreads % CH == 0 && kTileKeys * CH % kThreads == 0 && 2 * kTileKeys % kThreads == 0, "copy shape");
  static_assert((kWarps * kMmaHeads * D + 2 * kWarps * kMmaHeads) * 4 <= smem_bytes<D, W, KPW>(), "the merge fits the tiles");
  extern __shared__ __align__(16) uint8_t smem[];

  decode_cuda::wait_for_previous_grid();  // as mma_split_kernel
  const DecodeAttentionParams& a = p.attn;
  const int64_t b = blockIdx.z;
  const int hk = static_cast<int>(blockIdx.y);  // one chunk a kv head: group <= 8
  const int rows = l.group;
  const int split = static_cast<int>(blockIdx.x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const EntryView e = entry_of(a, b);
  const int64_t s0 = split * l.keys_per_split;
  const int64_t s1 = e.n < s0 + l.keys_per_split ? e.n : s0 + l.keys_per_split;
  const int n_tiles = s1 > s0 ? static_cast<int>((s1 - s0 + kTileKeys - 1) / kTileKeys) : 0;

  const uint8_t* kb = static_cast<const uint8_t*>(a.k) + e.row * a.k_stride[1] + hk * a.k_stride[2];
  const uint8_t* vb = static_cast<const uint8_t*>(a.v) + e.row * a.v_stride[1] + hk * a.v_stride[2];
  const float* ksb = p.k_scale + e.row * p.k_scale_stride[1] + hk * p.k_scale_stride[2];
  const float* vsb = p.v_scale + e.row * p.v_scale_stride[1] + hk * p.v_scale_stride[2];
  auto tile_k = [&](int st) { return smem + st * stage_bytes<D, W, KPW>(); };
  auto tile_v = [&](int st) { return tile_k(st) + kTileKeys * D; };
  auto scale_k = [&](int st) { return reinterpret_cast<float*>(tile_v(st) + kTileKeys * D); };
  auto scale_v = [&](int st) { return scale_k(st) + kTileKeys; };
  const int ch = static_cast<int>(threadIdx.x) % CH, key0 = static_cast<int>(threadIdx.x) / CH;
  auto load_tile = [&](int i, int st) {
    const int64_t t0 = s0 + static_cast<int64_t>(i) * kTileKeys, left = s1 - t0;
#pragma unroll
    for (int it = 0; it < kPasses; ++it) {
      const int key = key0 + it * (kThreads / CH);
      const bool ok = key < left;
      cp_async16(tile_k(st) + chunk_at<D>(key, ch), ok ? kb + (t0 + key) * a.k_stride[0] + 16 * ch : kb, ok);
      cp_async16(tile_v(st) + chunk_at<D>(key, ch), ok ? vb + (t0 + key) * a.v_stride[0] + 16 * ch : vb, ok);
    }
    if constexpr (kPerToken) {
#pragma unroll
      for (int sp = 0; sp < kScalePasses; ++sp) {
        const int idx = static_cast<int>(threadIdx.x) + sp * kThreads, key = idx % kTileKeys;
        const bool ok = key < left, is_v = idx >= kTileKeys;
        const float* src = is_v ? vsb + (t0 + key) * p.v_scale_stride[0] : ksb + (t0 + key) * p.k_scale_stride[0];
        cp_async4((is_v ? scale_v(st) : scale_k(st)) + key, ok ? src : ksb, ok);
      }
    }
    cp_async_commit();
  };
  prime_pipeline<STAGES>(n_tiles, load_tile);

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
    scale2 *= __ldg(ksb);
    out_factor = __ldg(vsb);
  }
  // Rows 2t (index 0) and 2t + 1 (index 1) of this lane.
  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f}, U = 0.f, inv_u = 0.f;
  float o[kBiased ? MT + 1 : MT][4];  // O^T; for biased int8 one more tile: -1152 sum(p) of each row
#pragma unroll
  for (int n = 0; n < (kBiased ? MT + 1 : MT); ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  auto fold_bias = [&]() {
    if constexpr (kBiased) {
#pragma unroll
      for (int n = 0; n < MT; ++n) {
#pragma unroll
        for (int j = 0; j < 4; ++j) o[n][j] += o[MT][j];
      }
      o[MT][0] = o[MT][1] = o[MT][2] = o[MT][3] = 0.f;
    }
  };

  const int kw = warp * KPW;
  for (int i = 0; i < n_tiles; ++i) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = i + STAGES - 1;
    if (next < n_tiles) {
      load_tile(next, next % STAGES);
    } else {
      cp_async_commit();
    }
    const int st = i % STAGES;
    const int64_t ahead = s1 - (s0 + static_cast<int64_t>(i) * kTileKeys + kw);
    const int visible = ahead <= 0 ? 0 : ahead >= KPW ? KPW : static_cast<int>(ahead);
    if (visible == 0) continue;

    // int8: the warp's largest V scale, every lane reading all KPW (broadcasts, no shuffles), early.
    float vmax = 0.f;
    if constexpr (kPerToken) {
#pragma unroll
      for (int q4 = 0; q4 < KPW / 4; ++q4) {
        const float4 v4 = *reinterpret_cast<const float4*>(scale_v(st) + kw + 4 * q4);
        vmax = fmaxf(vmax, fmaxf(fmaxf(v4.x, v4.y), fmaxf(v4.z, v4.w)));
      }
    }
    // S^T = K Q^T: m16 tile mk holds keys kw + 16 mk + g (c0, c1) and + 8 (c2, c3), rows 2t, 2t + 1.
    float s[MK][4];
#pragma unroll
    for (int mk = 0; mk < MK; ++mk) s[mk][0] = s[mk][1] = s[mk][2] = s[mk][3] = 0.f;
#pragma unroll
    for (int kg = 0; kg < D / 64; ++kg) {
      uint4 wa[MK], wb[MK];
#pragma unroll
      for (int mk = 0; mk < MK; ++mk) {
        wa[mk] = *reinterpret_cast<const uint4*>(tile_k(st) + chunk_at<D>(kw + 16 * mk + g, 4 * kg + t));
        wb[mk] = *reinterpret_cast<const uint4*>(tile_k(st) + chunk_at<D>(kw + 16 * mk + g + 8, 4 * kg + t));
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
    // Per key (this lane's keys g and g + 8 of each m16 tile): the softmax scale (times int8's K scale)
    // and P's factor (int8's V scale over U).
    float kf[MK][2], pf[MK][2], cv = 1.f;
#pragma unroll
    for (int mk = 0; mk < MK; ++mk) kf[mk][0] = kf[mk][1] = scale2, pf[mk][0] = pf[mk][1] = 1.f;
    if constexpr (kPerToken) {
#pragma unroll
      for (int mk = 0; mk < MK; ++mk) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          kf[mk][h] = scale2 * scale_k(st)[kw + 16 * mk + g + 8 * h];
          pf[mk][h] = scale_v(st)[kw + 16 * mk + g + 8 * h];
        }
      }
      if (vmax > U) {  // warp-uniform
        inv_u = 1.f / vmax;
        cv = U * inv_u;
        U = vmax;
      }
#pragma unroll
      for (int mk = 0; mk < MK; ++mk) pf[mk][0] *= inv_u, pf[mk][1] *= inv_u;
    }
    float corr[2];
#pragma unroll
    for (int jr = 0; jr < 2; ++jr) {
      float mx = -INFINITY;
#pragma unroll
      for (int mk = 0; mk < MK; ++mk) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float& x = s[mk][2 * h + jr];
          if constexpr (kBiased) x += s_bias[jr];
          x = 16 * mk + g + 8 * h < visible ? x * kf[mk][h] : -INFINITY;
          mx = fmaxf(mx, x);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));  // the lanes of one t share its rows
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m[jr], mx);
      const float c = m_new == -INFINITY ? 1.f : exp2f(m[jr] - m_new);
      float sum = 0.f;
#pragma unroll
      for (int mk = 0; mk < MK; ++mk) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float& x = s[mk][2 * h + jr];
          x = m_new == -INFINITY ? 0.f : exp2f(x - m_new);
          sum += x;
        }
      }
      lsum[jr] = lsum[jr] * c + sum;  // without V scales
      m[jr] = m_new;
      corr[jr] = c * cv;
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
      uint32_t vw[4][VB / 4];  // keys 2t, 2t + 1, 2t + 8, 2t + 9 of the step: codes VB g .. VB g + VB - 1
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int key = kw + 16 * mk + 2 * t + (r & 1) + 8 * (r >> 1);
        if constexpr (VB == 16) {
          const uint4 x = *reinterpret_cast<const uint4*>(tile_v(st) + chunk_at<D>(key, g));
          vw[r][0] = x.x, vw[r][1] = x.y, vw[r][2] = x.z, vw[r][3] = x.w;
        } else {
          const uint2 x = *reinterpret_cast<const uint2*>(tile_v(st) + chunk_at<D>(key, g >> 1) + 8 * (g & 1));
          vw[r][0] = x.x, vw[r][1] = x.y;
        }
      }
#pragma unroll
      for (int j = 0; j < VB / 4; ++j) {
        const uint32_t lo01 = __byte_perm(vw[0][j], vw[1][j], 0x5140), hi01 = __byte_perm(vw[0][j], vw[1][j], 0x7362);
        const uint32_t lo89 = __byte_perm(vw[2][j], vw[3][j], 0x5140), hi89 = __byte_perm(vw[2][j], vw[3][j], 0x7362);
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
  float* sm_o = reinterpret_cast<float*>(smem);  // [kWarps][16][D]
  float* sm_m = sm_o + kWarps * kMmaHeads * D;   // [kWarps][16]
  float* sm_l = sm_m + kWarps * kMmaHeads;       // [kWarps][16]
#pragma unroll
  for (int jr = 0; jr < 2; ++jr) {
    const int r = 2 * t + jr;
    if (r >= rows) continue;
    if (g == 0) {
      sm_m[warp * kMmaHeads + r] = m[jr];
      sm_l[warp * kMmaHeads + r] = lsum[jr];
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) sm_o[(warp * kMmaHeads + r) * D + VB * g + 2 * mt + h] = o[mt][2 * h + jr] * ofac;
    }
  }
  __syncthreads();
  const int64_t head0 = static_cast<int64_t>(hk) * l.group;
  for (int idx = threadIdx.x; idx < rows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w * kMmaHeads + r]);
    float sum = 0.f, acc = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float c = exp2f(sm_m[w * kMmaHeads + r] - mx);
        sum += sm_l[w * kMmaHeads + r] * c;
        acc += sm_o[(w * kMmaHeads + r) * D + d] * c;
      }
    }
    if (l.mma_writes_rows()) {
      if (e.q_row >= 0) write_head<T>(a, e, head0 + r, d, mx, sum, acc);
    } else {
      float* out = ws + partial_at(a, l, b, head0 + r, split);
      out[2 + d] = acc;
      if (d == 0) {
        out[0] = mx;
        out[1] = sum;
      }
    }
  }
  if (l.mma_writes_rows() && threadIdx.x == 0 && e.refused && a.error_flag) *a.error_flag = 1;
}

template <typename T, KvQuant kKind, int D, int W, int KPW>
Status launch(const QuantAttentionParams& p, const Launch& l, float* ws, cudaStream_t stream) {
  const auto rows_kernel = mma_split_kernel<T, kKind, D, W, KPW>;
  const auto keys_kernel = mma_keys_kernel<T, kKind, D, W, KPW>;
  static const cudaError_t opt_in[2] = {  // above 48 KB of dynamic shared memory, once per instance
      cudaFuncSetAttribute(rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D, W, KPW>()),
      cudaFuncSetAttribute(keys_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D, W, KPW>())};
  PVT_CU_CHECK(opt_in[l.keys_on_m ? 1 : 0]);
  const int chunks = (l.group + kMmaHeads - 1) / kMmaHeads;
  const dim3 grid(static_cast<unsigned>(l.splits), static_cast<unsigned>(p.attn.kv_heads * chunks),
                  static_cast<unsigned>(p.attn.batch));
  return decode_cuda::launch_kernel(l.keys_on_m ? keys_kernel : rows_kernel, grid, 32 * W, smem_bytes<D, W, KPW>(), 1,
                                    l.programmatic, stream, p, l, ws);
}

template <typename T, KvQuant kKind, int D, int W, int KPW>
int resident(bool keys_on_m) {
  static const int blocks[2] = {
      decode_cuda::query_resident(mma_split_kernel<T, kKind, D, W, KPW>, 32 * W, smem_bytes<D, W, KPW>(), 1),
      decode_cuda::query_resident(mma_keys_kernel<T, kKind, D, W, KPW>, 32 * W, smem_bytes<D, W, KPW>(), 1)};
  return blocks[keys_on_m ? 1 : 0];
}

// f(kind, D, W, KPW) (integral constants) for the instance of p's kind and head_dim and the block's shape:
// 4 warps of 16 keys, 8 of 16, or 4 of 32 (the plan never asks for 8 of 32).
template <int N>
using IntC = std::integral_constant<int, N>;
template <class F>
auto by_instance(const QuantAttentionParams& p, int warps, int warp_keys, F f) {
  const bool d64 = p.attn.head_dim == 64;
  auto shape = [&](auto kind) {
    auto dim = [&](auto w, auto kpw) { return d64 ? f(kind, IntC<64>{}, w, kpw) : f(kind, IntC<128>{}, w, kpw); };
    if (warps == 8) return dim(IntC<8>{}, IntC<16>{});
    return warp_keys == 32 ? dim(IntC<4>{}, IntC<32>{}) : dim(IntC<4>{}, IntC<16>{});
  };
  return p.kind == KvQuant::kInt8 ? shape(std::integral_constant<KvQuant, KvQuant::kInt8>{})
                                  : shape(std::integral_constant<KvQuant, KvQuant::kFp8E4M3>{});
}

template <typename T>
int resident_of(const QuantAttentionParams& p, int warps, int warp_keys, bool keys_on_m) {
  return by_instance(p, warps, warp_keys, [&](auto kind, auto d, auto w, auto kpw) {
    return resident<T, decltype(kind)::value, decltype(d)::value, decltype(w)::value, decltype(kpw)::value>(keys_on_m);
  });
}

template <typename T>
Status launch_of(const QuantAttentionParams& p, const Launch& l, float* ws, cudaStream_t s) {
  return by_instance(p, l.warps, l.warp_keys, [&](auto kind, auto d, auto w, auto kpw) {
    return launch<T, decltype(kind)::value, decltype(d)::value, decltype(w)::value, decltype(kpw)::value>(p, l, ws, s);
  });
}

}  // namespace

bool mma_takes(const QuantAttentionParams& p, int device_major) {
  const ScalarType t = p.attn.dtype;
  return p.tensor_cores && device_major >= 8 && (t == ScalarType::kFloat16 || t == ScalarType::kBFloat16) &&
         (p.attn.head_dim == 64 || p.attn.head_dim == 128);
}

int quant_mma_resident(const QuantAttentionParams& p, int warps, int warp_keys, bool keys_on_m) {
  return p.attn.dtype == ScalarType::kFloat16 ? resident_of<__half>(p, warps, warp_keys, keys_on_m)
                                              : resident_of<__nv_bfloat16>(p, warps, warp_keys, keys_on_m);
}

Status quant_mma_split(const QuantAttentionParams& p, const Launch& l, float* ws, cudaStream_t stream) {
  return p.attn.dtype == ScalarType::kFloat16 ? launch_of<__half>(p, l, ws, stream)
                                              : launch_of<__nv_bfloat16>(p, l, ws, stream);
}

}  // namespace quant_cuda
}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

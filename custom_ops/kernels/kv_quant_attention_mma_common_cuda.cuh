// What the two tensor-core kernels over 8-bit caches share (kv_quant_attention_mma_rows_cuda.cuh: the query
// heads on the MMA's M side; kv_quant_attention_mma_keys_cuda.cuh: the keys on M): the shared-memory tiles
// and their cp.async loads, the codes as 16-bit MMA operands, int8's bias, and the end of a block (its warps'
// states merged, then written as rows or as the split's partial for merge_kernel). Include only from
// kv_quant_attention_mma_cuda.cu (nvcc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "decode_attention_mma_cuda.cuh"  // mma_16816, pack2, the cp.async helpers
#include "kv_quant_attention_cuda.cuh"

namespace pvt {
namespace quant_cuda {
namespace mma {

using decode_cuda::cp_async16;
using decode_cuda::cp_async_commit;
using decode_cuda::cp_async_wait;
using decode_cuda::exp2_ftz;
using decode_cuda::mma_16816;
using decode_cuda::pack2;
using decode_cuda::prime_pipeline;

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

// x, hidden from the compiler's rematerialization (kept in a register from here on): for lane offsets that
// ptxas would otherwise recompute from the thread index every tile.
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}
__device__ __forceinline__ int64_t opaque(int64_t x) {
  asm volatile("" : "+l"(x));
  return x;
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
// out whole: each score gets -1152 sum(q) of its row (sum over the float16 q the MMA multiplies) added after
// the MMAs, or in the keys kernel as the MMAs' starting value, and an extra n8 tile of O accumulates P times a
// column of -1152, i.e. -1152 sum(p) of its
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


// int8's bias tile (the last of o's N tiles: -1152 sum(p) of each row) added into the others and cleared, as
// both kernels do every kBiasFoldTiles warp tiles and at the end.
template <int N>
__device__ __forceinline__ void fold_bias_tile(float (&o)[N][4]) {
#pragma unroll
  for (int n = 0; n < N - 1; ++n) {
#pragma unroll
    for (int j = 0; j < 4; ++j) o[n][j] += o[N - 1][j];
  }
  o[N - 1][0] = o[N - 1][1] = o[N - 1][2] = o[N - 1][3] = 0.f;
}

// int8's running V-scale maximum U (P is multiplied by a key's V scale over U, so it stays in [0, 1]): where the
// warp's largest V scale of this tile, vmax, exceeds U, U grows to it, inv_u = 1 / U, and cv becomes O's factor
// U_old / U_new (left at 1 otherwise). Warp-uniform in both kernels; rare past the first tiles.
__device__ __forceinline__ void grow_v_scale(float vmax, float& U, float& inv_u, float& cv) {
  if (vmax > U) {
    inv_u = 1.f / vmax;
    cv = U * inv_u;
    U = vmax;
  }
}

// Called before wait_for_previous_grid: the first l.prefetch_tiles tiles of split `split` of (entry b, kv head
// hk), codes and int8's scales, asked of L2 (prefetch_rows_l2), so that HBM works while the kernel ahead ends.
// Launch::prefetch_tiles is 0 unless the keys' range is known on the host (choose_prefetch_tiles), so b is the
// cache row and keys below attn.kv_len exist.
template <int D, int W, int KPW, bool kPerToken>
__device__ __forceinline__ void prefetch_split_start(const QuantAttentionParams& p, const Launch& l, int64_t b, int hk,
                                                     int split) {
  if (l.prefetch_tiles <= 0) return;
  const DecodeAttentionParams& a = p.attn;
  const int64_t s0 = split * l.keys_per_split;
  const int64_t want = static_cast<int64_t>(l.prefetch_tiles) * mma_tile_keys(W, KPW);
  const int64_t end = a.kv_len < s0 + want ? a.kv_len : s0 + want;
  const int n = end > s0 ? static_cast<int>(end - s0) : 0;
  const uint8_t* k = static_cast<const uint8_t*>(a.k) + b * a.k_stride[1] + hk * a.k_stride[2] + s0 * a.k_stride[0];
  const uint8_t* v = static_cast<const uint8_t*>(a.v) + b * a.v_stride[1] + hk * a.v_stride[2] + s0 * a.v_stride[0];
  decode_cuda::prefetch_rows_l2<32 * W, D>(k, a.k_stride[0], n);
  decode_cuda::prefetch_rows_l2<32 * W, D>(v, a.v_stride[0], n);
  if constexpr (kPerToken) {
    auto at = [&](const float* s, const int64_t (&st)[3]) {
      return reinterpret_cast<const uint8_t*>(s + b * st[1] + hk * st[2] + s0 * st[0]);
    };
    decode_cuda::prefetch_rows_l2<32 * W, 4>(at(p.k_scale, p.k_scale_stride), 4 * p.k_scale_stride[0], n);
    decode_cuda::prefetch_rows_l2<32 * W, 4>(at(p.v_scale, p.v_scale_stride), 4 * p.v_scale_stride[0], n);
  }
}

// The split [s0, s1) of one (entry, kv head) as tiles of mma_tile_keys(W, KPW) keys in STAGES stages of shared
// memory: K codes, V codes (chunk_at's order), then int8's K and V scales. Tiles go in in order, 0, 1, 2, ...:
// load_next() puts the next one into the next stage by cp.async (zeros past the split, masked by the kernels) and
// commits one group. Each thread copies chunk column ch of keys key0 + it * kKeysPerPass; for int8, kScalePasses
// scales (K: the first half of the block's scale slots). Its addresses differ by constant steps, computed once
// here, and a cursor (the next tile's addresses, keys left and stage) moves by a step a tile: worked out from
// the tile's index instead, a 64-bit multiply per address and a division by the stage count were most of a
// tile's copy instructions (SASS, sm_90). A whole tile (every tile but a split's last) is copied without a
// per-key condition: with the addresses worked out per copy from the params, integer work was a third of the
// int8 loop's instructions (SASS, H200; with this and the keys kernel's leaner softmax, int8 took 0.2-16 % less
// time in two H200 calls, docs/QUANTIZED_CACHE.md).
template <int D, int W, int KPW, bool kPerToken>
struct SplitTiles {
  static constexpr int kThreads = 32 * W, kTileKeys = mma_tile_keys(W, KPW), CH = D / 16;
  static constexpr int kPasses = kTileKeys * CH / kThreads;      // 16-byte chunks of K (and of V) a thread copies a tile
  static constexpr int kKeysPerPass = kThreads / CH;
  static constexpr int kScalePasses = 2 * kTileKeys / kThreads;  // int8: K and V scales a thread copies a tile
  static constexpr int kStageBytes = stage_bytes<D, W, KPW>();
  static_assert(kThreads % CH == 0 && kTileKeys * CH % kThreads == 0 && 2 * kTileKeys % kThreads == 0, "copy shape");
  static_assert(kKeysPerPass % 8 == 0, "chunk_at's swizzle the same for every pass of a thread");

  uint8_t* smem;
  const uint8_t* kb;  // key s0 of this (entry, kv head): what a copy of nothing points at
  const uint8_t* vb;
  const float* ksb;   // the entry's and kv head's K scales (key 0; fp8: its one scale)
  const float* vsb;
  int64_t k_pass, v_pass;  // bytes between a thread's chunks of one tile: kKeysPerPass keys
  int chunk0;              // this thread's first chunk in a stage (its key0 and column)
  // The cursor: the next tile's first chunk of K and of V for this thread, its scale each pass (int8), its keys
  // inside the split, and its stage's byte offset.
  const uint8_t* kt;
  const uint8_t* vt;
  const float* sp[kPerToken ? kScalePasses : 1];
  int64_t s_tile[kPerToken ? kScalePasses : 1];  // ... and the floats from one tile's scale to the next's
  int scale_ok[kPerToken ? kScalePasses : 1];     // ... its key in a tile (copied where the split holds it)
  int scale_dst[kPerToken ? kScalePasses : 1];    // ... its byte offset in a stage
  int64_t left;
  int stage_off = 0;
  // The tile the warps compute (step() moves it on): its stage's byte offset and its keys inside the split.
  int read_off = (stages<D>() - 1) * kStageBytes;
  int64_t read_left;

  __device__ __forceinline__ SplitTiles(uint8_t* smem_, const QuantAttentionParams& p, const EntryView& e, int hk,
                                        int64_t s0, int64_t s1)
      : smem(smem_),
        kb(static_cast<const uint8_t*>(p.attn.k) + e.row * p.attn.k_stride[1] + hk * p.attn.k_stride[2] + s0 * p.attn.k_stride[0]),
        vb(static_cast<const uint8_t*>(p.attn.v) + e.row * p.attn.v_stride[1] + hk * p.attn.v_stride[2] + s0 * p.attn.v_stride[0]),
        ksb(p.k_scale + e.row * p.k_scale_stride[1] + hk * p.k_scale_stride[2]),
        vsb(p.v_scale + e.row * p.v_scale_stride[1] + hk * p.v_scale_stride[2]),
        left(s1 - s0),
        read_left(s1 - s0 + kTileKeys) {
    const int ch = static_cast<int>(threadIdx.x) % CH, key0 = static_cast<int>(threadIdx.x) / CH;
    kt = kb + key0 * p.attn.k_stride[0] + 16 * ch;
    vt = vb + key0 * p.attn.v_stride[0] + 16 * ch;
    k_pass = kKeysPerPass * p.attn.k_stride[0];
    v_pass = kKeysPerPass * p.attn.v_stride[0];
    chunk0 = chunk_at<D>(key0, ch);
    if constexpr (kPerToken) {
#pragma unroll
      for (int pass = 0; pass < kScalePasses; ++pass) {
        const int idx = static_cast<int>(threadIdx.x) + pass * kThreads, key = idx % kTileKeys;
        const bool is_v = idx >= kTileKeys;
        const int64_t stride = is_v ? p.v_scale_stride[0] : p.k_scale_stride[0];
        sp[pass] = (is_v ? vsb : ksb) + (s0 + key) * stride;
        s_tile[pass] = opaque(kTileKeys * stride);
        scale_ok[pass] = opaque(key);
        scale_dst[pass] = opaque(2 * kTileKeys * D + 4 * idx);
      }
    }
  }

  // The byte offset of the stage after the one at `off` (the last one's next is the first).
  __device__ __forceinline__ static int next_stage(int off) {
    return off == (stages<D>() - 1) * kStageBytes ? 0 : off + kStageBytes;
  }
  // The computed tile's K and V codes and (int8) scales.
  __device__ __forceinline__ const uint8_t* k() const { return smem + read_off; }
  __device__ __forceinline__ const uint8_t* v() const { return k() + kTileKeys * D; }
  __device__ __forceinline__ const float* scale_k() const { return reinterpret_cast<const float*>(v() + kTileKeys * D); }
  __device__ __forceinline__ const float* scale_v() const { return scale_k() + kTileKeys; }
  // Of the computed tile's KPW keys from key kw on (a warp's), how many lie inside the split: 0 .. KPW.
  __device__ __forceinline__ int visible(int kw) const {
    const int64_t ahead = read_left - kw;
    return ahead <= 0 ? 0 : ahead >= KPW ? KPW : static_cast<int>(ahead);
  }

  // Tiles 0 .. STAGES - 2 in flight (empty groups past the last tile).
  __device__ __forceinline__ void prime() {
#pragma unroll
    for (int st = 0; st < stages<D>() - 1; ++st) load_next();
  }
  // The pipeline's step into the next tile (the one k() ... visible() then show): wait until it has landed for
  // every thread (and every warp is done with the one before), then load the tile STAGES - 1 past it into that
  // one's stage (an empty group past the split's last tile).
  __device__ __forceinline__ void step() {
    cp_async_wait<stages<D>() - 2>();
    __syncthreads();
    read_off = next_stage(read_off);
    read_left -= kTileKeys;
    load_next();
  }

  // The next tile into its stage, one commit group (empty past the split's last tile).
  __device__ __forceinline__ void load_next() {
    if (left > 0) {
      uint8_t* const sk = smem + stage_off + chunk0;
      uint8_t* const sv = sk + kTileKeys * D;
      if (left >= kTileKeys) {
#pragma unroll
        for (int it = 0; it < kPasses; ++it) {
          cp_async16(sk + it * kKeysPerPass * D, kt + it * k_pass, true);
          cp_async16(sv + it * kKeysPerPass * D, vt + it * v_pass, true);
        }
      } else {
        const int key0 = static_cast<int>(threadIdx.x) / CH;
#pragma unroll
        for (int it = 0; it < kPasses; ++it) {
          const bool ok = key0 + it * kKeysPerPass < left;  // past the split: zeros, masked by the kernel
          cp_async16(sk + it * kKeysPerPass * D, ok ? kt + it * k_pass : kb, ok);
          cp_async16(sv + it * kKeysPerPass * D, ok ? vt + it * v_pass : vb, ok);
        }
      }
      kt += kPasses * k_pass;
      vt += kPasses * v_pass;
      if constexpr (kPerToken) {
#pragma unroll
        for (int pass = 0; pass < kScalePasses; ++pass) {
          const bool ok = scale_ok[pass] < left;
          cp_async4(smem + stage_off + scale_dst[pass], ok ? sp[pass] : ksb, ok);
          sp[pass] += s_tile[pass];
        }
      }
      left -= kTileKeys;
      stage_off = next_stage(stage_off);
    }
    cp_async_commit();
  }
};

// The V codes a lane feeds P V for the k16 step of keys [key0, key0 + 16) of a tile, in both kernels: keys 2t,
// 2t + 1, 2t + 8, 2t + 9 at dims VB g .. VB g + VB - 1 (VB = D / 8), paired by key a register: for dims
// 4j .. 4j + 3 of those, lo01(j) = [k0.d0, k1.d0, k0.d1, k1.d1] and hi01(j) = [k0.d2, k1.d2, k0.d3, k1.d3] of keys
// 2t, 2t + 1; lo89 / hi89 the same of keys 2t + 8, 2t + 9 (code_pair then makes each pair two 16-bit values).
template <int D>
struct VStepCodes {
  static constexpr int VB = D / 8;
  uint32_t w[4][VB / 4];
  // Keys 2t and 2t + 1 of a tile's first k16 step (from key kw): their chunk offsets, opaque to ptxas (worked out
  // once a block; keys 2t + 8, 2t + 9 are 8 D further, the swizzle the same, and step mk 16 D mk).
  __device__ __forceinline__ static int2 lane_offsets(int kw, int g, int t) {
    const int extra = VB == 16 ? 0 : 8 * (g & 1);
    return make_int2(opaque(chunk_at<D>(kw + 2 * t, VB == 16 ? g : g >> 1) + extra),
                     opaque(chunk_at<D>(kw + 2 * t + 1, VB == 16 ? g : g >> 1) + extra));
  }
  __device__ __forceinline__ VStepCodes(const uint8_t* tile_v_step, int2 off) {
#pragma unroll
    for (int r = 0; r < 4; ++r) load(r, tile_v_step + ((r & 1) ? off.y : off.x) + 8 * D * (r >> 1));
  }
  __device__ __forceinline__ VStepCodes(const uint8_t* tile_v, int key0, int g, int t) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int key = key0 + 2 * t + (r & 1) + 8 * (r >> 1);
      load(r, VB == 16 ? tile_v + chunk_at<D>(key, g) : tile_v + chunk_at<D>(key, g >> 1) + 8 * (g & 1));
    }
  }
  // Key r's VB codes (of the four above) from `at`.
  __device__ __forceinline__ void load(int r, const uint8_t* at) {
    if constexpr (VB == 16) {
      const uint4 x = *reinterpret_cast<const uint4*>(at);
      w[r][0] = x.x, w[r][1] = x.y, w[r][2] = x.z, w[r][3] = x.w;
    } else {
      const uint2 x = *reinterpret_cast<const uint2*>(at);
      w[r][0] = x.x, w[r][1] = x.y;
    }
  }
  __device__ __forceinline__ uint32_t lo01(int j) const { return __byte_perm(w[0][j], w[1][j], 0x5140); }
  __device__ __forceinline__ uint32_t hi01(int j) const { return __byte_perm(w[0][j], w[1][j], 0x7362); }
  __device__ __forceinline__ uint32_t lo89(int j) const { return __byte_perm(w[2][j], w[3][j], 0x5140); }
  __device__ __forceinline__ uint32_t hi89(int j) const { return __byte_perm(w[2][j], w[3][j], 0x7362); }
};

// The warps' states at the end of a block, in the tiles' space once the loop is done: per warp and row (16
// rows) the unnormalised outputs in natural dim order, the maximum (log2 units) and the sum.
template <int D, int W>
struct WarpStates {
  float* o;  // [W][16][D]
  float* m;  // [W][16]
  float* l;  // [W][16]
  __device__ __forceinline__ explicit WarpStates(uint8_t* smem)
      : o(reinterpret_cast<float*>(smem)), m(o + W * kMmaHeads * D), l(m + W * kMmaHeads) {}
};

// The end of a block, after every warp has put its rows' states in `s` (and a barrier): the rows merged over
// the warps, then written (one split: no merge kernel, 1-2 us less at B = 1 on the H200,
// docs/QUANTIZED_CACHE.md) or left in the workspace for merge_kernel. head0: the block's first query head.
template <typename T, int D, int W>
__device__ __forceinline__ void finish_block(const DecodeAttentionParams& a, const Launch& l, const EntryView e, int64_t b,
                                             int64_t head0, int rows, int split, float* ws, const WarpStates<D, W>& s) {
  for (int idx = threadIdx.x; idx < rows * D; idx += 32 * W) {
    const int r = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) mx = fmaxf(mx, s.m[w * kMmaHeads + r]);
    float sum = 0.f, acc = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const float c = exp2f(s.m[w * kMmaHeads + r] - mx);
        sum += s.l[w * kMmaHeads + r] * c;
        acc += s.o[(w * kMmaHeads + r) * D + d] * c;
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

}  // namespace mma
}  // namespace quant_cuda
}  // namespace pvt

// CUDA decode attention over an 8-bit cache (kv_quant_attention.h), two kernels (where the
// tensor-core kernel takes the call, kv_quant_attention_mma_cuda.cu replaces the first):
//  1. split: block (split, kv head, entry) of 4 warps walks its range of keys. A key row of D codes
//     is read by D/16 lanes with one 16-byte load each (K and V), so a warp covers 32/(D/16) keys
//     per step; codes are dequantized in registers (fp8: the hardware e4m3 -> half conversion;
//     int8: a byte-permute into a float's mantissa), scored against the group's query heads held in
//     registers, and folded into an online softmax (log2 domain). Lane groups and warps combine
//     through shared memory into one (max, sum, unnormalised output) per query head and split.
//  2. merge: one block per (entry, query head) combines the splits and writes out and lse.
// No dequantized copy of the cache is made anywhere.
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "../core/cuda_check.h"
#include "decode_attention_launch_cuda.cuh"  // launch_kernel: programmatic launches
#include "merge_fold_cuda.cuh"
#include "programmatic_launch_cuda.cuh"
#include "kv_quant_attention.h"
#include "kv_quant_attention_cuda.cuh"
#include "kv_quant_attention_plan.h"

namespace pvt {
namespace {

using quant_cuda::EntryView;
using quant_cuda::entry_of;
using quant_cuda::kLog2e;
using quant_cuda::Launch;
using quant_cuda::partial_at;

using quant_plan::kMaxSplits;
using quant_plan::kMinKeysPerSplit;

constexpr int kWarps = 4;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// 16 codes (one uint4) -> 16 floats, unscaled.
template <KvQuant kKind>
__device__ __forceinline__ void decode16(const uint4& raw, float (&f)[16]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (kKind == KvQuant::kInt8) {
      // Signed byte b -> float: 2^23 + (b ^ 0x80) in a float's mantissa, minus 2^23 + 128. Exact.
      const uint32_t x = w[i] ^ 0x80808080u;
#pragma unroll
      for (int j = 0; j < 4; ++j) f[4 * i + j] = __uint_as_float(__byte_perm(x, 0x4B000000u, 0x7650 + j)) - 8388736.f;
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>((w[i] >> (16 * j)) & 0xffffu), __NV_E4M3);
        const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&h));
        f[4 * i + 2 * j] = v.x;
        f[4 * i + 2 * j + 1] = v.y;
      }
#else
#pragma unroll
      for (int j = 0; j < 4; ++j) f[4 * i + j] = kv_quant::fp8_e4m3_decode(static_cast<uint8_t>(w[i] >> (8 * j)));
#endif
    }
  }
}

template <typename T, KvQuant kKind, int D, int G>
__global__ void __launch_bounds__(kWarps * 32) split_kernel(QuantAttentionParams p, Launch l, int head0,
                                                            float* ws) {
  constexpr int L = D / 16;     // lanes per key row
  constexpr int KPS = 32 / L;   // keys per warp step
  const DecodeAttentionParams& a = p.attn;
  const int64_t b = blockIdx.z;
  const int g = blockIdx.y, split = blockIdx.x;
  const EntryView e = entry_of(a, b);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / L, part = lane % L;
  const int64_t s0 = split * l.keys_per_split;
  const int64_t s1 = e.n < s0 + l.keys_per_split ? e.n : s0 + l.keys_per_split;

  float q[G][16], acc[G][16], m[G], sum[G];
#pragma unroll
  for (int j = 0; j < G; ++j) {
    const int64_t h = static_cast<int64_t>(g) * l.group + head0 + j;
    const T* qp = static_cast<const T*>(a.q) + (e.q_row < 0 ? 0 : e.q_row) * (a.cu_seqlens_q ? a.q_stride[1] : a.q_stride[0]) +
                  h * a.q_stride[2] + static_cast<int64_t>(part) * 16 * a.q_stride[3];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      q[j][i] = e.q_row < 0 ? 0.f : to_float(qp[i * a.q_stride[3]]) * a.scale * kLog2e;
      acc[j][i] = 0.f;
    }
    m[j] = -INFINITY;
    sum[j] = 0.f;
  }
  const uint8_t* kbase = static_cast<const uint8_t*>(a.k) + e.row * a.k_stride[1] + g * a.k_stride[2] + part * 16;
  const uint8_t* vbase = static_cast<const uint8_t*>(a.v) + e.row * a.v_stride[1] + g * a.v_stride[2] + part * 16;
  const float* ksb = p.k_scale + e.row * p.k_scale_stride[1] + g * p.k_scale_stride[2];
  const float* vsb = p.v_scale + e.row * p.v_scale_stride[1] + g * p.v_scale_stride[2];
  for (int64_t base = s0 + warp * KPS; base < s1; base += kWarps * KPS) {
    const int64_t s = base + sub;
    const bool valid = s < s1;
    uint4 kr = make_uint4(0, 0, 0, 0), vr = make_uint4(0, 0, 0, 0);
    float ks = 0.f, vs = 0.f;
    if (valid) {
      kr = __ldg(reinterpret_cast<const uint4*>(kbase + s * a.k_stride[0]));
      vr = __ldg(reinterpret_cast<const uint4*>(vbase + s * a.v_stride[0]));
      ks = __ldg(ksb + s * p.k_scale_stride[0]);
      vs = __ldg(vsb + s * p.v_scale_stride[0]);
    }
    float kf[16], vf[16];
    decode16<kKind>(kr, kf);
    decode16<kKind>(vr, vf);
#pragma unroll
    for (int j = 0; j < G; ++j) {
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < 16; ++i) dot = fmaf(q[j][i], kf[i], dot);
#pragma unroll
      for (int off = L / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      const float score = valid ? dot * ks : -INFINITY;
      if (score > m[j]) {  // a new running max: rescale what was summed so far
        const float corr = exp2f(m[j] - score);
        sum[j] *= corr;
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[j][i] *= corr;
        m[j] = score;
      }
      const float w = valid ? exp2f(score - m[j]) : 0.f;
      sum[j] += w;
      const float wv = w * vs;
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[j][i] = fmaf(wv, vf[i], acc[j][i]);
    }
  }
  // Combine the kWarps * KPS lane groups of the block.
  __shared__ float sm_m[kWarps * KPS][G], sm_l[kWarps * KPS][G];
  __shared__ float sm_acc[kWarps * KPS][G][D];
  const int grp = warp * KPS + sub;
#pragma unroll
  for (int j = 0; j < G; ++j) {
    if (part == 0) {
      sm_m[grp][j] = m[j];
      sm_l[grp][j] = sum[j];
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) sm_acc[grp][j][part * 16 + i] = acc[j][i];
  }
  __syncthreads();
  for (int t = threadIdx.x; t < G * D; t += blockDim.x) {
    const int j = t / D, d = t % D;
    float mx = -INFINITY;
    for (int r = 0; r < kWarps * KPS; ++r) mx = fmaxf(mx, sm_m[r][j]);
    float lsum = 0.f, o = 0.f;
    if (mx != -INFINITY) {
      for (int r = 0; r < kWarps * KPS; ++r) {
        const float c = exp2f(sm_m[r][j] - mx);
        lsum += sm_l[r][j] * c;
        o += sm_acc[r][j][d] * c;
      }
    }
    const int64_t h = static_cast<int64_t>(g) * l.group + head0 + j;
    float* out = ws + partial_at(a, l, b, h, split);
    out[2 + d] = o;
    if (d == 0) {
      out[0] = mx;
      out[1] = lsum;
    }
  }
}

// One block per (entry, query head), one thread per output element: N splits' partials are loaded
// together (indices clamped, no branch) and folded into an online softmax, so a merge of up to that many
// splits is ONE L2 round trip (a loop of loads per split waited one round trip per few splits: about 8 of
// them for 16 splits, several microseconds of a B = 1 call); N = merge_chunk_of (kv_quant_attention_plan.h).
// Launched programmatically behind the split kernel: it waits for that grid before reading the partials.
template <typename T, int D, int N>
__global__ void merge_kernel(QuantAttentionParams p, Launch l, const float* ws) {
  cuda_launch::wait_for_previous_grid();
  cuda_launch::allow_next_grid();  // the next call's blocks may be placed; they wait for this grid
  const DecodeAttentionParams& a = p.attn;
  const int64_t b = blockIdx.x / a.q_heads, h = blockIdx.x % a.q_heads;
  const EntryView e = entry_of(a, b);
  if (e.q_row < 0) return;
  if (e.refused && threadIdx.x == 0 && a.error_flag) *a.error_flag = 1;
  const float* part = ws + partial_at(a, l, b, h, 0);
  float mx = -INFINITY, lsum = 0.f, o = 0.f;
  for (int s0 = 0; s0 < l.splits; s0 += N) {
    float mj[N], lj[N], oj[N];
#pragma unroll
    for (int u = 0; u < N; ++u) {
      const int64_t at = static_cast<int64_t>(s0 + u < l.splits ? s0 + u : l.splits - 1) * (D + 2);
      mj[u] = part[at];
      lj[u] = part[at + 1];
      oj[u] = part[at + 2 + threadIdx.x];
    }
    decode_cuda::fold_partials(mj, lj, oj, l.splits - s0, &mx, &lsum, &o, [](float x) { return exp2f(x); });
  }
  quant_cuda::write_head<T>(a, e, h, threadIdx.x, mx, lsum, o);
}

Status plan(const QuantAttentionParams& p, Launch* l) {
  const DecodeAttentionParams& a = p.attn;
  const std::string op = "quant_attention_cuda: ";
  if (a.mask != nullptr || a.q_len != 1) {
    return Status(Code::kInvalidArgument, op + "the CUDA kernel for 8-bit caches takes one query token per entry "
                                               "and no mask (causal), got q_len=" + std::to_string(a.q_len) +
                                               (a.mask ? " and a mask" : ""));
  }
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) {
    return Status(Code::kInvalidArgument, op + "head_dim must be 64, 128 or 256, got " + std::to_string(a.head_dim));
  }
  const bool aligned = reinterpret_cast<uintptr_t>(a.k) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v) % 16 == 0 &&
                       a.k_stride[3] == 1 && a.v_stride[3] == 1;
  bool strides_ok = aligned;
  for (int i = 0; i < 3; ++i) strides_ok = strides_ok && a.k_stride[i] % 16 == 0 && a.v_stride[i] % 16 == 0;
  if (!strides_ok) {
    return Status(Code::kInvalidArgument, op + "K and V codes must be 16-byte aligned with contiguous head_dim");
  }
  l->group = static_cast<int>(a.q_heads / a.kv_heads);
  l->heads_per_block = l->group % 4 == 0 ? 4 : l->group % 2 == 0 ? 2 : 1;
  int device = 0, sms = 132, major = 0;
  PVT_CU_CHECK(cudaGetDevice(&device));
  PVT_CU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  PVT_CU_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  l->mma = quant_cuda::mma_takes(p, major);
  // Options (checked as the float16 kernels check them): a forced split count (> 0) and plain stream
  // order (no_pdl); the others are the float16 kernels' own.
  PVT_RETURN_IF_ERROR(decode_plan::check_options(decode_plan::options_of(a)));
  const int64_t forced = decode_plan::options_of(a).splits;
  l->programmatic = !decode_plan::options_of(a).no_pdl;
  if (l->mma) {  // splits of whole tiles
    const int64_t blocks = a.batch * a.kv_heads * ((l->group + quant_cuda::kMmaHeads - 1) / quant_cuda::kMmaHeads);
    const int warps_asked = decode_plan::options_of(a).mma_warps;
    PVT_RETURN_IF_ERROR(quant_plan::check_warp_keys(warps_asked, p.warp_keys));
    PVT_RETURN_IF_ERROR(quant_plan::check_keys_on_m(p.keys_on_m, l->group));
    l->keys_on_m = quant_plan::choose_keys_on_m(p.kind == KvQuant::kInt8, l->group, a.head_dim, p.keys_on_m);
    const quant_plan::BlockShape shape =
        quant_plan::choose_block_shape(p.kind == KvQuant::kInt8, a.head_dim, l->keys_on_m, warps_asked, p.warp_keys);
    l->warps = shape.warps, l->warp_keys = shape.warp_keys;
    const int64_t tile = quant_cuda::mma_tile_keys(l->warps, l->warp_keys), tiles = (a.kv_len + tile - 1) / tile;
    // At least kMinKeysPerSplit keys and kMinTilesPerSplit tiles a split unless forced (most_mma_splits): GQA B = 1
    // S = 4k took 14.8 us (fp8) with 32 splits of 128 keys, what the wave cost alone picks, against 10.8 with 16
    // (H200, 2026-12-02 sweep).
    const int64_t resident = quant_cuda::quant_mma_resident(p, l->warps, l->warp_keys, l->keys_on_m);
    const int64_t splits =
        forced > 0 ? std::min<int64_t>({forced, tiles, kMaxSplits})
                   : quant_plan::choose_mma_splits(blocks, tiles, quant_plan::most_mma_splits(a.kv_len, tile),
                                                   resident * sms);
    l->keys_per_split = (tiles + splits - 1) / splits * tile;
    l->splits = static_cast<int>((a.kv_len + l->keys_per_split - 1) / l->keys_per_split);
    const int64_t tile_bytes = tile * (2 * a.head_dim + (p.kind == KvQuant::kInt8 ? 8 : 0));  // codes, int8 scales
    l->prefetch_tiles = decode_plan::choose_prefetch_tiles(
        decode_plan::keys_known_on_host(a), l->programmatic, decode_plan::options_of(a).prefetch_tiles,
        l->keys_per_split / tile, std::min<int64_t>(blocks * l->splits, resident * sms), tile_bytes,
        decode_cuda::l2_bytes_once());
    return Status::Ok();
  }
  const int64_t blocks = a.batch * a.kv_heads * (l->group / l->heads_per_block);
  int64_t splits = (2 * sms + blocks - 1) / blocks;
  const int64_t by_len = (a.kv_len + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  splits = splits < by_len ? splits : by_len;
  if (forced > 0) splits = std::min<int64_t>(forced, a.kv_len);
  splits = splits < kMaxSplits ? (splits < 1 ? 1 : splits) : kMaxSplits;
  l->splits = static_cast<int>(splits);
  l->keys_per_split = (a.kv_len + splits - 1) / splits;
  return Status::Ok();
}

template <typename T, KvQuant kKind, int D>
Status run(const QuantAttentionParams& p, const Launch& l, cudaStream_t stream) {
  const DecodeAttentionParams& a = p.attn;
  float* ws = static_cast<float*>(a.workspace);
  if (l.mma) {
    PVT_RETURN_IF_ERROR(quant_cuda::quant_mma_split(p, l, ws, stream));
  } else {
    const dim3 grid(l.splits, static_cast<unsigned>(a.kv_heads), static_cast<unsigned>(a.batch));
    for (int head0 = 0; head0 < l.group; head0 += l.heads_per_block) {
      if (l.heads_per_block == 4) {
        split_kernel<T, kKind, D, 4><<<grid, kWarps * 32, 0, stream>>>(p, l, head0, ws);
      } else if (l.heads_per_block == 2) {
        split_kernel<T, kKind, D, 2><<<grid, kWarps * 32, 0, stream>>>(p, l, head0, ws);
      } else {
        split_kernel<T, kKind, D, 1><<<grid, kWarps * 32, 0, stream>>>(p, l, head0, ws);
      }
      PVT_CU_CHECK(cudaGetLastError());
    }
  }
  if (l.mma_writes_rows()) return Status::Ok();  // one split: the tensor-core kernel wrote the rows
  // Programmatic dependent launch (Hopper): the merge is placed while the split kernel ends.
  const auto merge = quant_plan::merge_chunk_of(l.splits, decode_plan::options_of(a).merge_chunk) ==
                             decode_plan::kMergeChunkWide
                         ? merge_kernel<T, D, decode_plan::kMergeChunkWide>
                         : merge_kernel<T, D, decode_plan::kMergeChunk>;
  return decode_cuda::launch_kernel(merge, dim3(static_cast<unsigned>(a.batch * a.q_heads)), D, 0, 1, l.programmatic,
                                    stream, p, l, static_cast<const float*>(ws));
}

template <typename T, KvQuant kKind>
Status run_dim(const QuantAttentionParams& p, const Launch& l, cudaStream_t s) {
  switch (p.attn.head_dim) {
    case 64: return run<T, kKind, 64>(p, l, s);
    case 128: return run<T, kKind, 128>(p, l, s);
    default: return run<T, kKind, 256>(p, l, s);
  }
}

template <typename T>
Status run_kind(const QuantAttentionParams& p, const Launch& l, cudaStream_t s) {
  return p.kind == KvQuant::kInt8 ? run_dim<T, KvQuant::kInt8>(p, l, s) : run_dim<T, KvQuant::kFp8E4M3>(p, l, s);
}

}  // namespace

size_t quant_attention_cuda_workspace_bytes(const QuantAttentionParams& p) {
  Launch l;
  if (!check_quant_attention_params(p).ok() || !plan(p, &l).ok()) return 0;
  return static_cast<size_t>(p.attn.batch * p.attn.q_heads * l.splits * (p.attn.head_dim + 2)) * sizeof(float);
}

Status quant_attention_cuda(const QuantAttentionParams& p, void* stream) {
  PVT_RETURN_IF_ERROR(check_quant_attention_params(p));
  Launch l;
  PVT_RETURN_IF_ERROR(plan(p, &l));
  const size_t need = static_cast<size_t>(p.attn.batch * p.attn.q_heads * l.splits * (p.attn.head_dim + 2)) * 4;
  if (p.attn.workspace == nullptr || p.attn.workspace_bytes < need) {
    return Status(Code::kInvalidArgument, "quant_attention_cuda: the workspace must hold " + std::to_string(need) +
                                              " bytes (quant_attention_cuda_workspace_bytes)");
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.attn.dtype) {
    case ScalarType::kFloat16: return run_kind<__half>(p, l, s);
    case ScalarType::kBFloat16: return run_kind<__nv_bfloat16>(p, l, s);
    default: return run_kind<float>(p, l, s);
  }
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

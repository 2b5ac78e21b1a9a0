// CUDA decode attention over a seq-major cache, read in place (flash-decoding style).
//
// A block takes one (batch, kv head), up to ROWS query rows that share that kv head (GQA group x
// Tq, so K/V are read once for the whole group) and one slice of the keys. Inside, a "key group"
// of L lanes holds one key: each lane loads VEC contiguous elements per chunk (16-byte loads when
// the layout allows), so a head_dim-128 fp16 key is 16 lanes x 16 bytes and a warp reads two keys
// per step. Each key group keeps an online softmax (max, sum, accumulator) per row in float32;
// key groups merge by shuffles, warps through shared memory. When one (batch, kv head) block per
// SM is too little work (batch 1, long context) the keys are split across blocks and a second
// kernel merges the partial results from the workspace.
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "../core/cuda_check.h"
#include "decode_attention.h"

namespace pvt {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 2;               // keys in flight per key group
constexpr int64_t kMinKeysPerSplit = 64;  // below this a split costs more than it saves
constexpr int kMaxSplits = 128;
constexpr int kFallbackChunks = 8;       // scalar path: 32 lanes x 8 elements = head_dim 256

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Additive mask value: bool false -> -inf.
__device__ __forceinline__ float mask_value(const void* mask, int64_t i, ScalarType t) {
  switch (t) {
    case ScalarType::kBool: return static_cast<const uint8_t*>(mask)[i] ? 0.f : -INFINITY;
    case ScalarType::kFloat32: return static_cast<const float*>(mask)[i];
    case ScalarType::kFloat16: return __half2float(static_cast<const __half*>(mask)[i]);
    case ScalarType::kBFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(mask)[i]);
  }
  return 0.f;
}

// VEC elements at p (element stride `stride` when VEC == 1) into floats; one 16-byte load when
// VEC * sizeof(T) == 16 (the caller guarantees alignment).
template <typename T, int VEC>
__device__ __forceinline__ void load_chunk(const T* p, int64_t stride, float* dst) {
  if constexpr (VEC * sizeof(T) == 16) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) dst[i] = to_float(e[i]);
  } else {
    static_assert(VEC == 1, "vector loads are 16 bytes or one element");
    (void)stride;  // the caller already stepped p to this element
    dst[0] = to_float(p[0]);
  }
}

struct Plan {
  bool vectorised = false;
  int vec = 1;           // elements per chunk
  int lanes = 32;        // L: lanes per key (power of two)
  int chunks = 1;        // CPL: chunks per lane
  int rows = 1;          // ROWS: query rows per block
  int64_t row_groups = 1;
  int64_t splits = 1;
  int64_t keys_per_split = 0;
  int64_t rows_total = 0;  // B * Hq * Tq
};

struct Workspace {
  float* acc = nullptr;  // [splits, rows_total, D]
  float* ml = nullptr;   // [splits, rows_total, 2]: running max, sum
};

// Merge (m_b, l_b, acc_b) into (m, l, acc): both are softmax partials over disjoint key sets.
__device__ __forceinline__ void merge_scales(float m, float m_b, float* ca, float* cb, float* m_new) {
  *m_new = fmaxf(m, m_b);
  if (*m_new == -INFINITY) {
    *ca = 0.f;
    *cb = 0.f;
  } else {
    *ca = __expf(m - *m_new);
    *cb = __expf(m_b - *m_new);
  }
}

template <typename T, int VEC, int CPL, int ROWS>
__global__ void __launch_bounds__(kThreads)
    decode_attention_kernel(const DecodeAttentionParams p, const int lanes, const int64_t keys_per_split,
                            const int64_t splits, Workspace ws) {
  constexpr int E = VEC * CPL;  // elements of one row a lane holds
  const int64_t D = p.head_dim, S = p.kv_len, Tq = p.q_len;
  const int64_t G = p.q_heads / p.kv_heads, R = G * Tq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int keys_per_warp = 32 / lanes;
  const int lk = lane % lanes;                                  // lane within the key group
  const int kg = warp * keys_per_warp + lane / lanes;           // key group in the block
  const int n_kg = kWarps * keys_per_warp;
  const int64_t b = blockIdx.x / p.kv_heads, hk = blockIdx.x % p.kv_heads;
  const int64_t split = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.z) * ROWS;
  const int nrows = static_cast<int>(R - row0 < ROWS ? R - row0 : ROWS);
  const int64_t s_lo = split * keys_per_split;
  const int64_t s_hi = s_lo + keys_per_split < S ? s_lo + keys_per_split : S;

  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int64_t kbase = b * p.k_stride[1] + hk * p.k_stride[2];
  const int64_t vbase = b * p.v_stride[1] + hk * p.v_stride[2];

  float qf[ROWS][E], acc[ROWS][E], m[ROWS], l[ROWS];
  int64_t mask_off[ROWS], causal_end[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
    const int64_t row = row0 + r, h = hk * G + row / Tq, t = row % Tq;
    mask_off[r] = b * p.mask_stride[0] + h * p.mask_stride[1] + t * p.mask_stride[2];
    causal_end[r] = S - Tq + t + 1;
#pragma unroll
    for (int j = 0; j < CPL; ++j) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const int64_t d = static_cast<int64_t>(j * lanes + lk) * VEC + e;
        acc[r][j * VEC + e] = 0.f;
        qf[r][j * VEC + e] = r < nrows && d < D
                                 ? to_float(q[b * p.q_stride[0] + t * p.q_stride[1] + h * p.q_stride[2] +
                                              d * p.q_stride[3]]) * p.scale
                                 : 0.f;
      }
    }
  }

  // The loop bound is the warp's first key, the same for all its lanes: every lane of a warp must
  // reach each shuffle below, also the key groups whose key lies past the end (they score -inf).
  const int64_t step = static_cast<int64_t>(n_kg) * kUnroll;
  for (int64_t warp_s = s_lo + warp * keys_per_warp; warp_s < s_hi; warp_s += step) {
    const int64_t s0 = warp_s + (kg - warp * keys_per_warp);
    float kf[kUnroll][E], vf[kUnroll][E];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t s = s0 + static_cast<int64_t>(u) * n_kg;
#pragma unroll
      for (int j = 0; j < CPL; ++j) {
        const int64_t d = static_cast<int64_t>(j * lanes + lk) * VEC;
        if (s < s_hi && d < D) {
          load_chunk<T, VEC>(k + kbase + s * p.k_stride[0] + d * p.k_stride[3], p.k_stride[3], &kf[u][j * VEC]);
          load_chunk<T, VEC>(v + vbase + s * p.v_stride[0] + d * p.v_stride[3], p.v_stride[3], &vf[u][j * VEC]);
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e) kf[u][j * VEC + e] = vf[u][j * VEC + e] = 0.f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t s = s0 + static_cast<int64_t>(u) * n_kg;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        if (r >= nrows) break;  // uniform across the block: shuffles stay converged
        float x = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) x += qf[r][e] * kf[u][e];
        for (int off = lanes / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
        if (s >= s_hi) continue;
        if (p.mask != nullptr) {
          x += mask_value(p.mask, mask_off[r] + s * p.mask_stride[3], p.mask_type);
        } else if (s >= causal_end[r]) {
          continue;
        }
        if (x == -INFINITY) continue;
        const float m_new = fmaxf(m[r], x);
        const float corr = __expf(m[r] - m_new);
        const float w = __expf(x - m_new);
        l[r] = l[r] * corr + w;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r][e] = acc[r][e] * corr + w * vf[u][e];
        m[r] = m_new;
      }
    }
  }

  // Merge the key groups of each warp (lanes with the same lk), then the warps.
  for (int off = lanes; off < 32; off *= 2) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (r >= nrows) break;
      const float m_b = __shfl_xor_sync(0xffffffffu, m[r], off);
      const float l_b = __shfl_xor_sync(0xffffffffu, l[r], off);
      float ca, cb, m_new;
      merge_scales(m[r], m_b, &ca, &cb, &m_new);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float a_b = __shfl_xor_sync(0xffffffffu, acc[r][e], off);
        acc[r][e] = acc[r][e] * ca + a_b * cb;
      }
      l[r] = l[r] * ca + l_b * cb;
      m[r] = m_new;
    }
  }

  __shared__ float sm_m[kWarps][ROWS], sm_l[kWarps][ROWS];
  __shared__ float sm_acc[kWarps][ROWS][kCudaMaxHeadDim];
  if (lane < lanes) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (r >= nrows) break;
      if (lane == 0) {
        sm_m[warp][r] = m[r];
        sm_l[warp][r] = l[r];
      }
#pragma unroll
      for (int j = 0; j < CPL; ++j) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const int64_t d = static_cast<int64_t>(j * lanes + lk) * VEC + e;
          if (d < D) sm_acc[warp][r][d] = acc[r][j * VEC + e];
        }
      }
    }
  }
  __syncthreads();

  T* out = static_cast<T*>(p.out);
  for (int64_t i = threadIdx.x; i < nrows * D; i += kThreads) {
    const int r = static_cast<int>(i / D);
    const int64_t d = i % D;
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
    const int64_t row = row0 + r, h = hk * G + row / Tq, t = row % Tq;
    if (splits == 1) {
      out[b * p.out_stride[0] + t * p.out_stride[1] + h * p.out_stride[2] + d * p.out_stride[3]] =
          from_float<T>(sum > 0.f ? a / sum : 0.f);
    } else {
      const int64_t g = (b * p.q_heads + h) * Tq + t;  // row in [B, Hq, Tq]
      const int64_t rows_total = p.batch * p.q_heads * Tq;
      ws.acc[(split * rows_total + g) * D + d] = a;
      if (d == 0) {
        ws.ml[(split * rows_total + g) * 2] = mx;
        ws.ml[(split * rows_total + g) * 2 + 1] = sum;
      }
    }
  }
}

// One block per (b, h, t) row: merges the splits' partial softmax results.
template <typename T>
__global__ void merge_splits_kernel(const DecodeAttentionParams p, const int64_t splits, Workspace ws) {
  const int64_t g = blockIdx.x, D = p.head_dim, Tq = p.q_len;
  const int64_t rows_total = p.batch * p.q_heads * Tq;
  const int64_t t = g % Tq, h = (g / Tq) % p.q_heads, b = g / (Tq * p.q_heads);
  float mx = -INFINITY;
  for (int64_t j = 0; j < splits; ++j) mx = fmaxf(mx, ws.ml[(j * rows_total + g) * 2]);
  T* out = static_cast<T*>(p.out);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.f, a = 0.f;
    if (mx != -INFINITY) {
      for (int64_t j = 0; j < splits; ++j) {
        const float c = __expf(ws.ml[(j * rows_total + g) * 2] - mx);
        sum += ws.ml[(j * rows_total + g) * 2 + 1] * c;
        a += ws.acc[(j * rows_total + g) * D + d] * c;
      }
    }
    out[b * p.out_stride[0] + t * p.out_stride[1] + h * p.out_stride[2] + d * p.out_stride[3]] =
        from_float<T>(sum > 0.f ? a / sum : 0.f);
  }
}

int64_t elem_bytes(ScalarType t) { return t == ScalarType::kFloat32 ? 4 : 2; }

int next_pow2(int64_t x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    cudaGetLastError();  // clear: a missing count only makes the split choice less good
    return 108;
  }
  return n;
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

Plan make_plan(const DecodeAttentionParams& p) {
  Plan plan;
  const int64_t eb = elem_bytes(p.dtype), D = p.head_dim;
  const int64_t vec = 16 / eb;
  plan.vectorised = D % vec == 0 && p.k_stride[3] == 1 && p.v_stride[3] == 1 && aligned16(p.k) &&
                    aligned16(p.v) && p.k_stride[0] % vec == 0 && p.k_stride[1] % vec == 0 &&
                    p.k_stride[2] % vec == 0 && p.v_stride[0] % vec == 0 && p.v_stride[1] % vec == 0 &&
                    p.v_stride[2] % vec == 0;
  if (plan.vectorised) {
    plan.vec = static_cast<int>(vec);
    const int64_t n_chunks = D / vec;
    plan.lanes = next_pow2(std::min<int64_t>(n_chunks, 32));
    plan.chunks = static_cast<int>((n_chunks + plan.lanes - 1) / plan.lanes);
    // Rows per block: more rows share each K/V load but cost registers (q and the accumulator
    // live in registers): at most 4, at most 2 when a lane holds two chunks (fp32, head_dim > 128).
    const int64_t R = p.q_heads / p.kv_heads * p.q_len;
    const int max_rows = plan.chunks == 1 ? 4 : 2;
    plan.rows = std::min<int>(max_rows, R <= 1 ? 1 : R <= 2 ? 2 : 4);
  } else {
    plan.vec = 1;
    plan.lanes = 32;
    plan.chunks = kFallbackChunks;
    plan.rows = 1;
  }
  const int64_t R = p.q_heads / p.kv_heads * p.q_len;
  plan.row_groups = (R + plan.rows - 1) / plan.rows;
  plan.rows_total = p.batch * p.q_heads * p.q_len;
  // Enough blocks for about four per SM; never a split of fewer than kMinKeysPerSplit keys.
  const int64_t base = p.batch * p.kv_heads * plan.row_groups;
  const int64_t want = (4 * static_cast<int64_t>(sm_count()) + base - 1) / base;
  const int64_t by_len = (p.kv_len + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  int64_t splits = std::max<int64_t>(1, std::min<int64_t>({want, by_len, kMaxSplits}));
  plan.keys_per_split = (p.kv_len + splits - 1) / splits;
  plan.splits = (p.kv_len + plan.keys_per_split - 1) / plan.keys_per_split;  // no empty split
  return plan;
}

size_t workspace_bytes(const DecodeAttentionParams& p, const Plan& plan) {
  if (plan.splits <= 1) return 0;
  return static_cast<size_t>(plan.splits * plan.rows_total * (p.head_dim + 2)) * sizeof(float);
}

template <typename T, int VEC, int CPL, int ROWS>
Status launch_main(const DecodeAttentionParams& p, const Plan& plan, Workspace ws, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads), static_cast<unsigned>(plan.splits),
                  static_cast<unsigned>(plan.row_groups));
  decode_attention_kernel<T, VEC, CPL, ROWS>
      <<<grid, kThreads, 0, stream>>>(p, plan.lanes, plan.keys_per_split, plan.splits, ws);
  PVT_CU_CHECK(cudaGetLastError());
  return Status::Ok();
}

template <typename T, int VEC, int CPL, int MAX_ROWS>
Status launch_rows(const DecodeAttentionParams& p, const Plan& plan, Workspace ws, cudaStream_t stream) {
  switch (plan.rows) {
    case 1: return launch_main<T, VEC, CPL, 1>(p, plan, ws, stream);
    case 2: return launch_main<T, VEC, CPL, 2>(p, plan, ws, stream);
    case 4:
      if constexpr (MAX_ROWS >= 4) return launch_main<T, VEC, CPL, 4>(p, plan, ws, stream);
      break;
    default: break;
  }
  return Status(Code::kInvalidArgument, "decode_attention_cuda: no kernel for " + std::to_string(plan.rows) +
                                            " rows per block and " + std::to_string(CPL) + " chunks per lane");
}

template <typename T>
Status launch_typed(const DecodeAttentionParams& p, const Plan& plan, cudaStream_t stream) {
  Workspace ws;
  if (plan.splits > 1) {
    ws.acc = static_cast<float*>(p.workspace);
    ws.ml = ws.acc + plan.splits * plan.rows_total * p.head_dim;
  }
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  Status st = Status(Code::kInvalidArgument,
                     "decode_attention_cuda: no kernel for " + std::to_string(plan.chunks) + " chunks per lane");
  if (!plan.vectorised) {
    st = launch_main<T, 1, kFallbackChunks, 1>(p, plan, ws, stream);
  } else if (plan.chunks == 1) {
    st = launch_rows<T, kVec, 1, 4>(p, plan, ws, stream);
  } else if constexpr (sizeof(T) == 4) {  // only fp32 with head_dim > 128 needs two chunks per lane
    if (plan.chunks == 2) st = launch_rows<T, kVec, 2, 2>(p, plan, ws, stream);
  }
  PVT_RETURN_IF_ERROR(st);
  if (plan.splits > 1) {
    const int threads = static_cast<int>(std::min<int64_t>(256, (p.head_dim + 31) / 32 * 32));
    merge_splits_kernel<T><<<static_cast<unsigned>(plan.rows_total), threads, 0, stream>>>(p, plan.splits, ws);
    PVT_CU_CHECK(cudaGetLastError());
  }
  return Status::Ok();
}

}  // namespace

size_t decode_attention_cuda_workspace_bytes(const DecodeAttentionParams& p) {
  if (!check_decode_attention_params(p).ok()) return 0;
  return workspace_bytes(p, make_plan(p));
}

Status decode_attention_cuda(const DecodeAttentionParams& p, void* stream) {
  PVT_RETURN_IF_ERROR(check_decode_attention_params(p));
  // Interim: the variable-length and lse fields are declared (decode_attention.h) but not yet
  // implemented by this kernel; refuse them rather than ignore them.
  if (p.cu_seqlens_q || p.kv_batch_index || p.cache_seqlens || p.kv_mapped || p.lse) {
    return Status(Code::kUnsupported, "decode_attention_cuda: variable lengths and lse are not implemented yet");
  }
  if (p.head_dim > kCudaMaxHeadDim) {
    return Status(Code::kUnsupported, "decode_attention_cuda: head_dim " + std::to_string(p.head_dim) +
                                          " is larger than the supported " + std::to_string(kCudaMaxHeadDim));
  }
  const int64_t rows = p.q_heads / p.kv_heads * p.q_len;  // row groups: at most this many
  if (p.batch * p.kv_heads > INT32_MAX || rows > 65535) {
    return Status(Code::kUnsupported, "decode_attention_cuda: batch * kv_heads or the query rows per kv head "
                                      "exceed the grid limits");
  }
  const Plan plan = make_plan(p);
  const size_t need = workspace_bytes(p, plan);
  if (p.workspace_bytes < need || (need > 0 && p.workspace == nullptr)) {
    return Status(Code::kInvalidArgument, "decode_attention_cuda: needs a workspace of " + std::to_string(need) +
                                              " bytes, got " + std::to_string(p.workspace_bytes));
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // The one dtype dispatch.
  switch (p.dtype) {
    case ScalarType::kFloat32: return launch_typed<float>(p, plan, s);
    case ScalarType::kFloat16: return launch_typed<__half>(p, plan, s);
    case ScalarType::kBFloat16: return launch_typed<__nv_bfloat16>(p, plan, s);
    default:
      return Status(Code::kInvalidArgument,
                    std::string("decode_attention_cuda: unsupported dtype ") + scalar_type_name(p.dtype));
  }
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

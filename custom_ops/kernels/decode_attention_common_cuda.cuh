// Device helpers shared by the decode attention kernels (the one-row, row-per-warp and tensor-core
// kernels and the merge: decode_attention_*_cuda.cuh): conversions, 16-byte chunk loads and cp.async,
// what an entry of a variable-length batch sees, the partial-softmax merge, and how a block's row ends
// (the finished row, or the split's partial to the workspace). Each written once, here.
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "decode_attention.h"
#include "decode_attention_plan.h"
#include "float_convert_cuda.cuh"
#include "programmatic_launch_cuda.cuh"

namespace pvt {
namespace decode_cuda {

using namespace decode_plan;  // NOLINT: the constants the planner and the kernels share
using cuda_float::from_float;
using cuda_launch::allow_next_grid;
using cuda_launch::wait_for_previous_grid;
using cuda_float::to_float;

// Additive mask value: bool false -> -inf.
__device__ __forceinline__ float mask_value(const void* mask, int64_t i, ScalarType t) {
  switch (t) {
    case ScalarType::kBool: return static_cast<const uint8_t*>(mask)[i] ? 0.f : -INFINITY;
    case ScalarType::kFloat32: return static_cast<const float*>(mask)[i];
    case ScalarType::kFloat16: return to_float(static_cast<const __half*>(mask)[i]);
    case ScalarType::kBFloat16: return to_float(static_cast<const __nv_bfloat16*>(mask)[i]);
  }
  return 0.f;
}

// One chunk as it comes from memory: 16 bytes, or one element on the scalar path.
template <typename T, int VEC>
using Raw = std::conditional_t<VEC * sizeof(T) == 16, uint4, T>;

template <typename T, int VEC>
__device__ __forceinline__ Raw<T, VEC> load_raw(const T* p) {
  if constexpr (VEC * sizeof(T) == 16) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    static_assert(VEC == 1, "vector loads are 16 bytes or one element");
    return p[0];
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void unpack(const Raw<T, VEC> raw_in, float* dst) {
  // By value: a chunk in shared memory is read as ONE 16-byte load, then split in registers (an
  // element-wise read through a T* costs 8 shared loads per chunk). Word by word: bf16 is the high
  // half of a float (exact, integer ops), fp16 goes through the paired half2 -> float2 conversion.
  if constexpr (VEC * sizeof(T) == 16) {
    const uint4 raw = raw_in;
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        dst[i] = __uint_as_float(w[i]);
      } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        dst[2 * i] = __uint_as_float(w[i] << 16);
        dst[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      } else {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        dst[2 * i] = f.x;
        dst[2 * i + 1] = f.y;
      }
    }
  } else {
    dst[0] = to_float(raw_in);
  }
}

// 16-byte copies global -> shared memory that do not pass through registers (sm_80+), committed and
// waited for in groups; a plain load and store on older targets.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = pred ? 16 : 0;  // 0: fill the 16 bytes with zeros, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
#else
  *static_cast<uint4*>(smem) = pred ? __ldg(static_cast<const uint4*>(gmem)) : make_uint4(0, 0, 0, 0);
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

struct Workspace {
  float* acc = nullptr;  // [splits, rows_total, D]
  float* ml = nullptr;   // [splits, rows_total, 2]: running max, sum
  int32_t* balance_chunk = nullptr;  // balanced splits: the split size the blocks chose, in kSplitKeysUnit keys
};

__device__ __forceinline__ void prefetch_l2(const void* at) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
#endif
}

// Rows 0 .. n - 1 of ROW_BYTES bytes each from `base`, `stride` bytes apart, asked of L2 by the block's NTHR
// threads a 128-byte line at a time: what a tensor-core block does with its split's first tiles before it waits
// for the kernel ahead (choose_prefetch_tiles, decode_attention_plan.h, which allows it only where the keys'
// range is known on the host). A prefetch reads nothing into the block: it fills L2 lines, which the kernel
// ahead's writes keep coherent, and the tiles are loaded after the wait as before.
template <int NTHR, int ROW_BYTES>
__device__ __forceinline__ void prefetch_rows_l2(const uint8_t* base, int64_t stride, int n) {
  constexpr int kLines = (ROW_BYTES + 127) / 128;
  for (int i = static_cast<int>(threadIdx.x); i < n * kLines; i += NTHR) {
    prefetch_l2(base + (kLines == 1 ? i : i / kLines) * stride + 128 * (kLines == 1 ? 0 : i % kLines));
  }
}

// What one entry b sees, from the optional variable-length arrays (decode_attention.h).
struct Entry {
  int64_t q_begin = 0;  // first packed query row (cu_seqlens_q) or b * Tq
  int64_t q_count = 0;  // query rows of this entry
  int64_t kv_row = 0;   // the cache row (slot) it reads
  int64_t past = 0;     // keys before this step's queries: query t sees keys s < past + t + 1
  int64_t n = 0;        // keys it reads (0 when refused)
  bool refused = false; // past the mapped tokens or the host's bound: zeros, lse -inf, error flag
};

__device__ __forceinline__ Entry entry_of(const DecodeAttentionParams& p, int64_t b) {
  Entry e;
  if (p.mask != nullptr) {  // masked (no varlen fields allowed): every key of kv_len, the mask decides
    e.q_begin = b * p.q_len;
    e.q_count = p.q_len;
    e.kv_row = b;
    e.n = p.kv_len;
    e.past = p.kv_len - p.q_len;
    return e;
  }
  e.q_begin = p.cu_seqlens_q ? p.cu_seqlens_q[b] : b * p.q_len;
  e.q_count = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.q_len;
  e.kv_row = p.kv_batch_index ? p.kv_batch_index[b] : b;
  e.past = p.cache_seqlens ? p.cache_seqlens[e.kv_row] : p.kv_len - e.q_count;
  e.n = e.past + e.q_count;
  // Lengths the host's plan does not cover (kv_len is the bound that sized the splits), negative
  // ones, more queries than q_len, or keys past the mapped memory: never read.
  e.refused = e.q_count < 0 || e.q_count > p.q_len || e.past < 0 || e.n > p.kv_len ||
              (p.kv_mapped != nullptr && e.n > p.kv_mapped[e.kv_row]);
  if (e.refused) e.n = 0;
  return e;
}

// A split count and what dividing by it takes: a multiply-high and a shift (as CUTLASS's FastDivmod), set
// on the host, exact for dividends below 2^31. split_range divides on the path from an entry's length to
// its first K/V load, where a 32-bit division is about twenty dependent instructions.
struct SplitCount {
  int64_t n = 1;
  uint32_t mul = 0, shift = 0;  // unused when n == 1
  int64_t fixed_keys = 0;       // > 0: split j is keys [j * fixed_keys, (j + 1) * fixed_keys) (split_keys)
  // > 0: balanced splits (Plan::balance_blocks; decode_attention_balance_cuda.cuh): n is the most an entry
  // gets, each entry's count and keys are found on the device within this budget of blocks.
  int32_t balance_blocks = 0, balance_min_units = 0, balance_wave = 0;
  // > 0 (Plan::balance_plain_splits): the plain plan's count, which a balanced grid's blocks take instead where
  // the lengths are even (balance_skewed), with its division (mul, shift as above).
  int32_t plain_n = 0;
  uint32_t plain_mul = 0, plain_shift = 0;
  // > 0 (the key-slice tensor-core kernel, plain grids): tiles of its split's start each block asks L2 for before
  // it waits for the kernel ahead (choose_prefetch_tiles: set only where the keys' range is known on the host).
  int32_t prefetch_tiles = 0;
  SplitCount() = default;
  explicit SplitCount(int64_t count, int64_t fixed = 0) : n(count), fixed_keys(fixed) {
    if (count > 1) {
      uint32_t l = 0;  // ceil(log2(count))
      while ((int64_t(1) << l) < count) ++l;
      mul = static_cast<uint32_t>(((uint64_t(1) << (31 + l)) + static_cast<uint64_t>(count) - 1) /
                                  static_cast<uint64_t>(count));
      shift = l - 1;
    }
  }
  void set_plain(int64_t count) {  // host: plain_n and its division, from a SplitCount of that count
    const SplitCount c(count);
    plain_n = static_cast<int32_t>(count);
    plain_mul = c.mul;
    plain_shift = c.shift;
  }
  __host__ __device__ __forceinline__ SplitCount plain() const {  // the plain plan's count (plain_n > 0)
    SplitCount c;
    c.n = plain_n;
    c.mul = plain_mul;
    c.shift = plain_shift;
    return c;
  }
  __host__ __device__ __forceinline__ uint32_t divide(uint32_t x) const {  // x / n, x < 2^31
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(x, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(x) * mul) >> 32);
#endif
    return n == 1 ? x : hi >> shift;
  }
};

// Keys [*lo, *hi) of split `split` over an entry of n keys: the entry's steps of STEP keys (the kernel's
// unit of work: a tile, or a block's pass over its key groups) spread evenly over the splits, the first
// steps % splits splits one step longer, the entry's last, partial step in the last non-empty split.
// From the entry's own length on the device, not the host's bound: a cache planned for its capacity
// (a CUDA graph captured once) spreads a shorter entry over all its splits instead of leaving most of
// them empty. I: the arithmetic's type; the division is SplitCount's in both (the host checks kv_len
// against INT32_MAX). The tensor-core and row-per-warp kernels take 32 bits. The one-row kernel takes 64:
// with 32 its instances compiled to 92 registers instead of 112, so 5 blocks an SM instead of 4, and MHA
// B=32 (1024 blocks: 1.55 waves of 660 instead of 1.94 of 528) took 1.04-1.07x cuDNN against 1.00-1.02
// (H200, run 23).
template <int STEP, typename I>
__device__ __forceinline__ void split_range(int64_t n, int64_t split, const SplitCount& splits, int64_t* lo,
                                            int64_t* hi) {
  static_assert(STEP > 0 && (STEP & (STEP - 1)) == 0, "a power of two: the division is a shift");
  static_assert(kSplitKeysUnit % STEP == 0, "fixed splits are whole steps");
  if (splits.fixed_keys > 0) {  // DecodeOptions::split_keys: boundaries from key 0, not from the entry's length
    const int64_t first = split * splits.fixed_keys, last = first + splits.fixed_keys;
    *lo = first < n ? first : n;
    *hi = last < n ? last : n;
    return;
  }
  const I steps = (static_cast<I>(n) + STEP - 1) / STEP, sp = static_cast<I>(split);
  // By SplitCount's multiply-high in both types (steps <= kv_len <= INT32_MAX): a 64-bit division is a
  // subroutine of dozens of dependent instructions between the entry's length and its first load. Its
  // registers are the prologue's; the main loop's set the count (ptxas -v: occupancy unchanged).
  const I each = static_cast<I>(splits.divide(static_cast<uint32_t>(steps)));
  const I extra = steps - each * static_cast<I>(splits.n);
  const I first = sp * each + (sp < extra ? sp : extra);
  const I last = first + each + (sp < extra ? I(1) : I(0));
  *lo = static_cast<int64_t>(first) * STEP < n ? static_cast<int64_t>(first) * STEP : n;
  *hi = static_cast<int64_t>(last) * STEP < n ? static_cast<int64_t>(last) * STEP : n;
}

// Fixed splits (split_keys) start at key 0, so an entry's own length says which of its splits hold keys:
// ceil(n / fixed_keys), all before the rest. merge_splits_kernel reads only those, so a block of a later,
// empty split leaves at once, writing nothing (with one split there is no merge: it writes the row).
__host__ __device__ __forceinline__ int64_t own_splits(const SplitCount& splits, int64_t n) {
  if (splits.fixed_keys <= 0) return splits.n;
  const int64_t own = (n + splits.fixed_keys - 1) / splits.fixed_keys;
  return own < splits.n ? own : splits.n;
}
__device__ __forceinline__ bool past_own_keys(const SplitCount& splits, int64_t lo, int64_t hi) {
  return splits.fixed_keys > 0 && splits.n > 1 && lo >= hi;
}

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

// Writes one finished row: out = acc / sum (zeros when the row saw nothing), lse = m + log(sum).
template <typename T>
__device__ __forceinline__ void write_row(const DecodeAttentionParams& p, const Entry& e, int64_t b, int64_t t, int64_t h,
                                          int64_t d, float mx, float sum, float a) {
  T* out = static_cast<T*>(p.out);
  const bool seen = sum > 0.f && !e.refused;
  const int64_t prow = e.q_begin + t;  // packed row when cu_seqlens_q is given
  const int64_t o = p.cu_seqlens_q ? prow * p.out_stride[1] + h * p.out_stride[2] + d * p.out_stride[3]
                                   : b * p.out_stride[0] + t * p.out_stride[1] +
                                         h * p.out_stride[2] + d * p.out_stride[3];
  out[o] = from_float<T>(seen ? a / sum : 0.f);
  if (p.lse != nullptr && d == 0) p.lse[prow * p.q_heads + h] = seen ? mx + logf(sum) : -INFINITY;
}

// Element d of a split's partial (m, l, acc) for row (b, t, h), into the workspace, where
// merge_splits_kernel reads every split an entry owns (zeros from one that saw nothing); m and l with d == 0.
// D: the head dim (a compile-time constant where the kernel has one: the index arithmetic is then a few
// instructions).
__device__ __forceinline__ void store_partial(const DecodeAttentionParams& p, int64_t b, int64_t t, int64_t h,
                                              int64_t d, int64_t D, int64_t split, const Workspace& ws, float m,
                                              float l, float a) {
  const int64_t g = (b * p.q_heads + h) * p.q_len + t;  // row in [B, Hq, Tq]
  const int64_t rows_total = p.batch * p.q_heads * p.q_len;
  if (d == 0) {
    ws.ml[(split * rows_total + g) * 2] = m;
    ws.ml[(split * rows_total + g) * 2 + 1] = l;
  }
  ws.acc[(split * rows_total + g) * D + d] = a;
}

// How element d of a row ends in a block that covered split `split` of `splits`: with one split the
// finished row (write_row), otherwise the split's partial (store_partial).
template <typename T>
__device__ __forceinline__ void store_split_row(const DecodeAttentionParams& p, const Entry& e, int64_t b, int64_t t,
                                                int64_t h, int64_t d, int64_t D, int64_t split, int64_t splits,
                                                const Workspace& ws, float m, float l, float a) {
  if (splits == 1) {
    write_row<T>(p, e, b, t, h, d, m, l, a);
  } else {
    store_partial(p, b, t, h, d, D, split, ws, m, l, a);
  }
}

}  // namespace decode_cuda
}  // namespace pvt

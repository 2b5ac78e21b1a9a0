// Decode attention over an 8-bit cache on tensor cores (kv_quant_attention.h, the CUDA-core kernel's
// contract: one query token per entry, no mask) for q of float16 / bfloat16 at head_dim 64 and 128: the
// launch side. Two kernels share the tiles, the codes' decode and the block's end
// (kv_quant_attention_mma_common_cuda.cuh): the query heads on the MMA's M side
// (kv_quant_attention_mma_rows_cuda.cuh) and the keys on M (kv_quant_attention_mma_keys_cuda.cuh, groups of
// at most 8). Which one, the block's shape and the split count: the plan (kv_quant_attention_cuda.cu,
// kv_quant_attention_plan.h).
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "../core/cuda_check.h"
#include "decode_attention_launch_cuda.cuh"  // launch_kernel, query_resident
#include "kv_quant_attention_cuda.cuh"
#include "kv_quant_attention_mma_keys_cuda.cuh"
#include "kv_quant_attention_mma_rows_cuda.cuh"

namespace pvt {
namespace quant_cuda {
namespace {

using mma::mma_keys_kernel;
using mma::mma_split_kernel;
using mma::smem_bytes;

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

// CUDA quantizing append (kv_quant_append.h): one warp per (token row, head). Each lane reads its
// share of the head's values, the warp reduces the int8 amax with shuffles, and every lane encodes
// its values with the functions the host kernel uses (kv_quant.h), so the codes are bit-identical.
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../core/cuda_check.h"
#include "kv_quant_append.h"

namespace pvt {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T, KvQuant kKind>
__global__ void quant_append_kernel(QuantAppendParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int64_t total = p.outer * p.inner * p.heads;
  for (int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; w < total; w += warps) {
    const int64_t h = w % p.heads, r = w / p.heads, o = r / p.inner, i = r % p.inner;
    const T* src = static_cast<const T*>(p.src) + o * p.src_stride[0] + i * p.src_stride[1] + h * p.src_stride[2];
    uint8_t* dst = static_cast<uint8_t*>(p.dst) + o * p.dst_stride[0] + i * p.dst_stride[1] + h * p.dst_stride[2];
    float* scale = p.scale + o * p.scale_stride[0] + i * p.scale_stride[1] + h * p.scale_stride[2];
    float s;
    if (kKind == KvQuant::kInt8) {
      float amax = 0.f;  // fmaxf ignores NaN, as the host's std::fmax
      for (int64_t d = lane; d < p.head_dim; d += 32) amax = fmaxf(amax, fabsf(to_float(src[d])));
      for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      s = amax / kInt8Max;
      if (lane == 0) *scale = s;
      for (int64_t d = lane; d < p.head_dim; d += 32) {
        dst[d] = static_cast<uint8_t>(kv_quant::int8_quantize(to_float(src[d]), s));
      }
    } else {
      s = *scale;
      for (int64_t d = lane; d < p.head_dim; d += 32) dst[d] = kv_quant::fp8_quantize(to_float(src[d]), s);
    }
  }
}

template <typename T>
Status launch(const QuantAppendParams& p, cudaStream_t stream) {
  const int64_t warps = p.outer * p.inner * p.heads;
  const int64_t blocks_needed = (warps * 32 + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(blocks_needed < kMaxBlocks ? blocks_needed : kMaxBlocks);
  if (p.kind == KvQuant::kInt8) {
    quant_append_kernel<T, KvQuant::kInt8><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    quant_append_kernel<T, KvQuant::kFp8E4M3><<<blocks, kThreads, 0, stream>>>(p);
  }
  PVT_CU_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace

Status quant_append_cuda(const QuantAppendParams& p, void* stream) {
  PVT_RETURN_IF_ERROR(check_quant_append_params(p));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.src_type) {
    case ScalarType::kFloat16: return launch<__half>(p, s);
    case ScalarType::kBFloat16: return launch<__nv_bfloat16>(p, s);
    default: return launch<float>(p, s);
  }
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

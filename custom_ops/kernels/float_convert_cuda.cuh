// float32 <-> the cache's element type on the device (float, __half, __nv_bfloat16), for every CUDA
// kernel that computes in float32 over 16-bit data (decode attention, the merge of attention states).
// The host counterpart is float_convert.h. Include only from .cu files compiled by nvcc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace pvt {
namespace cuda_float {

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

}  // namespace cuda_float
}  // namespace pvt

// CUDA merge of partial attention states (see merge_attention_states.h). One thread per output
// element, grid-stride; each thread forms its row's weights from the parts' lse (a few floats, served
// from cache) so no shared memory or second pass is needed. The merge reads n * rows * D elements and
// writes rows * D: memory-bound and tiny next to the attention itself.
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "../core/cuda_check.h"
#include "merge_attention_states.h"
#include "float_convert_cuda.cuh"

namespace pvt {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

using cuda_float::from_float;
using cuda_float::to_float;

template <typename T>
__global__ void merge_kernel(MergeAttentionStatesParams p) {
  const int64_t total = p.rows * p.head_dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.head_dim;
    float mx = -INFINITY;
    for (int64_t k = 0; k < p.num_parts; ++k) mx = fmaxf(mx, p.lses[k][r]);
    const bool none = mx == -INFINITY;
    float sum = 0.f, acc = 0.f;
    for (int64_t k = 0; k < p.num_parts; ++k) {
      const float l = p.lses[k][r];
      float w = none || l == -INFINITY ? 0.f : expf(l - mx);
      if (isnan(l)) w = l;
      sum += w;
      if (w != 0.f) acc += w * to_float(static_cast<const T*>(p.outs[k])[i]);
    }
    static_cast<T*>(p.out)[i] = from_float<T>(none ? 0.f : acc / sum);
    if (p.lse != nullptr && i % p.head_dim == 0) p.lse[r] = none ? -INFINITY : mx + logf(sum);
  }
}

template <typename T>
Status launch(const MergeAttentionStatesParams& p, cudaStream_t stream) {
  const int64_t total = p.rows * p.head_dim;
  const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, kMaxBlocks));
  merge_kernel<T><<<blocks, kThreads, 0, stream>>>(p);
  PVT_CU_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace

Status merge_attention_states_cuda(const MergeAttentionStatesParams& p, void* stream) {
  PVT_RETURN_IF_ERROR(check_merge_attention_states_params(p));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case ScalarType::kFloat32: return launch<float>(p, s);
    case ScalarType::kFloat16: return launch<__half>(p, s);
    case ScalarType::kBFloat16: return launch<__nv_bfloat16>(p, s);
    default:
      return Status(Code::kInvalidArgument,
                    std::string("merge_attention_states_cuda: unsupported dtype ") + scalar_type_name(p.dtype));
  }
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

// The row-owning tensor-core decode-attention kernel's instances for head_dim 80
// (decode_attention_mma_rows_instances_cuda.cuh).
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include "decode_attention_mma_rows_instances_cuda.cuh"

namespace pvt {
namespace decode_cuda {
PVT_DECODE_MMA_ROWS_INSTANTIATE(80)
}  // namespace decode_cuda
}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

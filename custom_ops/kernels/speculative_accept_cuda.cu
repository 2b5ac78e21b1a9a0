// CUDA accept/advance: one thread per sequence (a batch is tens to hundreds of sequences and k is a
// handful of tokens, so the step is a few hundred integer compares: launch latency is the cost, and
// one small kernel keeps it at one launch). A sequence whose inputs are invalid is left unchanged
// and reported through error_flag, never a host sync and never an out-of-bounds write.
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_runtime.h>

#include <string>

#include "../core/cuda_check.h"
#include "speculative_accept.h"
#include "speculative_accept_row.h"

namespace pvt {
namespace {

constexpr int kThreads = 128;

__global__ void speculative_accept_kernel(SpeculativeAcceptParams p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.batch) return;
  int32_t err = spec_detail::check_row(p, i);
  if (err == 0 && p.finished[i] == 0 && spec_detail::slot_repeated(p, i)) {
    err = static_cast<int32_t>(SpeculativeAcceptError::kSlotRepeated);
  }
  if (err != 0) {
    atomicCAS(p.error_flag, 0, err);  // the first error seen wins
    return;
  }
  spec_detail::apply_row(p, i);
}

}  // namespace

Status speculative_accept_cuda(const SpeculativeAcceptParams& p, void* stream) {
  PVT_RETURN_IF_ERROR(check_speculative_accept_params(p));
  if (p.error_flag == nullptr) {
    return Status(Code::kInvalidArgument, "speculative_accept_cuda: error_flag is required on CUDA");
  }
  const int64_t blocks = (p.batch + kThreads - 1) / kThreads;
  speculative_accept_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  PVT_CU_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

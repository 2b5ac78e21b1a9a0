// One macro for every CUDA driver (CUresult) and runtime (cudaError_t) call: on failure it returns a
// Status naming the error, the call text, file and line. Out-of-memory becomes Code::kOutOfMemory so
// callers can tell "the GPU is full" from "the driver broke"; everything else is Code::kDriver.
// Only compiled in builds with PADDLE_VTENSOR_WITH_CUDA.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "status.h"

namespace pvt {
namespace cuda_detail {

inline Status make_error(bool oom, const char* name, const char* text, const char* call,
                         const char* file, int line) {
  return Status(oom ? Code::kOutOfMemory : Code::kDriver,
                std::string(call) + " failed: " + (name ? name : "?") + " (" + (text ? text : "?") +
                    ") at " + file + ":" + std::to_string(line));
}

inline Status to_status(CUresult r, const char* call, const char* file, int line) {
  const char* name = nullptr;
  const char* text = nullptr;
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &text);
  return make_error(r == CUDA_ERROR_OUT_OF_MEMORY, name, text, call, file, line);
}

inline Status to_status(cudaError_t r, const char* call, const char* file, int line) {
  return make_error(r == cudaErrorMemoryAllocation, cudaGetErrorName(r), cudaGetErrorString(r), call,
                    file, line);
}

inline bool failed(CUresult r) { return r != CUDA_SUCCESS; }
inline bool failed(cudaError_t r) { return r != cudaSuccess; }

}  // namespace cuda_detail
}  // namespace pvt

// Evaluates `call` once; returns a non-ok Status from the enclosing function if it failed.
#define PVT_CU_CHECK(call)                                                             \
  do {                                                                                 \
    auto _pvt_r = (call);                                                              \
    if (::pvt::cuda_detail::failed(_pvt_r))                                            \
      return ::pvt::cuda_detail::to_status(_pvt_r, #call, __FILE__, __LINE__);         \
  } while (0)

// The process's split counters per (device, stream) (split_counters.h).
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include "split_counters.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "../core/cuda_check.h"

namespace pvt {
namespace {

struct Counters {
  int32_t* ptr = nullptr;
  int64_t count = 0;
};

struct Pool {
  std::mutex mu;
  std::map<std::pair<int, void*>, Counters> by_stream;
  std::vector<int32_t*> outgrown;  // never freed (a captured graph may still use them); tiny
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: no teardown order against the CUDA runtime's at exit
  return *p;
}

}  // namespace

Status attach_split_counters(const decode_plan::Plan& plan, void* stream, DecodeAttentionParams* p) {
  if (plan.split_counters <= 0) return Status::Ok();
  int dev = 0;
  PVT_CU_CHECK(cudaGetDevice(&dev));
  Pool& pl = pool();
  std::lock_guard<std::mutex> lock(pl.mu);
  Counters& c = pl.by_stream[{dev, stream}];
  if (c.count < plan.split_counters) {
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    PVT_CU_CHECK(cudaStreamIsCapturing(s, &capture));
    if (capture != cudaStreamCaptureStatusNone) return Status::Ok();  // the merge kernel (see the header)
    const int64_t count = std::max(plan.split_counters, 2 * c.count);
    int32_t* fresh = nullptr;
    PVT_CU_CHECK(cudaMalloc(&fresh, static_cast<size_t>(count) * sizeof(int32_t)));
    const cudaError_t zeroed = cudaMemsetAsync(fresh, 0, static_cast<size_t>(count) * sizeof(int32_t), s);
    if (zeroed != cudaSuccess) {
      cudaFree(fresh);
      PVT_CU_CHECK(zeroed);
    }
    if (c.ptr != nullptr) pl.outgrown.push_back(c.ptr);
    c = Counters{fresh, count};
  }
  p->split_counters = c.ptr;
  p->split_counter_count = c.count;
  return Status::Ok();
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

#include "launch_append.h"

#include "../core/stats.h"
#include "device_guard.h"
#include "op_errors.h"
#include "streams.h"
#include "vtensor_allocation.h"

namespace pvt {

void launch_append(const AppendParams& params, const phi::Place& place, void* stream,
                   const char* op) {
  if (params.tokens == 0) return;
  const int64_t bytes = params.tokens * params.batch * params.heads * params.head_dim * params.elem_bytes;
  if (place.GetType() == phi::AllocationType::CPU) {
    throw_if_error(append_tokens_cpu(params), op);
    add_bytes_written(Device::host(), bytes);
    return;
  }
#ifdef PADDLE_VTENSOR_WITH_CUDA
  DeviceGuard guard(place, op);
  throw_if_error(append_tokens_cuda(params, stream), op);
  add_bytes_written(to_device(place), bytes);
  record_cache_use(params.dst, place, stream, op);
  record_cache_use(params.src, place, stream, op);
#else
  (void)stream;
  (void)bytes;
  PD_THROW(op, ": this build of paddle_vtensor has no CUDA kernels (tensor on ",
           place.DebugString(), ")");
#endif
}

}  // namespace pvt

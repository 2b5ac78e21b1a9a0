#include "device_guard.h"

#ifdef PADDLE_VTENSOR_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "../core/backend.h"
#include "op_errors.h"
#include "vtensor_allocation.h"

namespace pvt {

DeviceGuard::DeviceGuard(const phi::Place& place, const char* op) {
  if (place.GetType() != phi::AllocationType::GPU) return;
  // Before any runtime call: in a fork child those may hang.
  throw_if_error(check_device_usable(to_device(place)), op);
#ifdef PADDLE_VTENSOR_WITH_CUDA
  int current = 0;
  cudaError_t e = cudaGetDevice(&current);
  if (e == cudaSuccess && current != place.GetDeviceId()) {
    e = cudaSetDevice(place.GetDeviceId());
    if (e == cudaSuccess) previous_ = current;
  }
  if (e != cudaSuccess) {
    PD_THROW(op, ": DriverError: cannot make GPU ", place.GetDeviceId(), " current: ",
             cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  }
#endif
}

DeviceGuard::~DeviceGuard() {
#ifdef PADDLE_VTENSOR_WITH_CUDA
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
#endif
}

}  // namespace pvt

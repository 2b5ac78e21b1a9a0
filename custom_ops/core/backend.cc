// Which backend serves a device, and whether this process may use it: the one dispatch to every
// backend (host_backend.cc, cuda_backend.cc).
#include "backend.h"

#include <string>

#ifdef PADDLE_VTENSOR_WITH_CUDA
#include "cuda_backend.h"
#endif

namespace pvt {

Status get_backend(Device device, Backend** out) {
  if (device.kind == DeviceKind::kHost) {
    *out = host_backend();
    return Status::Ok();
  }
#ifdef PADDLE_VTENSOR_WITH_CUDA
  return make_cuda_backend(device.index, out);
#else
  return Status(Code::kUnsupported,
                "device " + device.to_string() + " needs a build with CUDA (PADDLE_VTENSOR_WITH_CUDA)");
#endif
}

Status check_device_usable(Device device) {
  if (device.kind == DeviceKind::kHost) return Status::Ok();
#ifdef PADDLE_VTENSOR_WITH_CUDA
  return cuda_usable_in_this_process();
#else
  return Status(Code::kUnsupported,
                "device " + device.to_string() + " needs a build with CUDA (PADDLE_VTENSOR_WITH_CUDA)");
#endif
}

}  // namespace pvt

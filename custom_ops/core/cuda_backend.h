// The CUDA Backend (cuda_backend.cc): CUDA's virtual-memory-management driver API behind Backend.
// Only in builds with PADDLE_VTENSOR_WITH_CUDA; get_backend (host_backend.cc) calls it.
#pragma once

#include "backend.h"

namespace pvt {

// The process-wide backend of CUDA device `ordinal`, created on first call and never destroyed
// (later calls return the same object). kInvalidArgument for an ordinal with no device,
// kUnsupported when the device has no virtual memory management, kDriver when the driver fails.
Status make_cuda_backend(int ordinal, Backend** out);

// Ok, unless this process is a fork() child of a process that had initialised CUDA: then
// kUnsupported saying so. Every CUDA backend call checks it first, so such a child gets an error
// instead of a driver call that may hang (pthread_atfork records the fork).
Status cuda_usable_in_this_process();

}  // namespace pvt

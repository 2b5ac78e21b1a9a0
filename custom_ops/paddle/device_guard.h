// Every op that touches a GPU opens with a DeviceGuard: kernels launch on the current device, and a
// caller may have another one current.
#pragma once

#include "paddle/extension.h"

namespace pvt {

// Makes `place`'s GPU current for its scope (and restores the previous one). Throws, naming `op`,
// when the device cannot be used: a process forked from one that had initialised CUDA (the core's
// check_device_usable), or a cudaSetDevice failure. No-op on the CPU and in CPU builds.
class DeviceGuard {
 public:
  DeviceGuard(const phi::Place& place, const char* op);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace pvt

// Device: where a reservation lives. Plain value type shared by the core, the kernels and the adapter.
#pragma once

#include <string>

namespace pvt {

enum class DeviceKind { kHost = 0, kCuda = 1 };

struct Device {
  DeviceKind kind = DeviceKind::kHost;
  int index = 0;  // CUDA ordinal; always 0 for the host

  static Device host() { return Device{DeviceKind::kHost, 0}; }
  static Device cuda(int ordinal) { return Device{DeviceKind::kCuda, ordinal}; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator<(const Device& o) const {
    return kind != o.kind ? kind < o.kind : index < o.index;
  }
  std::string to_string() const {
    return kind == DeviceKind::kHost ? "cpu" : "gpu:" + std::to_string(index);
  }
};

}  // namespace pvt

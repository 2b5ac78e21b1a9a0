// Makes VTensor memory visible in Paddle's own accounting: every chunk mapped or released by the core
// is added to Paddle's "Allocated" and "Reserved" memory stats of that device, so
// paddle.device.cuda.memory_allocated() / max_memory_allocated() (and the host counterparts) include
// the KV cache, as they did when the cache was an ordinary tensor.
#include <cstdint>
#include <string>

#include "../core/apis.h"

// Declared as in paddle/phi/core/memory/stats.h (exported by libpaddle), which cannot be included
// here: it pulls in glog headers the paddle wheel does not ship.
namespace paddle {
namespace memory {
void DeviceMemoryStatUpdate(const std::string& stat_type, int dev_id, int64_t increment);
void HostMemoryStatUpdate(const std::string& stat_type, int dev_id, int64_t increment);
}  // namespace memory
}  // namespace paddle

namespace pvt {
namespace {

void forward_to_paddle(Device device, int64_t delta) {
  if (device.kind == DeviceKind::kCuda) {
    paddle::memory::DeviceMemoryStatUpdate("Allocated", device.index, delta);
    paddle::memory::DeviceMemoryStatUpdate("Reserved", device.index, delta);
  } else {
    paddle::memory::HostMemoryStatUpdate("Allocated", 0, delta);
    paddle::memory::HostMemoryStatUpdate("Reserved", 0, delta);
  }
}

// Registered when the extension is loaded, before any op can map memory.
const bool kRegistered = [] {
  set_mapped_observer(&forward_to_paddle);
  return true;
}();

}  // namespace
}  // namespace pvt

// What the slot-cache ops share: the tensor over a whole SlotCache, finding the cache behind an
// input, and the per-cache device state (a device copy of mapped_tokens, the error flag).
#pragma once

#include <memory>
#include <vector>

#include "op_support.h"

namespace pvt {

// The whole reservation of a SlotCache as one phi::Allocation: the cache tensor holds it, and the
// cache lives as long as any tensor (or Paddle view) does.
class SlotAllocation final : public phi::Allocation {
 public:
  SlotAllocation(std::shared_ptr<SlotCache> cache, const phi::Place& place);
  const std::shared_ptr<SlotCache>& cache() const { return cache_; }

 private:
  std::shared_ptr<SlotCache> cache_;
};

// The slot cache `t` is the whole tensor of (contiguous, offset 0, made by vtensor_slot_cache), or
// throws naming `what` and `op`.
std::shared_ptr<SlotCache> slot_cache_of(const paddle::Tensor& t, const char* op, const char* what);

// Device-side state of a cache on a GPU: kv_mapped (int32 [num_slots]) refreshed from the host
// whenever reserve/release changed it, and error_flag (int32 [1]). Created on first use.
struct SlotDeviceState {
  uint64_t version = ~uint64_t(0);
  paddle::Tensor mapped;
  paddle::Tensor error_flag;
};
// Brings the device copy of mapped_tokens up to date (an asynchronous host-to-device copy queued in
// stream order, so a kernel sees what was reserved before it was queued) and returns the state.
SlotDeviceState& slot_device_state(const std::shared_ptr<SlotCache>& cache, const phi::Place& place);

}  // namespace pvt

// What the slot-cache ops share: the tensor over a whole SlotCache, finding the cache behind an
// input (and refusing any other tensor, or a view of one), refusing a slot cache where an op reads a
// tensor whole, and the per-cache device state (a device copy of mapped_tokens, the error flag).
#pragma once

#include <memory>
#include <vector>

#include "op_support.h"

namespace pvt {

// The whole reservation of a SlotCache as one phi::Allocation: the cache tensor holds it, and the
// cache lives as long as any tensor (or Paddle view) does. It remembers the cache tensor's shape and
// dtype: a Paddle view (reshape, slice, view-as-dtype) shares this holder, and the ops must tell
// the cache from such a view.
class SlotAllocation final : public phi::Allocation {
 public:
  SlotAllocation(std::shared_ptr<SlotCache> cache, const phi::Place& place, const phi::DDim& dims,
                 phi::DataType dtype);
  const std::shared_ptr<SlotCache>& cache() const { return cache_; }
  const phi::DDim& dims() const { return dims_; }
  phi::DataType dtype() const { return dtype_; }

 private:
  std::shared_ptr<SlotCache> cache_;
  phi::DDim dims_;
  phi::DataType dtype_;
};

// The slot cache `t` is (the tensor vtensor_slot_cache made: its own allocation, offset 0, its own
// dims, dtype and contiguous strides), or throws "<op>: <what> is not a slot cache ..." / "... is a
// view of a slot cache ..." (a bad input: InvalidArgument in the error table).
std::shared_ptr<SlotCache> slot_cache_of(const paddle::Tensor& t, const char* op, const char* what);

// Throws "<op>: <what> is a slot cache ..." when `t`'s memory lies in a slot cache (the cache or any
// view of it). For the ops that read or copy a tensor whole (the seq-major ops, the merge): most of a
// slot cache is not mapped, so reading it whole faults.
void refuse_slot_cache(const paddle::Tensor& t, const char* op, const char* what);

// Throws when rows [from, to) of `slot` touch a chunk another slot maps too (share_prefix): a write
// there would change that slot's rows. The host-side check of the ops that write new tokens (CPU);
// reserve_for_write (SlotCache::make_private) makes such rows private first.
void check_private_rows(const SlotCache& cache, int64_t slot, int64_t from, int64_t to, const char* op);

// Device-side state of a cache on a GPU: kv_mapped (int32 [num_slots]) refreshed from the host
// whenever reserve/release changed it, and error_flag (int32 [1]). Created on first use.
struct SlotDeviceTensors {
  paddle::Tensor mapped;
  paddle::Tensor error_flag;
};
// Brings the device copy of mapped_tokens up to date (an asynchronous host-to-device copy queued in
// stream order, so a kernel sees what was reserved before it was queued) and returns the state.
// Thread-safe (ops on one cache may run in several threads).
SlotDeviceTensors slot_device_state(const std::shared_ptr<SlotCache>& cache, const phi::Place& place);

}  // namespace pvt

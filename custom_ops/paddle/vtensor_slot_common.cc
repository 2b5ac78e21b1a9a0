#include "vtensor_slot_common.h"

#include <cstring>

namespace pvt {

SlotAllocation::SlotAllocation(std::shared_ptr<SlotCache> cache, const phi::Place& place)
    : phi::Allocation(cache->data(), cache->reserved_bytes(), place), cache_(std::move(cache)) {}

std::shared_ptr<SlotCache> slot_cache_of(const paddle::Tensor& t, const char* op, const char* what) {
  auto dense = std::dynamic_pointer_cast<phi::DenseTensor>(t.impl());
  const SlotAllocation* alloc =
      dense && dense->initialized() ? dynamic_cast<const SlotAllocation*>(dense->Holder().get()) : nullptr;
  PD_CHECK(alloc != nullptr && dense->meta().offset == 0 && dense->meta().is_contiguous(), op, ": ", what,
           " is not a slot cache (make one with paddle_vtensor.slot_cache or slot_kv_cache)");
  return alloc->cache();
}

SlotDeviceState& slot_device_state(const std::shared_ptr<SlotCache>& cache, const phi::Place& place) {
  auto state = std::static_pointer_cast<SlotDeviceState>(cache->attachment());
  if (!state) {
    state = std::make_shared<SlotDeviceState>();
    state->error_flag = paddle::full({1}, 0, phi::DataType::INT32, place);
    cache->set_attachment(state);
  }
  uint64_t version = 0;
  std::vector<int32_t> mapped = cache->mapped_tokens_all(&version);
  if (version != state->version) {
    paddle::Tensor host = paddle::empty({static_cast<int64_t>(mapped.size())}, phi::DataType::INT32, phi::CPUPlace());
    std::memcpy(host.data<int32_t>(), mapped.data(), mapped.size() * sizeof(int32_t));
    state->mapped = host.copy_to(place, /*blocking=*/false);
    state->version = version;
  }
  return *state;
}

}  // namespace pvt

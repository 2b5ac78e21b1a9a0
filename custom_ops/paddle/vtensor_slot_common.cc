#include "vtensor_slot_common.h"

#include <cstring>
#include <mutex>

namespace pvt {

SlotAllocation::SlotAllocation(std::shared_ptr<SlotCache> cache, const phi::Place& place, const phi::DDim& dims,
                               phi::DataType dtype)
    : phi::Allocation(cache->data(), cache->reserved_bytes(), place),
      cache_(std::move(cache)),
      dims_(dims),
      dtype_(dtype) {}

namespace {

const phi::DenseTensor* dense_of(const paddle::Tensor& t) {
  auto* dense = dynamic_cast<const phi::DenseTensor*>(t.impl().get());
  return dense && dense->Holder() ? dense : nullptr;
}

}  // namespace

std::shared_ptr<SlotCache> slot_cache_of(const paddle::Tensor& t, const char* op, const char* what) {
  const phi::DenseTensor* dense = dense_of(t);
  const SlotAllocation* alloc = dense ? dynamic_cast<const SlotAllocation*>(dense->Holder().get()) : nullptr;
  PD_CHECK(alloc != nullptr, op, ": ", what, " is not a slot cache (make one with paddle_vtensor.slot_cache or ",
           "slot_kv_cache)");
  // A Paddle view shares the holder: the ops would take the slot layout from its dims while the
  // mappings follow the cache's own shape (writes past a slot's rows, reads of unmapped memory).
  const phi::DenseTensorMeta& meta = dense->meta();
  PD_CHECK(meta.offset == 0 && dense->dims() == alloc->dims() && dense->dtype() == alloc->dtype() &&
               meta.is_contiguous(),
           op, ": ", what, " is a view of a slot cache (shape ", dims_str(dense->dims()), ", dtype ",
           phi::DataTypeToString(dense->dtype()), ", offset ", meta.offset, " bytes, strides ",
           dims_str(meta.strides), "), not the cache itself (shape ", dims_str(alloc->dims()), ", dtype ",
           phi::DataTypeToString(alloc->dtype()), ", contiguous): pass the tensor slot_cache returned, unchanged");
  return alloc->cache();
}

void refuse_slot_cache(const paddle::Tensor& t, const char* op, const char* what) {
  const phi::DenseTensor* dense = dense_of(t);
  // A VTensor's memory is a seq-major cache's: no registry lookup on the decode path's k and v.
  if (dense == nullptr || dynamic_cast<const VTensorAllocation*>(dense->Holder().get()) != nullptr) return;
  const bool slot = dynamic_cast<const SlotAllocation*>(dense->Holder().get()) != nullptr ||
                    SlotCache::find(dense->Holder()->ptr()) != nullptr;
  PD_CHECK(!slot, op, ": ", what, " is a slot cache (or a view of one); this op reads its input whole and most "
           "of a slot cache is not mapped: use paddle_vtensor.attention_with_kvcache / read_slot on slot caches");
}

void check_private_rows(const SlotCache& cache, int64_t slot, int64_t from, int64_t to, const char* op) {
  const int64_t row = cache.first_shared_row(slot, from, to);
  PD_CHECK(row < 0, op, ": slot ", slot, " would write rows [", from, ", ", to, "), but row ", row,
           " lies in a chunk another slot maps too (share_prefix), and the write would show there; announce "
           "a write below a shared prefix's end with paddle_vtensor.reserve_for_write(cache, ", slot, ", tokens, ",
           "write_from=", from, ") first");
}

SlotDeviceTensors slot_device_state(const std::shared_ptr<SlotCache>& cache, const phi::Place& place) {
  struct State {
    uint64_t version = ~uint64_t(0);
    SlotDeviceTensors tensors;
  };
  // One lock for every cache's state: taken once per GPU op, around a host-side version check.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto state = std::static_pointer_cast<State>(cache->attachment());
  if (!state) {
    state = std::make_shared<State>();
    state->tensors.error_flag = paddle::full({1}, 0, phi::DataType::INT32, place);
    cache->set_attachment(state);
  }
  uint64_t version = 0;
  std::vector<int32_t> mapped = cache->mapped_tokens_all(&version);
  if (version != state->version) {
    paddle::Tensor host = paddle::empty({static_cast<int64_t>(mapped.size())}, phi::DataType::INT32, phi::CPUPlace());
    std::memcpy(host.data<int32_t>(), mapped.data(), mapped.size() * sizeof(int32_t));
    state->tensors.mapped = host.copy_to(place, /*blocking=*/false);
    state->version = version;
  }
  return state->tensors;
}

}  // namespace pvt

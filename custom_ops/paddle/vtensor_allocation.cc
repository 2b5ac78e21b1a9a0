#include "vtensor_allocation.h"

#include <string>

namespace pvt {

VTensorAllocation::VTensorAllocation(std::shared_ptr<SeqMajorCache> cache, int64_t length,
                                     const phi::Place& place)
    : phi::Allocation(cache->data(), static_cast<size_t>(length) * cache->shape().token_bytes(),
                      place),
      cache_(std::move(cache)),
      length_(length) {}

VTensorAllocation::~VTensorAllocation() { cache_->remove_view(length_); }

Device to_device(const phi::Place& place) {
  if (place.GetType() == phi::AllocationType::CPU) return Device::host();
  if (place.GetType() == phi::AllocationType::GPU) return Device::cuda(place.GetDeviceId());
  PD_THROW("paddle_vtensor supports CPU and GPU tensors, got a tensor on ", place.DebugString());
}

int64_t kv_elem_bytes(phi::DataType dtype, const char* op, const char* what) {
  switch (dtype) {
    case phi::DataType::FLOAT32: return 4;
    case phi::DataType::FLOAT16:
    case phi::DataType::BFLOAT16: return 2;
    default:
      PD_THROW(op, ": ", what, " has dtype ", phi::DataTypeToString(dtype),
               "; supported KV cache dtypes are float32, float16 and bfloat16");
  }
}

paddle::Tensor make_storage_view(std::shared_ptr<SeqMajorCache> cache, int64_t length,
                                 phi::DataType dtype, const phi::Place& place) {
  const CacheShape s = cache->shape();
  auto holder = std::make_shared<VTensorAllocation>(std::move(cache), length, place);
  phi::DenseTensorMeta meta(dtype, phi::make_ddim({length, s.batch, s.heads, s.head_dim}));
  return paddle::Tensor(std::make_shared<phi::DenseTensor>(holder, meta));
}

const VTensorAllocation* whole_storage_view(const paddle::Tensor& t) {
  auto dense = std::dynamic_pointer_cast<phi::DenseTensor>(t.impl());
  if (!dense || !dense->initialized()) return nullptr;
  auto* alloc = dynamic_cast<const VTensorAllocation*>(dense->Holder().get());
  if (alloc == nullptr || dense->meta().offset != 0 || !dense->meta().is_contiguous()) return nullptr;
  const auto& d = dense->dims();
  const CacheShape& s = alloc->cache()->shape();
  if (d.size() != 4 || d[1] != s.batch || d[2] != s.heads || d[3] != s.head_dim) return nullptr;
  if (phi::SizeOf(dense->dtype()) != static_cast<size_t>(s.elem_bytes)) return nullptr;
  if (d[0] > alloc->length()) return nullptr;
  return alloc;
}

}  // namespace pvt

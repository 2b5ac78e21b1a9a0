#include "vtensor_allocation.h"

#include <string>

#ifdef PADDLE_VTENSOR_WITH_CUDA
#include <cuda_runtime.h>
#endif

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

void* stream_of(const paddle::Tensor& t) {
#ifdef PADDLE_VTENSOR_WITH_CUDA
  if (t.place().GetType() == phi::AllocationType::GPU) return static_cast<void*>(t.stream());
#endif
  (void)t;
  return nullptr;
}

void throw_if_error(const Status& status, const char* op) {
  if (!status.ok()) PD_THROW(op, ": ", status.to_string());
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

DeviceGuard::DeviceGuard(const phi::Place& place) {
#ifdef PADDLE_VTENSOR_WITH_CUDA
  if (place.GetType() != phi::AllocationType::GPU) return;
  int current = 0;
  if (cudaGetDevice(&current) == cudaSuccess && current != place.GetDeviceId()) {
    if (cudaSetDevice(place.GetDeviceId()) == cudaSuccess) previous_ = current;
  }
#else
  (void)place;
#endif
}

DeviceGuard::~DeviceGuard() {
#ifdef PADDLE_VTENSOR_WITH_CUDA
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
#endif
}

void launch_append(const AppendParams& params, const phi::Place& place, void* stream,
                   const char* op) {
  if (params.tokens == 0) return;
  if (place.GetType() == phi::AllocationType::CPU) {
    throw_if_error(append_tokens_cpu(params), op);
    return;
  }
#ifdef PADDLE_VTENSOR_WITH_CUDA
  DeviceGuard guard(place);
  throw_if_error(append_tokens_cuda(params, stream), op);
#else
  (void)stream;
  PD_THROW(op, ": this build of paddle_vtensor has no CUDA kernels (tensor on ",
           place.DebugString(), ")");
#endif
}

}  // namespace pvt

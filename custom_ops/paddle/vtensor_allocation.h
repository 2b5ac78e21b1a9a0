// The adapter's bridge from the core to Paddle: a phi::Allocation that is one tensor's window on a
// SeqMajorCache, and how the ops recognise and create such tensors.
#pragma once

#include <memory>

#include "paddle/extension.h"
#include "paddle/phi/core/allocator.h"
#include "paddle/phi/core/dense_tensor.h"

#include "../core/apis.h"

namespace pvt {

// Tokens [0, length) of a cache. A DenseTensor [length, B, H, D] (the "storage view") holds it as its
// holder; views Paddle derives from that tensor (transpose to the logical [B, S, H, D], slices) share
// it. The view is registered with the cache while this object lives, so the cache never releases
// memory a live tensor can see, nor writes in place over it.
class VTensorAllocation final : public phi::Allocation {
 public:
  // Takes over one registration of a view of `length` (made by begin_append or add_view).
  VTensorAllocation(std::shared_ptr<SeqMajorCache> cache, int64_t length, const phi::Place& place);
  ~VTensorAllocation() override;

  const std::shared_ptr<SeqMajorCache>& cache() const { return cache_; }
  int64_t length() const { return length_; }

 private:
  std::shared_ptr<SeqMajorCache> cache_;
  int64_t length_;
};

// Paddle place -> core device; throws for places the plugin does not support.
Device to_device(const phi::Place& place);
// Element size of a supported KV dtype (float32, float16, bfloat16); throws naming any other dtype.
int64_t kv_elem_bytes(phi::DataType dtype, const char* op, const char* what);

// A contiguous [length, B, H, D] tensor on `cache` whose view registration the caller already made.
paddle::Tensor make_storage_view(std::shared_ptr<SeqMajorCache> cache, int64_t length,
                                 phi::DataType dtype, const phi::Place& place);
// The allocation behind `t` when `t` is a whole storage view of a cache (offset 0, contiguous,
// [S, B, H, D] matching the cache's shape and element size), else nullptr.
const VTensorAllocation* whole_storage_view(const paddle::Tensor& t);

}  // namespace pvt

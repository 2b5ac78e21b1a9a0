// vtensor_truncate: a shorter view of a VTensor, without copying (speculative-decoding rollback).
//   Cache [S, B, H, D] storage view of a VTensor;  attr seq_len in [0, S]
//   Out   [seq_len, B, H, D] on the same storage.
// Memory past seq_len is released once no live view sees it (when the longer views die), and the
// next append on Out writes in place from then on (until then it copies: the longer view still
// sees those positions).
#include "append_common.h"

std::vector<paddle::Tensor> VTensorTruncate(const paddle::Tensor& cache, int64_t seq_len) {
  const char* op = pvt::names::kTruncate;
  pvt::check_defined(cache, op, "the cache");
  pvt::refuse_slot_cache(cache, op, "the cache");
  PD_CHECK(cache.dims().size() == 4, op,
           ": cache must have rank 4 (logical [batch, seq, heads, head_dim]), got rank ",
           cache.dims().size());
  const pvt::VTensorAllocation* alloc = pvt::whole_storage_view(cache);
  PD_CHECK(alloc != nullptr, op,
           ": the cache is not a VTensor (make one with paddle_vtensor.from_dense or append)");
  const int64_t S = cache.dims()[0];
  PD_CHECK(seq_len >= 0 && seq_len <= S, op, ": seq_len must be in [0, ", S,
           "] (the cache's current length), got ", seq_len);
  pvt::throw_if_error(alloc->cache()->add_view(seq_len), op);
  return {pvt::make_storage_view(alloc->cache(), seq_len, cache.dtype(), cache.place())};
}

std::vector<std::vector<int64_t>> VTensorTruncateInferShape(const std::vector<int64_t>& cache_shape,
                                                            int64_t seq_len) {
  return {{seq_len, cache_shape[1], cache_shape[2], cache_shape[3]}};
}

std::vector<paddle::DataType> VTensorTruncateInferDtype(const paddle::DataType& cache_dtype) {
  return {cache_dtype};
}

PVT_BUILD_OP(PVT_OP_TRUNCATE)
    .Inputs({"Cache"})
    .Outputs({"Out"})
    .Attrs({PVT_ATTR_SEQ_LEN ": int64_t"})
    .SetKernelFn(PD_KERNEL(VTensorTruncate))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorTruncateInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorTruncateInferDtype));

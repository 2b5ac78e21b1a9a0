// vtensor_append: append T >= 1 tokens (a prefill chunk, k speculative tokens) to a seq-major cache.
//   Cache  [S, B, H, D]  storage view of the logical [B, S, H, D] cache (any tensor: migrated once)
//   Tokens [B, T, H, D]
//   Out    [S + T, B, H, D]  shares the cache's storage when the write is in place.
#include "append_common.h"

std::vector<paddle::Tensor> VTensorAppend(const paddle::Tensor& cache, const paddle::Tensor& tokens,
                                          int64_t max_seq_len, int64_t chunk_bytes) {
  return {pvt::append_to_cache(cache, tokens, max_seq_len, chunk_bytes, /*expect_tokens=*/0,
                               pvt::names::kAppend)};
}

std::vector<std::vector<int64_t>> VTensorAppendInferShape(const std::vector<int64_t>& cache_shape,
                                                          const std::vector<int64_t>& tokens_shape) {
  return {pvt::append_out_shape(cache_shape, tokens_shape)};
}

std::vector<paddle::DataType> VTensorAppendInferDtype(const paddle::DataType& cache_dtype,
                                                      const paddle::DataType&) {
  return {cache_dtype};
}

PVT_BUILD_OP(PVT_OP_APPEND)
    .Inputs({"Cache", "Tokens"})
    .Outputs({"Out"})
    .Attrs({PVT_ATTR_MAX_SEQ_LEN ": int64_t", PVT_ATTR_CHUNK_BYTES ": int64_t"})
    .SetKernelFn(PD_KERNEL(VTensorAppend))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorAppendInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorAppendInferDtype));

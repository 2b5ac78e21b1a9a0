// vtensor_reserve_one_token: append one token's K or V to a seq-major cache, in place.
//   Cache  [S, B, H, D]  storage view of the logical [B, S, H, D] cache (any tensor: migrated once)
//   Token  [B, 1, H, D]
//   Out    [S + 1, B, H, D]  shares the cache's storage; the Python layer returns it as the logical
//                            [B, S + 1, H, D] with strides {H*D, B*H*D, D, 1}.
// The original proposal's op, kept under its name; vtensor_append is the T-token generalisation.
#include "append_common.h"

std::vector<paddle::Tensor> VTensorReserveOneToken(const paddle::Tensor& cache,
                                                   const paddle::Tensor& token, int64_t max_seq_len,
                                                   int64_t chunk_bytes) {
  return {pvt::append_to_cache(cache, token, max_seq_len, chunk_bytes, /*expect_tokens=*/1,
                               pvt::names::kReserveOneToken)};
}

std::vector<std::vector<int64_t>> VTensorReserveOneTokenInferShape(
    const std::vector<int64_t>& cache_shape, const std::vector<int64_t>& token_shape) {
  return {pvt::append_out_shape(cache_shape, token_shape)};
}

std::vector<paddle::DataType> VTensorReserveOneTokenInferDtype(const paddle::DataType& cache_dtype,
                                                               const paddle::DataType&) {
  return {cache_dtype};
}

PVT_BUILD_OP(PVT_OP_RESERVE_ONE_TOKEN)
    .Inputs({"Cache", "Token"})
    .Outputs({"Out"})
    .Attrs({PVT_ATTR_MAX_SEQ_LEN ": int64_t", PVT_ATTR_CHUNK_BYTES ": int64_t"})
    .SetKernelFn(PD_KERNEL(VTensorReserveOneToken))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorReserveOneTokenInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorReserveOneTokenInferDtype));

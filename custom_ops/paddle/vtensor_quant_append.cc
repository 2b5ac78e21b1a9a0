// vtensor_quant_append: append T >= 1 float tokens to an 8-bit VTensor cache, quantizing them.
//   Cache     [S, B, H, D] codes (float8_e4m3fn or int8), storage view of an 8-bit VTensor
//   Scale     fp8: [H] float32; int8: [S, B, H, 1] float32 storage view of the cache's scale VTensor
//   Tokens    [B, T, H, D] float32, float16 or bfloat16
//   attr max_seq_len, chunk_bytes (used when the append must copy: copy-on-write), expect_tokens
//        (> 0: T must equal it; reserve_one_token passes 1)
//   Out       [S + T, B, H, D] codes;  OutScale  fp8: Scale; int8: [S + T, B, H, 1]
#include "quant_common.h"

std::vector<paddle::Tensor> VTensorQuantAppend(const paddle::Tensor& cache, const paddle::Tensor& scale,
                                               const paddle::Tensor& tokens, int64_t max_seq_len,
                                               int64_t chunk_bytes, int64_t expect_tokens) {
  const char* op = pvt::names::kQuantAppend;
  pvt::check_defined(cache, op, "the cache");
  pvt::check_defined(tokens, op, "tokens");
  pvt::refuse_slot_cache(cache, op, "the cache");
  const pvt::KvQuant kind = pvt::quant_kind_of(cache.dtype(), op, "the cache");
  const auto& c = cache.dims();
  const auto& t = tokens.dims();
  PD_CHECK(c.size() == 4 && pvt::whole_storage_view(cache) != nullptr, op,
           ": the cache must be an 8-bit VTensor (paddle_vtensor.from_dense or append with cache_dtype=), got "
           "a plain tensor of shape ", pvt::dims_str(c));
  PD_CHECK(t.size() == 4 && t[0] == c[1] && t[2] == c[2] && t[3] == c[3] && t[1] >= 1, op,
           ": tokens [batch, tokens, heads, head_dim] = ", pvt::dims_str(t),
           " must hold at least one token and match the cache [batch, seq, heads, head_dim] = [", c[1], ", ", c[0],
           ", ", c[2], ", ", c[3], "]");
  PD_CHECK(expect_tokens <= 0 || t[1] == expect_tokens, op, ": expects exactly ", expect_tokens,
           " token(s) per call, got shape ", pvt::dims_str(t));
  pvt::quant_source_type(tokens, cache.place(), op);
  pvt::check_scale_of(cache, scale, kind, op, "the scale");
  return pvt::quant_append(&cache, &scale, tokens, kind, &scale, max_seq_len, chunk_bytes, op);
}

std::vector<std::vector<int64_t>> VTensorQuantAppendInferShape(const std::vector<int64_t>& cache,
                                                               const std::vector<int64_t>& scale,
                                                               const std::vector<int64_t>& tokens) {
  const int64_t n = cache[0] < 0 || tokens[1] < 0 ? -1 : cache[0] + tokens[1];
  std::vector<int64_t> out_scale = scale;
  if (scale.size() == 4) out_scale[0] = n;
  return {{n, cache[1], cache[2], cache[3]}, out_scale};
}

std::vector<paddle::DataType> VTensorQuantAppendInferDtype(const paddle::DataType& cache, const paddle::DataType& scale,
                                                           const paddle::DataType&) {
  return {cache, scale};
}

PVT_BUILD_OP(PVT_OP_QUANT_APPEND)
    .Inputs({"Cache", "Scale", "Tokens"})
    .Outputs({"Out", "OutScale"})
    .Attrs({PVT_ATTR_MAX_SEQ_LEN ": int64_t", PVT_ATTR_CHUNK_BYTES ": int64_t", PVT_ATTR_EXPECT_TOKENS ": int64_t"})
    .SetKernelFn(PD_KERNEL(VTensorQuantAppend))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorQuantAppendInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorQuantAppendInferDtype));

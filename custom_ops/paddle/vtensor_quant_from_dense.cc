// vtensor_quant_from_dense: quantize a dense cache into a new 8-bit VTensor (a migration: one pass).
//   X      [B, S, H, D] float32, float16 or bfloat16
//   Scale  optional [H] float32: the fp8 cache's per-kv-head scale (required for float8_e4m3fn,
//          absent for int8, whose per-token scales the op computes)
//   attr cache_dtype  "float8_e4m3fn" or "int8"; max_seq_len, chunk_bytes as vtensor_from_dense
//   Out       [S, B, H, D] codes, storage view of the new cache
//   OutScale  fp8: Scale itself; int8: [S, B, H, 1] float32 storage view of the scale cache
#include "quant_common.h"

std::vector<paddle::Tensor> VTensorQuantFromDense(const paddle::Tensor& x, const paddle::optional<paddle::Tensor>& scale,
                                                  int64_t max_seq_len, int64_t chunk_bytes,
                                                  const std::string& cache_dtype) {
  const char* op = pvt::names::kQuantFromDense;
  pvt::check_defined(x, op, "x");
  pvt::refuse_slot_cache(x, op, "x");
  const pvt::KvQuant kind = pvt::quant_kind_named(cache_dtype, op);
  const auto& d = x.dims();
  PD_CHECK(d.size() == 4, op, ": x must have rank 4 [batch, seq, heads, head_dim], got shape ", pvt::dims_str(d));
  PD_CHECK(d[0] > 0 && d[2] > 0 && d[3] > 0, op, ": x must have positive batch, heads and head_dim, got shape ",
           pvt::dims_str(d));
  pvt::quant_source_type(x, x.place(), op);
  if (kind == pvt::KvQuant::kFp8E4M3) {
    PD_CHECK(scale.is_initialized(), op, ": a float8_e4m3fn cache needs its scale [kv_heads] (k_scale / v_scale)");
    pvt::check_fp8_scale(*scale, d[2], x.place(), op, "the scale");
  } else {
    PD_CHECK(!scale.is_initialized(), op, ": an int8 cache computes its own per-token scales; give no scale");
  }
  return pvt::quant_append(nullptr, nullptr, x, kind, scale ? &*scale : nullptr, max_seq_len, chunk_bytes, op);
}

std::vector<std::vector<int64_t>> VTensorQuantFromDenseInferShape(const std::vector<int64_t>& x,
                                                                  const paddle::optional<std::vector<int64_t>>& scale) {
  PD_CHECK(x.size() == 4, pvt::names::kQuantFromDense, ": x must have rank 4");
  return {{x[1], x[0], x[2], x[3]}, scale ? *scale : std::vector<int64_t>{x[1], x[0], x[2], 1}};
}

std::vector<paddle::DataType> VTensorQuantFromDenseInferDtype(const paddle::DataType&,
                                                              const paddle::optional<paddle::DataType>&,
                                                              const std::string& cache_dtype) {
  return {cache_dtype == "int8" ? paddle::DataType::INT8 : paddle::DataType::FLOAT8_E4M3FN, paddle::DataType::FLOAT32};
}

PVT_BUILD_OP(PVT_OP_QUANT_FROM_DENSE)
    .Inputs({"X", paddle::Optional("Scale")})
    .Outputs({"Out", "OutScale"})
    .Attrs({PVT_ATTR_MAX_SEQ_LEN ": int64_t", PVT_ATTR_CHUNK_BYTES ": int64_t", PVT_ATTR_CACHE_DTYPE ": std::string"})
    .SetKernelFn(PD_KERNEL(VTensorQuantFromDense))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorQuantFromDenseInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorQuantFromDenseInferDtype));

// vtensor_slot_cache: a new slot cache, nothing mapped.
//   Like  any tensor: gives the dtype (float32, float16, bfloat16; float8_e4m3fn / int8 codes) and the place
//   attr shape  [num_slots, max_seq_len, row dims...]: [slots, S, H, D] for one layer's K or V
//               (flash-attn's k_cache), [slots, S, L, 2, Hkv, D] for a whole model (token rows
//               holding every layer, docs/SLOT_CACHE.md)
//   attr chunk_bytes  mapping granularity (0: 2 MiB), rounded up to the device's
//   Out   that shape but dimension 1 = the slot's row stride: max_seq_len rounded up so that every
//         slot starts on a chunk boundary (slots can share chunks: paddle_vtensor.share_prefix;
//         padding in virtual memory only, rows past max_seq_len are never mapped; slot_info gives
//         both), contiguous, over the cache's whole reservation. Rows are readable only once
//         reserved (paddle_vtensor.reserve_slot); the slot ops check this, plain Paddle ops do not.
#include "../op_names.h"
#include "vtensor_slot_common.h"

std::vector<paddle::Tensor> VTensorSlotCache(const paddle::Tensor& like, const std::vector<int64_t>& shape,
                                             int64_t chunk_bytes) {
  const char* op = pvt::names::kSlotCache;
  PD_CHECK(shape.size() >= 3, op, ": shape must be [num_slots, max_seq_len, row dims...], got rank ",
           shape.size());
  // float8_e4m3fn / int8: the codes of an 8-bit slot cache (paddle_vtensor.quant), one byte a value.
  const bool codes = like.dtype() == phi::DataType::FLOAT8_E4M3FN || like.dtype() == phi::DataType::INT8;
  int64_t row = codes ? 1 : pvt::kv_elem_bytes(like.dtype(), op, "the cache dtype");
  for (size_t i = 0; i < shape.size(); ++i) {
    PD_CHECK(shape[i] > 0, op, ": every dimension must be positive, got ", shape[i], " at dimension ", i);
    // The core checks slots x rows x row bytes; the row itself must not wrap first.
    PD_CHECK(i < 2 || pvt::checked_mul(row, shape[i], &row), op, ": a token row of shape ",
             pvt::dims_str(phi::make_ddim(std::vector<int64_t>(shape.begin() + 2, shape.end()))),
             " is too large (its size in bytes does not fit in 64 bits)");
  }
  pvt::SlotCacheShape s{shape[0], shape[1], row, /*align_slots=*/true};
  std::shared_ptr<pvt::SlotCache> cache;
  pvt::throw_if_error(pvt::SlotCache::create(pvt::to_device(like.place()), s,
                                             chunk_bytes > 0 ? static_cast<size_t>(chunk_bytes) : 0, &cache),
                      op);
  std::vector<int64_t> dims = shape;
  dims[1] = cache->shape().slot_rows;
  phi::DenseTensorMeta meta(like.dtype(), phi::make_ddim(dims));
  auto holder = std::make_shared<pvt::SlotAllocation>(cache, like.place(), meta.dims, like.dtype());
  return {paddle::Tensor(std::make_shared<phi::DenseTensor>(holder, meta))};
}

// The padded row stride depends on the device's granularity, known only when the cache exists.
std::vector<std::vector<int64_t>> VTensorSlotCacheInferShape(const std::vector<int64_t>&,
                                                             const std::vector<int64_t>& shape, int64_t) {
  std::vector<int64_t> dims = shape;
  if (dims.size() >= 2) dims[1] = -1;
  return {dims};
}

std::vector<paddle::DataType> VTensorSlotCacheInferDtype(const paddle::DataType& dtype) { return {dtype}; }

PVT_BUILD_OP(PVT_OP_SLOT_CACHE)
    .Inputs({"Like"})
    .Outputs({"Out"})
    .Attrs({PVT_ATTR_CACHE_SHAPE ": std::vector<int64_t>", PVT_ATTR_CHUNK_BYTES ": int64_t"})
    .SetKernelFn(PD_KERNEL(VTensorSlotCache))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorSlotCacheInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorSlotCacheInferDtype));

// vtensor_from_dense: copy a dense cache into a new VTensor (the one copy of a migration).
//   X   [B, S, H, D] any dense tensor (float32, float16, bfloat16)
//   Out [S, B, H, D] storage view; reservation max(max_seq_len or 4096, S) tokens.
#include <algorithm>

#include "append_common.h"

std::vector<paddle::Tensor> VTensorFromDense(const paddle::Tensor& x, int64_t max_seq_len,
                                             int64_t chunk_bytes) {
  const char* op = pvt::names::kFromDense;
  pvt::check_defined(x, op, "x");
  pvt::refuse_slot_cache(x, op, "x");
  const auto& d = x.dims();
  PD_CHECK(d.size() == 4, op, ": x must have rank 4 [batch, seq, heads, head_dim], got rank ",
           d.size());
  const int64_t B = d[0], S = d[1], H = d[2], D = d[3];
  const pvt::CacheShape shape{B, H, D, pvt::kv_elem_bytes(x.dtype(), op, "x")};
  const pvt::CacheConfig config = pvt::cache_config(shape, max_seq_len, chunk_bytes, S, op);
  std::shared_ptr<pvt::SeqMajorCache> cache;
  pvt::throw_if_error(pvt::SeqMajorCache::create(pvt::to_device(x.place()), shape, config, &cache), op);
  void* stream = pvt::stream_of(x);
  if (S > 0) {
    pvt::throw_if_error(cache->begin_append(0, S), op);
  } else {
    pvt::throw_if_error(cache->add_view(0), op);
  }
  paddle::Tensor out = pvt::make_storage_view(cache, S, x.dtype(), x.place());
  pvt::AppendParams p;
  p.dst = cache->data();
  p.src = x.data();
  p.batch = B;
  p.tokens = S;
  p.heads = H;
  p.head_dim = D;
  p.dst_pos = 0;
  const int64_t stride[4] = {S * H * D, H * D, D, 1};  // x arrives contiguous
  std::copy(stride, stride + 4, p.src_stride);
  p.elem_bytes = shape.elem_bytes;
  pvt::launch_append(p, x.place(), stream, op);
  return {out};
}

std::vector<std::vector<int64_t>> VTensorFromDenseInferShape(const std::vector<int64_t>& x_shape) {
  PD_CHECK(x_shape.size() == 4, pvt::names::kFromDense, ": x must have rank 4");
  return {{x_shape[1], x_shape[0], x_shape[2], x_shape[3]}};
}

std::vector<paddle::DataType> VTensorFromDenseInferDtype(const paddle::DataType& x_dtype) {
  return {x_dtype};
}

PVT_BUILD_OP(PVT_OP_FROM_DENSE)
    .Inputs({"X"})
    .Outputs({"Out"})
    .Attrs({PVT_ATTR_MAX_SEQ_LEN ": int64_t", PVT_ATTR_CHUNK_BYTES ": int64_t"})
    .SetKernelFn(PD_KERNEL(VTensorFromDense))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorFromDenseInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorFromDenseInferDtype));

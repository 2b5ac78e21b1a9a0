#include "quant_common.h"

#include <algorithm>
#include <cmath>

#include "../core/stats.h"

namespace pvt {

KvQuant quant_kind_of(phi::DataType dtype, const char* op, const char* what) {
  if (dtype == phi::DataType::FLOAT8_E4M3FN) return KvQuant::kFp8E4M3;
  if (dtype == phi::DataType::INT8) return KvQuant::kInt8;
  PD_THROW(op, ": ", what, " has dtype ", phi::DataTypeToString(dtype),
           "; an 8-bit cache is float8_e4m3fn or int8");
}

KvQuant quant_kind_named(const std::string& name, const char* op) {
  if (name == "float8_e4m3fn") return KvQuant::kFp8E4M3;
  if (name == "int8") return KvQuant::kInt8;
  PD_THROW(op, ": cache_dtype must be 'float8_e4m3fn' or 'int8', got '", name, "'");
}

phi::DataType quant_dtype(KvQuant kind) {
  return kind == KvQuant::kFp8E4M3 ? phi::DataType::FLOAT8_E4M3FN : phi::DataType::INT8;
}

void check_fp8_scale(const paddle::Tensor& scale, int64_t heads, const phi::Place& place, const char* op,
                     const char* what) {
  check_defined(scale, op, what);
  PD_CHECK(scale.dtype() == phi::DataType::FLOAT32, op, ": ", what, " must be float32, got ",
           phi::DataTypeToString(scale.dtype()));
  PD_CHECK(scale.dims().size() == 1 && scale.dims()[0] == heads, op, ": ", what,
           " must have shape [kv_heads] = [", heads, "] (one scale per kv head), got ", dims_str(scale.dims()));
  PD_CHECK(scale.place() == place, op, ": ", what, " is on ", scale.place().DebugString(), " but the cache is on ",
           place.DebugString());
  const paddle::Tensor host = place.GetType() == phi::AllocationType::CPU ? scale : scale.copy_to(phi::CPUPlace(), true);
  const float* v = host.data<float>();
  for (int64_t h = 0; h < heads; ++h) {
    PD_CHECK(std::isfinite(v[h]) && v[h] > 0.f, op, ": ", what, " must be finite and positive, got ", v[h],
             " for kv head ", h);
  }
}

ScalarType quant_source_type(const paddle::Tensor& tokens, const phi::Place& place, const char* op) {
  PD_CHECK(tokens.place() == place, op, ": tokens are on ", tokens.place().DebugString(), " but the cache is on ",
           place.DebugString());
  return scalar_type_of(tokens.dtype(), op, "tokens (quantized on append)");
}

void check_scale_of(const paddle::Tensor& codes, const paddle::Tensor& scale, KvQuant kind, const char* op,
                    const char* what) {
  const auto& c = codes.dims();
  if (kind == KvQuant::kFp8E4M3) {
    check_fp8_scale(scale, c[2], codes.place(), op, what);
    return;
  }
  check_defined(scale, op, what);
  PD_CHECK(scale.dtype() == phi::DataType::FLOAT32 && whole_storage_view(scale) != nullptr &&
               scale.dims() == phi::make_ddim({c[0], c[1], c[2], 1}),
           op, ": ", what, " of an int8 cache must be its per-token scale VTensor, storage view [seq, batch, "
           "kv_heads, 1] = [", c[0], ", ", c[1], ", ", c[2], ", 1] float32, got ", dims_str(scale.dims()), " ",
           phi::DataTypeToString(scale.dtype()));
}

void launch_quant_append(const QuantAppendParams& p, const phi::Place& place, void* stream, const char* op) {
  const int64_t values = p.outer * p.inner * p.heads * p.head_dim;
  const int64_t bytes = values + (p.kind == KvQuant::kInt8 ? p.outer * p.inner * p.heads * 4 : 0);
  if (place.GetType() == phi::AllocationType::CPU) {
    throw_if_error(quant_append_cpu(p), op);
    add_bytes_written(Device::host(), bytes);
    return;
  }
#ifdef PADDLE_VTENSOR_WITH_CUDA
  DeviceGuard guard(place, op);
  throw_if_error(quant_append_cuda(p, stream), op);
  add_bytes_written(to_device(place), bytes);
  record_cache_use(p.dst, place, stream, op);
  if (p.kind == KvQuant::kInt8) record_cache_use(p.scale, place, stream, op);
#else
  (void)stream;
  (void)bytes;
  PD_THROW(op, ": this build of paddle_vtensor has no CUDA kernels (tensor on ", place.DebugString(), ")");
#endif
}

namespace {

// One of the two caches after growing by T tokens: where to write and its new storage view.
struct Grown {
  std::shared_ptr<SeqMajorCache> cache;
  paddle::Tensor out;
};

// `old` (a whole storage view of S tokens, or null for a new cache) grown to S + T tokens: in place
// when no other live view sees position S, else a copy (copy-on-write) keeping its settings unless
// the call gives them; a new cache reserves max(max_seq_len, T).
Grown grow(const paddle::Tensor* old, const CacheShape& shape, phi::DataType dtype, int64_t S, int64_t T,
           int64_t max_seq_len, int64_t chunk_bytes, const phi::Place& place, void* stream, const char* op) {
  CacheConfig config = cache_config(shape, max_seq_len, chunk_bytes, S + T, op);
  Grown g;
  const VTensorAllocation* alloc = old ? whole_storage_view(*old) : nullptr;
  if (alloc != nullptr) {
    const Status st = alloc->cache()->begin_append(S, T);
    if (st.ok()) {
      g.cache = alloc->cache();
    } else if (st.code() != Code::kConflict) {
      throw_if_error(st, op);
    } else {
      if (max_seq_len == 0) config.capacity_tokens = std::max(alloc->cache()->capacity_tokens(), S + T);
      if (chunk_bytes == 0) config.chunk_bytes = alloc->cache()->chunk_bytes();
    }
  }
  const bool copy = alloc != nullptr && !g.cache;
  if (!g.cache) {
    throw_if_error(SeqMajorCache::create(to_device(place), shape, config, &g.cache), op);
    throw_if_error(S + T > 0 ? g.cache->begin_append(0, S + T) : g.cache->add_view(0), op);
  }
  // The output owns the view registration before any copy is queued (a failed launch releases it).
  g.out = make_storage_view(g.cache, S + T, dtype, place);
  if (copy && S > 0) {
    AppendParams p;
    p.dst = g.cache->data();
    p.src = old->data();
    p.batch = shape.batch;
    p.tokens = S;
    p.heads = shape.heads;
    p.head_dim = shape.head_dim;
    const int64_t stride[4] = {shape.heads * shape.head_dim, shape.batch * shape.heads * shape.head_dim,
                               shape.head_dim, 1};  // storage [S, B, H, D] as (b, s, h, d)
    std::copy(stride, stride + 4, p.src_stride);
    p.elem_bytes = shape.elem_bytes;
    launch_append(p, place, stream, op);
  }
  return g;
}

}  // namespace

std::vector<paddle::Tensor> quant_append(const paddle::Tensor* codes, const paddle::Tensor* scale,
                                         const paddle::Tensor& tokens, KvQuant kind,
                                         const paddle::Tensor* fp8_scale, int64_t max_seq_len,
                                         int64_t chunk_bytes, const char* op) {
  const auto& t = tokens.dims();
  const int64_t B = t[0], T = t[1], H = t[2], D = t[3], S = codes ? codes->dims()[0] : 0;
  const phi::Place place = tokens.place();
  void* stream = stream_of(tokens);
  Grown c = grow(codes, CacheShape{B, H, D, 1}, quant_dtype(kind), S, T, max_seq_len, chunk_bytes, place,
                 stream, op);
  Grown s;
  if (kind == KvQuant::kInt8) {
    s = grow(scale, CacheShape{B, H, 1, 4}, phi::DataType::FLOAT32, S, T, max_seq_len, chunk_bytes, place,
             stream, op);
  } else {
    s.out = *fp8_scale;  // fixed for the cache's life: every view shares it
  }
  if (T == 0) return {c.out, s.out};
  QuantAppendParams p;
  p.kind = kind;
  p.src_type = scalar_type_of(tokens.dtype(), op, "tokens");
  p.outer = B;
  p.inner = T;
  p.heads = H;
  p.head_dim = D;
  p.src = tokens.data();  // contiguous [B, T, H, D] (Paddle makes custom-op inputs contiguous)
  const int64_t src_stride[3] = {T * H * D, H * D, D};
  std::copy(src_stride, src_stride + 3, p.src_stride);
  p.dst = reinterpret_cast<uint8_t*>(c.cache->data()) + S * B * H * D;
  const int64_t dst_stride[3] = {H * D, B * H * D, D};
  std::copy(dst_stride, dst_stride + 3, p.dst_stride);
  if (kind == KvQuant::kInt8) {
    p.scale = reinterpret_cast<float*>(s.cache->data()) + S * B * H;
    const int64_t scale_stride[3] = {H, B * H, 1};
    std::copy(scale_stride, scale_stride + 3, p.scale_stride);
  } else {
    p.scale = const_cast<float*>(fp8_scale->data<float>());  // read only for fp8
    const int64_t scale_stride[3] = {0, 0, 1};
    std::copy(scale_stride, scale_stride + 3, p.scale_stride);
  }
  launch_quant_append(p, place, stream, op);
  return {c.out, s.out};
}

}  // namespace pvt

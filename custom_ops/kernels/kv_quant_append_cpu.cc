// Host quantizing append (and the shared parameter check): one token row (all heads) per task.
#include <cmath>
#include <string>

#include "cpu_thread_pool.h"
#include "kv_quant_append.h"
#include "kv_quant_host_io.h"

namespace pvt {
namespace {

using kv_quant::load_float;

void quantize_row(const QuantAppendParams& p, int64_t o, int64_t i) {
  for (int64_t h = 0; h < p.heads; ++h) {
    const int64_t src_at = o * p.src_stride[0] + i * p.src_stride[1] + h * p.src_stride[2];
    const int64_t dst_at = o * p.dst_stride[0] + i * p.dst_stride[1] + h * p.dst_stride[2];
    float* scale = p.scale + o * p.scale_stride[0] + i * p.scale_stride[1] + h * p.scale_stride[2];
    if (p.kind == KvQuant::kFp8E4M3) {
      uint8_t* dst = static_cast<uint8_t*>(p.dst) + dst_at;
      for (int64_t d = 0; d < p.head_dim; ++d) {
        dst[d] = kv_quant::fp8_quantize(load_float(p.src, src_at + d, p.src_type), *scale);
      }
      continue;
    }
    float amax = 0.f;  // fmaxf ignores NaN: a NaN value becomes code 0, its neighbours keep their scale
    for (int64_t d = 0; d < p.head_dim; ++d) amax = std::fmax(amax, std::fabs(load_float(p.src, src_at + d, p.src_type)));
    const float s = amax / kInt8Max;
    *scale = s;
    int8_t* dst = static_cast<int8_t*>(p.dst) + dst_at;
    for (int64_t d = 0; d < p.head_dim; ++d) dst[d] = kv_quant::int8_quantize(load_float(p.src, src_at + d, p.src_type), s);
  }
}

}  // namespace

Status check_quant_append_params(const QuantAppendParams& p) {
  const std::string op = "quant_append: ";
  if (p.kind != KvQuant::kFp8E4M3 && p.kind != KvQuant::kInt8) {
    return Status(Code::kInvalidArgument, op + "the cache must be float8_e4m3fn or int8");
  }
  if (p.src_type != ScalarType::kFloat32 && p.src_type != ScalarType::kFloat16 && p.src_type != ScalarType::kBFloat16) {
    return Status(Code::kInvalidArgument, op + "tokens must be float32, float16 or bfloat16, got " +
                                              scalar_type_name(p.src_type));
  }
  if (p.outer <= 0 || p.inner <= 0 || p.heads <= 0 || p.head_dim <= 0) {
    return Status(Code::kInvalidArgument, op + "sizes must be positive, got outer=" + std::to_string(p.outer) +
                                              " inner=" + std::to_string(p.inner) + " heads=" +
                                              std::to_string(p.heads) + " head_dim=" + std::to_string(p.head_dim));
  }
  if (p.src == nullptr || p.dst == nullptr || p.scale == nullptr) {
    return Status(Code::kInvalidArgument, op + "src, dst and scale must all be set");
  }
  return Status::Ok();
}

Status quant_append_cpu(const QuantAppendParams& p) {
  PVT_RETURN_IF_ERROR(check_quant_append_params(p));
  const int64_t rows = p.outer * p.inner;
  // A migration quantizes a whole prefill: spread its rows over the pool; one decode token inline.
  if (rows * p.heads * p.head_dim < (1 << 16)) {
    for (int64_t r = 0; r < rows; ++r) quantize_row(p, r / p.inner, r % p.inner);
  } else {
    cpu_parallel_for(rows, [&](int64_t r) { quantize_row(p, r / p.inner, r % p.inner); });
  }
  return Status::Ok();
}

}  // namespace pvt

// Host reads and writes of float32 / float16 / bfloat16 (and bool) values as float, for the host
// kernels of the 8-bit caches (kv_quant_append_cpu.cc, kv_quant_attention_cpu.cc).
#pragma once

#include <cstdint>

#include "decode_attention.h"
#include "float_convert.h"

namespace pvt {
namespace kv_quant {

inline float load_float(const void* base, int64_t i, ScalarType t) {
  switch (t) {
    case ScalarType::kFloat16: return host_float::half_to_float(static_cast<const uint16_t*>(base)[i]);
    case ScalarType::kBFloat16: return host_float::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case ScalarType::kBool: return static_cast<const uint8_t*>(base)[i] ? 1.f : 0.f;
    default: return static_cast<const float*>(base)[i];
  }
}

inline void store_float(void* base, int64_t i, ScalarType t, float v) {
  switch (t) {
    case ScalarType::kFloat16: static_cast<uint16_t*>(base)[i] = host_float::float_to_half(v); return;
    case ScalarType::kBFloat16: static_cast<uint16_t*>(base)[i] = host_float::float_to_bf16(v); return;
    default: static_cast<float*>(base)[i] = v; return;
  }
}

}  // namespace kv_quant
}  // namespace pvt

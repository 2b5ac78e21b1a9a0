// 8-bit KV cache codes, written once for both backends: the host kernels and the CUDA kernels call
// these same functions, so what the append writes and what the attention reads cannot drift.
//
//   float8_e4m3fn  1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinity, S.1111.111 is NaN, so
//                  the largest finite value is 448. value = decode(code) * scale, scale per kv head
//                  (per layer, for K and for V): vLLM's k_scale / v_scale.
//   int8           value = code * scale, code in [-127, 127], scale per token and head = amax / 127
//                  over that token's head_dim values (PaddleNLP's dynamic int8).
//
// Encoding rules (tests/test_quant.py has an independent numpy encoder of the same rules):
//   x / scale is computed in float32 (IEEE division), then rounded to nearest, ties to even;
//   fp8: |x / scale| >= 448 (and +-inf) saturates to +-448; NaN gives 0x7F with x's sign bit;
//   int8: clamped to [-127, 127]; NaN gives 0; a zero scale (an all-zero token) gives code 0.
// Compiled as __host__ __device__ under nvcc, as plain inline functions otherwise.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define PVT_QUANT_HD __host__ __device__ __forceinline__
#else
#define PVT_QUANT_HD inline
#endif

namespace pvt {

// The cache's element type; the values are what the adapter and the tests pass around.
enum class KvQuant : int { kNone = 0, kFp8E4M3 = 1, kInt8 = 2 };

constexpr float kFp8E4M3Max = 448.f;
constexpr float kInt8Max = 127.f;

namespace kv_quant {

PVT_QUANT_HD uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

PVT_QUANT_HD float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// float32 -> e4m3fn code: saturating, round to nearest even, NaN -> sign | 0x7F.
PVT_QUANT_HD uint8_t fp8_e4m3_encode(float x) {
  const uint32_t u = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;  // |x| as bits: ordered like the values
  if (a > 0x7f800000u) return sign | 0x7f;               // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;              // |x| >= 448 (and inf): saturate
  const int32_t e = static_cast<int32_t>(a >> 23) - 127;  // unbiased float32 exponent
  if (e < -6) {
    // Subnormal range of e4m3 (and zero): code = round(|x| * 2^9), in units of 2^-9; a result of 8
    // is the smallest normal 2^-6, whose code is 0x08 too. |x| < 2^-10 (half the smallest
    // subnormal, float32 subnormals included) rounds to zero; else the shift below is 21..24.
    if (e < -10) return sign;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;      // 24-bit significand of a normal float32
    const int32_t shift = 23 - (e + 9);                   // value * 2^9 = m * 2^(e + 9 - 23)
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return sign | static_cast<uint8_t>(r);
  }
  // Normal: keep 3 of 23 mantissa bits, ties to even; a carry into the exponent is the next binade.
  const uint32_t m = a & 0x7fffffu;
  const uint32_t q = m >> 20, rem = m & 0xfffffu, half = 0x80000u;
  const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  const uint32_t code = (static_cast<uint32_t>(e + 7) << 3) + r;  // r == 8 carries into the exponent
  return sign | static_cast<uint8_t>(code > 0x7eu ? 0x7eu : code);
}

// e4m3fn code -> float32 (exact).
PVT_QUANT_HD float fp8_e4m3_decode(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xfu, m = c & 0x7u;
  if (e == 0xfu && m == 0x7u) return bits_float(sign | 0x7fc00000u);  // NaN
  if (e == 0) {
    const float v = static_cast<float>(m) * 0.001953125f;  // m * 2^-9, exact
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 120u) << 23) | (m << 20));  // exponent e - 7 + 127
}

// Round to nearest even (the default rounding mode on the host), clamp to [-127, 127]; NaN -> 0.
PVT_QUANT_HD int8_t int8_round(float x) {
  if (!(x == x)) return 0;
  if (x >= kInt8Max) return 127;
  if (x <= -kInt8Max) return -127;
#ifdef __CUDA_ARCH__
  return static_cast<int8_t>(__float2int_rn(x));
#else
  return static_cast<int8_t>(std::nearbyint(x));
#endif
}

// The code of x under `scale` (> 0 for fp8; >= 0 for int8, 0 meaning an all-zero token).
PVT_QUANT_HD uint8_t fp8_quantize(float x, float scale) { return fp8_e4m3_encode(x / scale); }
PVT_QUANT_HD int8_t int8_quantize(float x, float scale) { return scale > 0.f ? int8_round(x / scale) : 0; }

}  // namespace kv_quant
}  // namespace pvt

// The AVX2 + FMA + F16C build of the attention inner loop (cpu_attention_tile.h), 8 floats a
// vector. The target is set for this file only (no global -m flag): the library still loads on
// CPUs without AVX2, and decode_attention_cpu.cc calls this only where the CPU has it.
#if defined(__x86_64__) || defined(__i386__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif
#include <immintrin.h>

#include "cpu_attention_simd_exp.h"
#include "cpu_attention_tile.h"

namespace pvt {
namespace cpu_attention {
namespace {

struct Avx2 {
  using T = __m256;
  static constexpr int64_t W = 8;
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static T load_bf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static void store(float* p, T x) { _mm256_storeu_ps(p, x); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static float reduce_add(T a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(T a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static T round(T x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static T pow2(T n) {  // 2^n for integral n in [-126, 127]
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static T zero_below(T y, T x, T lo) { return _mm256_and_ps(y, _mm256_cmp_ps(x, lo, _CMP_GE_OQ)); }
  static T exp(T x) { return exp_nonpositive<Avx2>(x); }
  static float exp1(float x) { return _mm256_cvtss_f32(exp(_mm256_set1_ps(x))); }
};

}  // namespace

void run_item_avx2(const Item& it) { run_item_impl<Avx2>(it); }

}  // namespace cpu_attention
}  // namespace pvt
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else  // not x86: never selected
#include "cpu_attention_item.h"
namespace pvt {
namespace cpu_attention {
void run_item_avx2(const Item& it) { run_item_scalar(it); }
}  // namespace cpu_attention
}  // namespace pvt
#endif

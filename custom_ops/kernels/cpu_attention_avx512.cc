// The AVX-512F build of the attention inner loop (cpu_attention_tile.h), 16 floats a vector.
// The target is set for this file only (no global -m flag): the library still loads on CPUs
// without AVX-512, and decode_attention_cpu.cc calls this only where the CPU has it.
#if defined(__x86_64__) || defined(__i386__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx2,fma,f16c")
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports inside the system header (a known false positive); nothing here reads such a value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "cpu_attention_simd_exp.h"
#include "cpu_attention_tile.h"

namespace pvt {
namespace cpu_attention {
namespace {

struct Avx512 {
  using T = __m512;
  static constexpr int64_t W = 16;
  static T zero() { return _mm512_setzero_ps(); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static T load_bf16(const uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static void store(float* p, T x) { _mm512_storeu_ps(p, x); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static float reduce_add(T a) {  // halves down to 128 bits, then within
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(T a) {
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(a),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static T round(T x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static T pow2(T n) {  // 2^n for integral n in [-126, 127]
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static T zero_below(T y, T x, T lo) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), y); }
  static T exp(T x) { return exp_nonpositive<Avx512>(x); }
  static float exp1(float x) { return _mm_cvtss_f32(_mm512_castps512_ps128(exp(_mm512_set1_ps(x)))); }
};

}  // namespace

void run_item_avx512(const Item& it) { run_item_impl<Avx512>(it); }

}  // namespace cpu_attention
}  // namespace pvt
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else  // not x86: never selected
#include "cpu_attention_item.h"
namespace pvt {
namespace cpu_attention {
void run_item_avx512(const Item& it) { run_item_scalar(it); }
}  // namespace cpu_attention
}  // namespace pvt
#endif

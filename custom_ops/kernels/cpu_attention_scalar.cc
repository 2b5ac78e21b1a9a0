// The portable build of the attention inner loop (cpu_attention_tile.h): one float per "vector".
// Used where neither AVX-512 nor AVX2 is available (or PADDLE_VTENSOR_CPU_ISA=scalar).
#include <cmath>
#include <cstring>

#include "cpu_attention_tile.h"

namespace pvt {
namespace cpu_attention {
namespace {

struct Scalar {
  using T = float;
  static constexpr int64_t W = 1;
  static T zero() { return 0.f; }
  static T set1(float x) { return x; }
  static T load(const float* p) { return *p; }
  static T load_f16(const uint16_t* p) { return tile_half_to_float(*p); }
  static T load_bf16(const uint16_t* p) {
    const uint32_t bits = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  static void store(float* p, T x) { *p = x; }
  static T add(T a, T b) { return a + b; }
  static T mul(T a, T b) { return a * b; }
  static T fmadd(T a, T b, T c) { return a * b + c; }
  static T max(T a, T b) { return a > b ? a : b; }
  static float reduce_add(T a) { return a; }
  static float reduce_max(T a) { return a; }
  static T exp(T x) { return std::exp(x); }
  static float exp1(float x) { return std::exp(x); }
};

}  // namespace

void run_item_scalar(const Item& it) { run_item_impl<Scalar>(it); }

}  // namespace cpu_attention
}  // namespace pvt

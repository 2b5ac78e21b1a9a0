// Size products that refuse to wrap. Every byte count the core and the adapter derive from sizes a
// caller gave goes through these: a product that wraps in int64 looks like a valid (small, zero or
// negative) size, and a slot size that wrapped to 0 was once divided by (issue 25).
#pragma once

#include <cstdint>
#include <initializer_list>

namespace pvt {

// a * b into *out; false (and *out unspecified) when the product does not fit in int64.
inline bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// The product of `factors` into *out; false when any partial product does not fit in int64.
inline bool checked_product(std::initializer_list<int64_t> factors, int64_t* out) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (!checked_mul(p, f, &p)) return false;
  }
  *out = p;
  return true;
}

}  // namespace pvt

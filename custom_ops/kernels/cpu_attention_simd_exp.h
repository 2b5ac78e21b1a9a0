// exp(x) for x <= 0 on float vectors (Cephes' single-precision polynomial, about 2 ulp), written
// once over the vector type V of cpu_attention_avx2.cc / cpu_attention_avx512.cc. Below -87.3 (and
// for -inf, the masked keys) the result is exactly 0 rather than a denormal.
#pragma once

namespace pvt {
namespace cpu_attention {
namespace {

template <class V>
typename V::T exp_nonpositive(typename V::T x) {
  using T = typename V::T;
  const T lo = V::set1(-87.33654f);
  const T xc = V::max(x, lo);
  const T n = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
  T r = V::fmadd(n, V::set1(-0.693359375f), xc);
  r = V::fmadd(n, V::set1(2.12194440e-4f), r);
  T y = V::set1(1.9875691500e-4f);
  y = V::fmadd(y, r, V::set1(1.3981999507e-3f));
  y = V::fmadd(y, r, V::set1(8.3334519073e-3f));
  y = V::fmadd(y, r, V::set1(4.1665795894e-2f));
  y = V::fmadd(y, r, V::set1(1.6666665459e-1f));
  y = V::fmadd(y, r, V::set1(5.0000001201e-1f));
  y = V::fmadd(y, V::mul(r, r), V::add(r, V::set1(1.f)));
  return V::zero_below(V::mul(y, V::pow2(n)), x, lo);
}

}  // namespace
}  // namespace cpu_attention
}  // namespace pvt

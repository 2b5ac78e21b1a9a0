// The inner loop of the host decode attention, written once over a vector type V and built once
// per instruction set (cpu_attention_scalar.cc, cpu_attention_avx2.cc, cpu_attention_avx512.cc).
//
// One Item = one batch entry x one range of keys, all its query heads. Keys go in tiles of kTile:
//   1. scores: each key token's row [Hkv, D] is read once, for every query row of every head
//      (rows of one kv head share the K vector: GQA costs no extra reads);
//   2. the causal limit or the mask bias, then an online softmax per row: the running max m and
//      sum l are updated, the accumulator rescaled when m grows;
//   3. values: each value token's row is read once, acc[r] += p[r][s] * v[s].
// K and V are read where they lie as float32, float16 or bfloat16 (16-bit loads widen in
// registers; arithmetic is float32). Strided head dims and D not a multiple of the vector width
// go through a float32 copy of the tile (`convert`).
//
// Everything here has internal linkage and uses no C++ library code, so that the translation
// units built with different -m targets share no inline function the linker could mix up.
#pragma once

#include <cstdint>

#include "cpu_attention_item.h"

namespace pvt {
namespace cpu_attention {
namespace {

constexpr float kNegInf = -__builtin_inff();

// Loops over the NC vectors of a head dim are unrolled so that the key/value stays in registers.
#if defined(__clang__)
#define PVT_UNROLL _Pragma("unroll")
#else
#define PVT_UNROLL _Pragma("GCC unroll 16")
#endif

inline float tile_half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

inline float tile_load_scalar(const void* base, int64_t i, int elem) {
  if (elem == kF32) return static_cast<const float*>(base)[i];
  const uint16_t h = static_cast<const uint16_t*>(base)[i];
  if (elem == kF16) return tile_half_to_float(h);
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// Element pointer type and vector load of each storage type.
template <class V, int E>
struct Ld;
template <class V>
struct Ld<V, kF32> {
  using P = float;
  static typename V::T load(const float* p) { return V::load(p); }
};
template <class V>
struct Ld<V, kF16> {
  using P = uint16_t;
  static typename V::T load(const uint16_t* p) { return V::load_f16(p); }
};
template <class V>
struct Ld<V, kBF16> {
  using P = uint16_t;
  static typename V::T load(const uint16_t* p) { return V::load_bf16(p); }
};

// K or V rows [ts][Hkv][D] of the tile into float32 [ts][Hkv][Dp], zero padded.
inline void convert_tile(const void* base, int64_t s0, int64_t ts, int64_t s_stride, int64_t h_stride,
                         int64_t d_stride, int elem, int64_t hkv, int64_t D, int64_t Dp, float* dst) {
  for (int64_t j = 0; j < ts; ++j) {
    for (int64_t hk = 0; hk < hkv; ++hk) {
      float* row = dst + (j * hkv + hk) * Dp;
      const int64_t off = (s0 + j) * s_stride + hk * h_stride;
      for (int64_t d = 0; d < D; ++d) row[d] = tile_load_scalar(base, off + d * d_stride, elem);
      for (int64_t d = D; d < Dp; ++d) row[d] = 0.f;
    }
  }
}

// Asks for `bytes` at p in the cache ahead of use. The kernel does enough arithmetic per cache line
// that the hardware prefetchers alone leave a cold cache 2-4x off the read floor (issue 14's
// 2x3072x8x32 shape: 1.58 ms cold against 0.40 ms warm); each phase of a tile therefore asks for the
// rows of the next phase (scores: this tile's V; values: the next tile's K). A prefetch never faults.
inline void prefetch_span(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 3);
}

// Keys of `e` in the tile starting at s0 of at most `ts` keys.
inline int64_t keys_in_tile(const EntryWork& e, int64_t s0, int64_t ts) {
  const int64_t n = e.s_end - s0;
  return n <= 0 ? 0 : n < ts ? n : ts;
}

// Scores of `rows` query rows (q, consecutive, Dp apart) against one key vector kp: out[r * kTile].
// NC > 0: the head dim is NC vectors, known at compile time, and the key is held in registers
// (converted from 16 bits once for all rows); NC = 0: any length `nc`.
template <class V, int E, int NC>
inline void score_rows(const float* q, const typename Ld<V, E>::P* kp, int64_t rows, int64_t nc, int64_t Dp,
                       float* out) {
  using T = typename V::T;
  constexpr int64_t W = V::W;
  if constexpr (NC > 0) {
    T kv[NC];
    PVT_UNROLL
    for (int c = 0; c < NC; ++c) kv[c] = Ld<V, E>::load(kp + c * W);
    for (int64_t r = 0; r < rows; ++r, q += Dp) {
      T a0 = V::mul(V::load(q), kv[0]);
      T a1 = NC > 1 ? V::mul(V::load(q + W), kv[NC > 1 ? 1 : 0]) : V::zero();
      PVT_UNROLL
      for (int c = 2; c + 1 < NC; c += 2) {
        a0 = V::fmadd(V::load(q + c * W), kv[c], a0);
        a1 = V::fmadd(V::load(q + (c + 1) * W), kv[c + 1], a1);
      }
      out[r * kTile] = V::reduce_add(V::add(a0, a1));
    }
  } else {
    for (int64_t r = 0; r < rows; ++r, q += Dp) {
      T a0 = V::zero(), a1 = V::zero();
      int64_t c = 0;
      for (; c + 2 <= nc; c += 2) {
        a0 = V::fmadd(V::load(q + c * W), Ld<V, E>::load(kp + c * W), a0);
        a1 = V::fmadd(V::load(q + (c + 1) * W), Ld<V, E>::load(kp + (c + 1) * W), a1);
      }
      if (c < nc) a0 = V::fmadd(V::load(q + c * W), Ld<V, E>::load(kp + c * W), a0);
      out[r * kTile] = V::reduce_add(V::add(a0, a1));
    }
  }
}

// acc[r] += p[r * kTile] * v for `rows` rows (acc rows Dp apart); the value held in registers when NC > 0.
template <class V, int E, int NC>
inline void accumulate_rows(const float* p, const typename Ld<V, E>::P* vp, int64_t rows, int64_t nc, int64_t Dp,
                            float* acc) {
  using T = typename V::T;
  constexpr int64_t W = V::W;
  if constexpr (NC > 0) {
    T vv[NC];
    PVT_UNROLL
    for (int c = 0; c < NC; ++c) vv[c] = Ld<V, E>::load(vp + c * W);
    for (int64_t r = 0; r < rows; ++r, acc += Dp) {
      const float w = p[r * kTile];
      if (w == 0.f) continue;  // masked key
      const T wv = V::set1(w);
      PVT_UNROLL
    for (int c = 0; c < NC; ++c) V::store(acc + c * W, V::fmadd(wv, vv[c], V::load(acc + c * W)));
    }
  } else {
    for (int64_t r = 0; r < rows; ++r, acc += Dp) {
      const float w = p[r * kTile];
      if (w == 0.f) continue;
      const T wv = V::set1(w);
      for (int64_t c = 0; c < nc; ++c) V::store(acc + c * W, V::fmadd(wv, Ld<V, E>::load(vp + c * W), V::load(acc + c * W)));
    }
  }
}

// Two keys at once (NC > 0): each query row and accumulator goes through registers once per key
// pair instead of once per key, halving the L1 traffic that bounds grouped-query heads.
template <class V, int E, int NC>
inline void score_rows2(const float* q, const typename Ld<V, E>::P* k0, const typename Ld<V, E>::P* k1,
                        int64_t rows, int64_t Dp, float* out) {
  using T = typename V::T;
  constexpr int64_t W = V::W;
  T ka[NC], kb[NC];
  PVT_UNROLL
  for (int c = 0; c < NC; ++c) {
    ka[c] = Ld<V, E>::load(k0 + c * W);
    kb[c] = Ld<V, E>::load(k1 + c * W);
  }
  for (int64_t r = 0; r < rows; ++r, q += Dp) {
    T a = V::zero(), b = V::zero();
    PVT_UNROLL
    for (int c = 0; c < NC; ++c) {
      const T qc = V::load(q + c * W);
      a = V::fmadd(qc, ka[c], a);
      b = V::fmadd(qc, kb[c], b);
    }
    out[r * kTile] = V::reduce_add(a);
    out[r * kTile + 1] = V::reduce_add(b);
  }
}

template <class V, int E, int NC>
inline void accumulate_rows2(const float* p, const typename Ld<V, E>::P* v0, const typename Ld<V, E>::P* v1,
                             int64_t rows, int64_t Dp, float* acc) {
  using T = typename V::T;
  constexpr int64_t W = V::W;
  T va[NC], vb[NC];
  PVT_UNROLL
  for (int c = 0; c < NC; ++c) {
    va[c] = Ld<V, E>::load(v0 + c * W);
    vb[c] = Ld<V, E>::load(v1 + c * W);
  }
  for (int64_t r = 0; r < rows; ++r, acc += Dp) {
    const T wa = V::set1(p[r * kTile]), wb = V::set1(p[r * kTile + 1]);
    PVT_UNROLL
    for (int c = 0; c < NC; ++c) V::store(acc + c * W, V::fmadd(wb, vb[c], V::fmadd(wa, va[c], V::load(acc + c * W))));
  }
}

template <class V, int E, int NC>
void run_item_typed(const Item& it) {
  using T = typename V::T;
  using P = typename Ld<V, E>::P;
  constexpr int64_t W = V::W;
  const int64_t hkv = it.kv_heads, Dp = it.padded_dim, nc = Dp / W;
  float* ktile = nullptr;
  float* vtile = nullptr;
  if (it.convert) {  // one entry; its scores first, then the converted tiles
    ktile = it.scratch + hkv * it.group * it.entries[0].q_count * kTile;
    vtile = ktile + kTile * hkv * Dp;
  }
  for (int64_t ei = 0; ei < it.n_entries; ++ei) {
    const EntryWork& e = it.entries[ei];
    const int64_t rows = hkv * it.group * e.q_count;
    for (int64_t r = 0; r < rows; ++r) {
      e.m[r] = kNegInf;
      e.l[r] = 0.f;
      for (int64_t d = 0; d < Dp; ++d) e.acc[r * Dp + d] = 0.f;
    }
  }
  const P* conv_k = reinterpret_cast<const P*>(ktile);
  const P* conv_v = reinterpret_cast<const P*>(vtile);

  for (int64_t s0 = it.s_begin; s0 < it.s_end; s0 += kTile) {
    const int64_t ts = it.s_end - s0 < kTile ? it.s_end - s0 : kTile;
    if (it.convert) {
      const EntryWork& e = it.entries[0];
      const int64_t n = keys_in_tile(e, s0, ts);
      convert_tile(e.k, s0, n, it.k_s, it.k_h, it.k_d, it.elem, hkv, it.head_dim, Dp, ktile);
      convert_tile(e.v, s0, n, it.v_s, it.v_h, it.v_d, it.elem, hkv, it.head_dim, Dp, vtile);
    }
    const int64_t ks = it.convert ? hkv * Dp : it.k_s, kh = it.convert ? Dp : it.k_h;
    const int64_t vs = it.convert ? hkv * Dp : it.v_s, vh = it.convert ? Dp : it.v_h;
    // 1. Scores: token row by token row, each entry's [Hkv, D] part once for all its heads.
    for (int64_t j = 0; j < ts; ++j) {
      for (int64_t ei = 0; ei < it.n_entries; ++ei) {
        const EntryWork& e = it.entries[ei];
        if (s0 + j >= e.s_end) continue;
        const int64_t per_kv = it.group * e.q_count;
        const P* krow = (it.convert ? conv_k + (j * ks) : static_cast<const P*>(e.k) + (s0 + j) * ks);
        if (!it.convert) {  // this tile's value row j, for phase 3
          const P* vrow = static_cast<const P*>(e.v) + (s0 + j) * it.v_s;
          for (int64_t hk = 0; hk < hkv; ++hk) prefetch_span(vrow + hk * it.v_h, it.head_dim * sizeof(P));
        }
        if (NC > 0 && (j & 1) == 0 && s0 + j + 1 < e.s_end && j + 1 < ts) {  // keys j and j + 1
          for (int64_t hk = 0; hk < hkv; ++hk) {
            score_rows2<V, E, NC>(e.q + hk * per_kv * Dp, krow + hk * kh, krow + ks + hk * kh, per_kv, Dp,
                                  it.scratch + e.scores_at + hk * per_kv * kTile + j);
          }
          continue;
        }
        if (NC > 0 && (j & 1) == 1 && s0 + j < e.s_end && j >= 1) continue;  // done with j - 1
        for (int64_t hk = 0; hk < hkv; ++hk) {
          const P* kp = krow + hk * kh;
          score_rows<V, E, NC>(e.q + hk * per_kv * Dp, kp, per_kv, nc, Dp,
                               it.scratch + e.scores_at + hk * per_kv * kTile + j);
        }
      }
    }
    // 2. Mask bias or causal limit, then the online softmax of each row.
    for (int64_t ei = 0; ei < it.n_entries; ++ei) {
      const EntryWork& e = it.entries[ei];
      const int64_t n = keys_in_tile(e, s0, ts);
      const int64_t tq = e.q_count, rows = hkv * it.group * tq;
      const int64_t causal0 = e.kv_count - tq + 1;  // query t sees keys s < causal0 + t
      for (int64_t r = 0; r < rows; ++r) {
        float* sr = it.scratch + e.scores_at + r * kTile;
        if (n == 0) {
          for (int64_t j = 0; j < kTile; ++j) sr[j] = 0.f;
          continue;
        }
        const int64_t h = r / tq, t = r % tq;
        if (e.bias != nullptr) {
          const float* br = e.bias + h * e.bias_h + t * e.bias_t + s0;
          for (int64_t j = 0; j < n; ++j) sr[j] += br[j];
        } else if (s0 + n > causal0 + t) {
          for (int64_t j = causal0 + t - s0 < 0 ? 0 : causal0 + t - s0; j < n; ++j) sr[j] = kNegInf;
        }
        for (int64_t j = n; j < kTile; ++j) sr[j] = kNegInf;
        T mv = V::load(sr);
        for (int64_t j = W; j < kTile; j += W) mv = V::max(mv, V::load(sr + j));
        const float tile_max = V::reduce_max(mv);
        const float m_old = e.m[r];
        const float m_new = tile_max > m_old ? tile_max : m_old;
        if (m_new == kNegInf) {  // nothing visible yet: no weight anywhere
          for (int64_t j = 0; j < kTile; ++j) sr[j] = 0.f;
          continue;
        }
        if (m_new > m_old && m_old != kNegInf) {
          const float alpha = V::exp1(m_old - m_new);
          e.l[r] *= alpha;
          const T a = V::set1(alpha);
          float* ar = e.acc + r * Dp;
          for (int64_t c = 0; c < nc; ++c) V::store(ar + c * W, V::mul(a, V::load(ar + c * W)));
        }
        e.m[r] = m_new;
        const T neg_m = V::set1(-m_new);
        T sum = V::zero();
        for (int64_t j = 0; j < kTile; j += W) {
          const T p = V::exp(V::add(V::load(sr + j), neg_m));
          V::store(sr + j, p);
          sum = V::add(sum, p);
        }
        e.l[r] += V::reduce_add(sum);
      }
    }
    // 3. Values: token row by token row, each entry's part once for all its heads.
    for (int64_t j = 0; j < ts; ++j) {
      for (int64_t ei = 0; ei < it.n_entries; ++ei) {
        const EntryWork& e = it.entries[ei];
        if (s0 + j >= e.s_end) continue;
        const int64_t per_kv = it.group * e.q_count;
        const P* vrow = (it.convert ? conv_v + (j * vs) : static_cast<const P*>(e.v) + (s0 + j) * vs);
        if (!it.convert && s0 + ts + j < e.s_end) {  // the next tile's key row j, for its phase 1
          const P* knext = static_cast<const P*>(e.k) + (s0 + ts + j) * it.k_s;
          for (int64_t hk = 0; hk < hkv; ++hk) prefetch_span(knext + hk * it.k_h, it.head_dim * sizeof(P));
        }
        if (NC > 0 && (j & 1) == 0 && s0 + j + 1 < e.s_end && j + 1 < ts) {  // keys j and j + 1
          for (int64_t hk = 0; hk < hkv; ++hk) {
            accumulate_rows2<V, E, NC>(it.scratch + e.scores_at + hk * per_kv * kTile + j, vrow + hk * vh,
                                       vrow + vs + hk * vh, per_kv, Dp, e.acc + hk * per_kv * Dp);
          }
          continue;
        }
        if (NC > 0 && (j & 1) == 1 && s0 + j < e.s_end && j >= 1) continue;  // done with j - 1
        for (int64_t hk = 0; hk < hkv; ++hk) {
          const P* vp = vrow + hk * vh;
          accumulate_rows<V, E, NC>(it.scratch + e.scores_at + hk * per_kv * kTile + j, vp, per_kv, nc, Dp,
                                    e.acc + hk * per_kv * Dp);
        }
      }
    }
  }
}

// The entry point of one instruction-set build.
// Head dims of 1, 2, 4 or 8 vectors (32, 64, 128 floats with AVX-512) get the register-held loop.
template <class V, int E>
void run_item_sized(const Item& it) {
  switch (it.padded_dim / V::W) {
    case 1: return run_item_typed<V, E, 1>(it);
    case 2: return run_item_typed<V, E, 2>(it);
    case 4: return run_item_typed<V, E, 4>(it);
    case 8: return run_item_typed<V, E, 8>(it);
    default: return run_item_typed<V, E, 0>(it);
  }
}

template <class V>
void run_item_impl(const Item& it) {
  if (it.convert) {
    run_item_sized<V, kF32>(it);  // the tile is float32 after conversion
  } else if (it.elem == kF16) {
    run_item_sized<V, kF16>(it);
  } else if (it.elem == kBF16) {
    run_item_sized<V, kBF16>(it);
  } else {
    run_item_sized<V, kF32>(it);
  }
}

}  // namespace
}  // namespace cpu_attention
}  // namespace pvt

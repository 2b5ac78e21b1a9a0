// Test helpers for decode attention: 16-bit encodings written independently of the kernel's own
// conversions (the compiler's _Float16 and a bf16 truncation), and a float64 reference of the
// variable-length decode attention contract in kernels/decode_attention.h, element by element.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace pvt_test {

enum class Elem { kF32, kF16, kBF16 };

inline int64_t elem_size(Elem e) { return e == Elem::kF32 ? 4 : 2; }

// The value `x` becomes after storing it as `e` (what both sides then compute with).
inline float round_to(Elem e, float x) {
  if (e == Elem::kF16) return static_cast<float>(static_cast<_Float16>(x));
  if (e == Elem::kBF16) {  // truncation: every test value is then exactly a bf16
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    bits &= 0xffff0000u;
    std::memcpy(&x, &bits, 4);
  }
  return x;
}

inline void put(std::vector<uint8_t>* buf, int64_t i, Elem e, float x) {
  if (e == Elem::kF32) {
    std::memcpy(buf->data() + i * 4, &x, 4);
  } else if (e == Elem::kF16) {
    const _Float16 h = static_cast<_Float16>(x);
    std::memcpy(buf->data() + i * 2, &h, 2);
  } else {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    const uint16_t top = static_cast<uint16_t>(bits >> 16);
    std::memcpy(buf->data() + i * 2, &top, 2);
  }
}

inline float get(const uint8_t* buf, int64_t i, Elem e) {
  float x;
  if (e == Elem::kF32) {
    std::memcpy(&x, buf + i * 4, 4);
  } else if (e == Elem::kF16) {
    _Float16 h;
    std::memcpy(&h, buf + i * 2, 2);
    x = static_cast<float>(h);
  } else {
    uint16_t top;
    std::memcpy(&top, buf + i * 2, 2);
    const uint32_t bits = static_cast<uint32_t>(top) << 16;
    std::memcpy(&x, &bits, 4);
  }
  return x;
}

// The inputs of one varlen attention call, as plain float values (already rounded to the dtype).
//   q:  [rows, Hq, D] packed query rows; entry b owns rows first[b] .. first[b] + q_count[b] - 1
//   k/v: [cap, cache_rows, Hkv, D] seq-major caches
struct AttentionProblem {
  int64_t Hq = 0, Hkv = 0, D = 0, cap = 0, cache_rows = 0;
  float scale = 0.f;
  std::vector<int64_t> first, q_count, slot, kv_count;  // per entry
  std::vector<int64_t> mapped;                          // per cache row; empty: all mapped
  std::vector<float> q, k, v;
};

// out [rows, Hq, D] and lse [rows, Hq] in float64; refused entries give zeros and -inf.
// Returns whether any entry was refused (the kernel's error_flag).
inline bool reference_attention(const AttentionProblem& p, std::vector<double>* out,
                                 std::vector<double>* lse) {
  int64_t rows = 0;
  for (size_t b = 0; b < p.first.size(); ++b) rows = std::max(rows, p.first[b] + p.q_count[b]);
  out->assign(static_cast<size_t>(rows * p.Hq * p.D), 0.0);
  lse->assign(static_cast<size_t>(rows * p.Hq), -std::numeric_limits<double>::infinity());
  bool refused_any = false;
  const int64_t G = p.Hq / p.Hkv;
  for (size_t b = 0; b < p.first.size(); ++b) {
    const int64_t n = p.kv_count[b], qc = p.q_count[b], slot = p.slot[b];
    if (!p.mapped.empty() && n > p.mapped[slot]) {
      refused_any = true;
      continue;
    }
    for (int64_t t = 0; t < qc; ++t) {
      const int64_t row = p.first[b] + t, visible = n - qc + t + 1;
      for (int64_t h = 0; h < p.Hq; ++h) {
        const int64_t hk = h / G;
        std::vector<double> score(static_cast<size_t>(visible));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t s = 0; s < visible; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < p.D; ++d) {
            dot += double(p.q[(row * p.Hq + h) * p.D + d]) *
                   double(p.k[((s * p.cache_rows + slot) * p.Hkv + hk) * p.D + d]);
          }
          score[s] = dot * p.scale;
          mx = std::max(mx, score[s]);
        }
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - mx));
        for (int64_t s = 0; s < visible; ++s) {
          for (int64_t d = 0; d < p.D; ++d) {
            (*out)[(row * p.Hq + h) * p.D + d] +=
                score[s] / sum * double(p.v[((s * p.cache_rows + slot) * p.Hkv + hk) * p.D + d]);
          }
        }
        (*lse)[row * p.Hq + h] = mx + std::log(sum);
      }
    }
  }
  return refused_any;
}

}  // namespace pvt_test

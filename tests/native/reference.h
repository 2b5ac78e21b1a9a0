// Test helpers: token sources in arbitrary physical layouts, and an element-by-element reference
// append written independently of the kernels under test.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace pvt_test {

// Logical [batch, tokens, heads, head_dim] tokens stored in some physical order.
struct Source {
  std::vector<uint8_t> bytes;  // the whole physical buffer; tokens start at offset_elems
  int64_t dims[4] = {0, 0, 0, 0};
  int64_t stride[4] = {0, 0, 0, 0};  // in elements, for (b, t, h, d)
  int64_t offset_elems = 0;
  int64_t elem_bytes = 0;
  const uint8_t* data() const { return bytes.data() + offset_elems * elem_bytes; }
};

// `perm` lists the logical dims (0=b, 1=t, 2=h, 3=d) outermost first; the innermost physical dim
// is padded by `pad` elements; the tokens start `offset` elements into the buffer (misalignment).
inline Source make_source(int64_t b, int64_t t, int64_t h, int64_t d, int64_t eb,
                          std::array<int, 4> perm, int64_t pad, int64_t offset, std::mt19937& rng) {
  Source s;
  s.dims[0] = b; s.dims[1] = t; s.dims[2] = h; s.dims[3] = d;
  s.elem_bytes = eb;
  s.offset_elems = offset;
  int64_t step = 1;
  for (int k = 3; k >= 0; --k) {
    s.stride[perm[k]] = step;
    step *= s.dims[perm[k]] + (k == 3 ? pad : 0);
  }
  s.bytes.resize(static_cast<size_t>((step + offset) * eb));
  for (auto& x : s.bytes) x = static_cast<uint8_t>(rng());
  return s;
}

inline const std::array<int, 4> kContiguous = {0, 1, 2, 3};   // [B, T, H, D]
inline const std::array<int, 4> kHeadsMajor = {0, 2, 1, 3};   // [B, H, T, D] seen as [B, T, H, D]
inline const std::array<int, 4> kDimStrided = {0, 1, 3, 2};   // [B, T, D, H]: head_dim stride H
inline const std::array<int, 4> kSeqMajor = {1, 0, 2, 3};     // [T, B, H, D]

// cache (seq-major [capacity, B, H, D] bytes) <- src at token position `pos`.
inline void reference_append(std::vector<uint8_t>* cache, const Source& src, int64_t pos) {
  const int64_t B = src.dims[0], T = src.dims[1], H = src.dims[2], D = src.dims[3];
  const int64_t eb = src.elem_bytes;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t from = b * src.stride[0] + t * src.stride[1] + h * src.stride[2] + d * src.stride[3];
          const int64_t to = (((pos + t) * B + b) * H + h) * D + d;
          std::memcpy(cache->data() + to * eb, src.data() + from * eb, static_cast<size_t>(eb));
        }
}

// First differing byte in [0, n), or -1.
inline int64_t first_diff(const uint8_t* a, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace pvt_test

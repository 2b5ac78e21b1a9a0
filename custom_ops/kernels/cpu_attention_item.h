// The unit of work of the host decode attention (decode_attention_cpu.cc plans it, one
// instruction-set build of cpu_attention_tile.h runs it): one batch entry against one range of its
// keys, all query heads at once. Plain data only: this header is included by translation units
// compiled for different instruction sets, which must share no inline C++ library code.
#pragma once

#include <cstdint>

namespace pvt {
namespace cpu_attention {

enum Elem : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// One entry's part of an item.
struct EntryWork {
  const void* k = nullptr;          // K and V at token 0 of the entry's slot
  const void* v = nullptr;
  int64_t q_count = 0;              // Tq of this entry; rows = q_heads * q_count, row r = h * Tq + t
  int64_t kv_count = 0;             // keys of the entry (causal limit: query t sees s < n - Tq + t + 1)
  int64_t s_end = 0;                // min(item's s_end, kv_count)
  const float* q = nullptr;         // [rows][Dp], scaled by `scale`, zero padded
  // Optional additive bias (the mask): bias[h * bias_h + t * bias_t + s]; null: causal.
  const float* bias = nullptr;
  int64_t bias_h = 0, bias_t = 0;
  int64_t scores_at = 0;            // its [rows][kTile] scores in the item's scratch
  // Outputs over the item's keys: running max, sum of exp and unnormalised output per row.
  float* m = nullptr;    // [rows]
  float* l = nullptr;    // [rows]
  float* acc = nullptr;  // [rows][Dp]
};

// A range of keys for a group of consecutive entries: the tile loop walks token rows and, within
// each, the entries' slots in order, so the fixed-length case reads the seq-major cache
// front to back (whole [B, Hkv, D] token rows) rather than one slot's 1/B of each row at a stride.
struct Item {
  int64_t k_s = 0, k_h = 0, k_d = 0;  // strides in elements for (s, h, d)
  int64_t v_s = 0, v_h = 0, v_d = 0;
  int elem = kF32;
  bool convert = false;   // true: K/V rows go through a float32 scratch (strided d or D % width); one entry
  int64_t kv_heads = 0, group = 0;  // query heads per kv head
  int64_t head_dim = 0;             // D; padded_dim (Dp) is D rounded up to the vector width
  int64_t padded_dim = 0;
  int64_t s_begin = 0, s_end = 0;   // this item's keys
  const EntryWork* entries = nullptr;
  int64_t n_entries = 0;
  float* scratch = nullptr;         // scratch_floats(...) floats, this thread's
};

// Keys per tile: scores of one tile for all rows fit in L1/L2 next to the accumulators.
constexpr int64_t kTile = 64;

// Scratch of an item: the scores of all its rows, plus converted K and V tiles when converting.
inline int64_t scratch_floats(int64_t rows, bool convert, int64_t kv_heads, int64_t padded_dim) {
  return rows * kTile + (convert ? 2 * kTile * kv_heads * padded_dim : 0);
}

// One build per instruction set; all compute the same thing (decode_attention_cpu.cc picks).
void run_item_scalar(const Item& it);
void run_item_avx2(const Item& it);    // needs avx2, fma, f16c
void run_item_avx512(const Item& it);  // needs avx512f
// Vector widths in floats of the builds above.
constexpr int64_t kWidthScalar = 1, kWidthAvx2 = 8, kWidthAvx512 = 16;

}  // namespace cpu_attention
}  // namespace pvt

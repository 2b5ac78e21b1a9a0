// Host decode attention over an 8-bit cache (kv_quant_attention.h). One task per (batch entry,
// kv head) walks the entry's keys once: each K and V row is decoded into a head_dim float buffer
// on the stack (registers and L1, never a copy of the cache), scored against every query row of
// the head group with an online softmax, float32 throughout.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu_thread_pool.h"
#include "kv_quant_attention.h"
#include "kv_quant_host_io.h"

namespace pvt {
namespace {

using kv_quant::load_float;
using kv_quant::store_float;

// One code row of head_dim values into floats (the scale is applied to the score / weight).
void decode_row(const void* codes, int64_t at, int64_t n, KvQuant kind, float* dst) {
  if (kind == KvQuant::kFp8E4M3) {
    const uint8_t* c = static_cast<const uint8_t*>(codes) + at;
    for (int64_t d = 0; d < n; ++d) dst[d] = kv_quant::fp8_e4m3_decode(c[d]);
  } else {
    const int8_t* c = static_cast<const int8_t*>(codes) + at;
    for (int64_t d = 0; d < n; ++d) dst[d] = static_cast<float>(c[d]);
  }
}

// What batch entry b reads and writes (decode_attention.h: the variable-length fields).
struct Span {
  int64_t q_count, kv_count, row, first_q;
};

Span span_of(const DecodeAttentionParams& a, int64_t b) {
  Span e;
  e.first_q = a.cu_seqlens_q ? a.cu_seqlens_q[b] : b * a.q_len;
  e.q_count = a.cu_seqlens_q ? a.cu_seqlens_q[b + 1] - a.cu_seqlens_q[b] : a.q_len;
  e.row = a.kv_batch_index ? a.kv_batch_index[b] : b;
  e.kv_count = a.cache_seqlens ? a.cache_seqlens[e.row] + e.q_count : a.kv_len;
  return e;
}

// The host reads the int32 arrays itself: every entry is checked before anything is written.
Status check_spans(const DecodeAttentionParams& a) {
  for (int64_t b = 0; b < a.batch; ++b) {
    if (a.cu_seqlens_q && (a.cu_seqlens_q[b] < 0 || a.cu_seqlens_q[b + 1] < a.cu_seqlens_q[b])) {
      return Status(Code::kInvalidArgument, "quant_attention: cu_seqlens_q must be non-negative and non-decreasing");
    }
    if (a.kv_batch_index && a.kv_batch_index[b] < 0) {
      return Status(Code::kInvalidArgument, "quant_attention: kv_batch_index[" + std::to_string(b) + "] is negative");
    }
    const Span e = span_of(a, b);
    const bool bad_len = (a.cache_seqlens && a.cache_seqlens[e.row] < 0) || e.q_count > a.q_len ||
                         e.kv_count > a.kv_len || e.kv_count < e.q_count;
    const bool unmapped = a.kv_mapped && e.kv_count > a.kv_mapped[e.row];
    if (bad_len || unmapped) {
      return Status(Code::kInvalidArgument,
                    "quant_attention: entry " + std::to_string(b) + " attends over " + std::to_string(e.kv_count) +
                        " keys with " + std::to_string(e.q_count) + " queries" +
                        (unmapped ? " past its slot's mapped rows" : "; kv_len and q_len must bound them"));
    }
  }
  return Status::Ok();
}

// Entry b, kv head g: every query row of the group against the entry's keys.
void run_task(const QuantAttentionParams& p, int64_t b, int64_t g) {
  const DecodeAttentionParams& a = p.attn;
  const Span e = span_of(a, b);
  const int64_t D = a.head_dim, group = a.q_heads / a.kv_heads, rows = group * e.q_count;
  if (rows == 0) return;
  std::vector<float> q(rows * D), acc(rows * D, 0.f), kv(2 * D);
  std::vector<float> m(rows, -std::numeric_limits<float>::infinity()), l(rows, 0.f);
  float* krow = kv.data();
  float* vrow = kv.data() + D;
  auto q_at = [&](int64_t r) {  // row r = (head g * group + r / Tq, query r % Tq)
    const int64_t h = g * group + r / e.q_count, t = r % e.q_count;
    return a.cu_seqlens_q ? (e.first_q + t) * a.q_stride[1] + h * a.q_stride[2]
                          : b * a.q_stride[0] + t * a.q_stride[1] + h * a.q_stride[2];
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = q_at(r);
    for (int64_t d = 0; d < D; ++d) q[r * D + d] = load_float(a.q, at + d * a.q_stride[3], a.dtype) * a.scale;
  }
  for (int64_t s = 0; s < e.kv_count; ++s) {
    decode_row(a.k, s * a.k_stride[0] + e.row * a.k_stride[1] + g * a.k_stride[2], D, p.kind, krow);
    decode_row(a.v, s * a.v_stride[0] + e.row * a.v_stride[1] + g * a.v_stride[2], D, p.kind, vrow);
    const float ks = p.k_scale[s * p.k_scale_stride[0] + e.row * p.k_scale_stride[1] + g * p.k_scale_stride[2]];
    const float vs = p.v_scale[s * p.v_scale_stride[0] + e.row * p.v_scale_stride[1] + g * p.v_scale_stride[2]];
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t h = g * group + r / e.q_count, t = r % e.q_count;
      float bias = 0.f;
      if (a.mask != nullptr) {
        const int64_t at = b * a.mask_stride[0] + h * a.mask_stride[1] + t * a.mask_stride[2] + s * a.mask_stride[3];
        const float mv = load_float(a.mask, at, a.mask_type);
        if (a.mask_type == ScalarType::kBool) {
          if (mv == 0.f) continue;
        } else {
          bias = mv;
        }
      } else if (s >= e.kv_count - e.q_count + t + 1) {
        continue;  // causal
      }
      float dot = 0.f;
      const float* qr = q.data() + r * D;
      for (int64_t d = 0; d < D; ++d) dot += qr[d] * krow[d];
      const float score = dot * ks + bias;
      if (score == -std::numeric_limits<float>::infinity()) continue;
      float* ar = acc.data() + r * D;
      if (score > m[r]) {
        const float corr = std::exp(m[r] - score);
        l[r] *= corr;
        for (int64_t d = 0; d < D; ++d) ar[d] *= corr;
        m[r] = score;
      }
      const float w = std::exp(score - m[r]);
      l[r] += w;
      const float wv = w * vs;
      for (int64_t d = 0; d < D; ++d) ar[d] += wv * vrow[d];
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = g * group + r / e.q_count, t = r % e.q_count;
    const int64_t out_at = a.cu_seqlens_q ? (e.first_q + t) * a.out_stride[1] + h * a.out_stride[2]
                                          : b * a.out_stride[0] + t * a.out_stride[1] + h * a.out_stride[2];
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;  // a query that sees no key gets zeros
    for (int64_t d = 0; d < D; ++d) store_float(a.out, out_at + d * a.out_stride[3], a.dtype, acc[r * D + d] * inv);
    if (a.lse != nullptr) {
      a.lse[(e.first_q + t) * a.q_heads + h] =
          l[r] > 0.f ? m[r] + std::log(l[r]) : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace

Status check_quant_attention_params(const QuantAttentionParams& p) {
  PVT_RETURN_IF_ERROR(check_decode_attention_params(p.attn));
  if (p.kind != KvQuant::kFp8E4M3 && p.kind != KvQuant::kInt8) {
    return Status(Code::kInvalidArgument, "quant_attention: the cache must be float8_e4m3fn or int8");
  }
  if (p.k_scale == nullptr || p.v_scale == nullptr) {
    return Status(Code::kInvalidArgument, "quant_attention: k_scale and v_scale must be set");
  }
  return Status::Ok();
}

Status quant_attention_cpu(const QuantAttentionParams& p) {
  PVT_RETURN_IF_ERROR(check_quant_attention_params(p));
  PVT_RETURN_IF_ERROR(check_spans(p.attn));
  const int64_t heads = p.attn.kv_heads;
  cpu_parallel_for(p.attn.batch * heads, [&](int64_t i) { run_task(p, i / heads, i % heads); });
  return Status::Ok();
}

}  // namespace pvt

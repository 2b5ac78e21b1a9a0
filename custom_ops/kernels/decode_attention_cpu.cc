// Host decode attention (and the shared parameter check). For each (batch, kv head) the block of
// query rows that share the kv head (the GQA group times Tq) is scored against each key once, so
// K and V are each read once per step, in place. Two passes (scores, then softmax-weighted V) in
// float32; the score buffer is rows x S floats.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "decode_attention.h"

namespace pvt {
namespace {

// float <-> IEEE half / bfloat16 bits, round to nearest even (no Paddle or CUDA types here).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);  // nan / inf
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: inf
  if (ax < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (ax < 0x33000000u) return sign;  // below half of the smallest subnormal
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // value = m * 2^(e - 150); in units of 2^-24: m >> (126 - e)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = ((ax >> 13) - (112u << 10));
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return sign | static_cast<uint16_t>(r);
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float load(const void* base, int64_t i, ScalarType t) {
  switch (t) {
    case ScalarType::kFloat32: return static_cast<const float*>(base)[i];
    case ScalarType::kFloat16: return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case ScalarType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case ScalarType::kBool: return static_cast<const uint8_t*>(base)[i] ? 1.f : 0.f;
  }
  return 0.f;
}

void store(void* base, int64_t i, ScalarType t, float v) {
  switch (t) {
    case ScalarType::kFloat32: static_cast<float*>(base)[i] = v; return;
    case ScalarType::kFloat16: static_cast<uint16_t*>(base)[i] = float_to_half(v); return;
    case ScalarType::kBFloat16: static_cast<uint16_t*>(base)[i] = float_to_bf16(v); return;
    case ScalarType::kBool: return;  // never an output type (rejected by the check)
  }
}

// One strided row of `n` elements into floats.
void load_row(const void* base, int64_t offset, int64_t stride, int64_t n, ScalarType t, float* dst) {
  if (t == ScalarType::kFloat32 && stride == 1) {
    std::memcpy(dst, static_cast<const float*>(base) + offset, static_cast<size_t>(n) * 4);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = load(base, offset + i * stride, t);
}

float dot(const float* a, const float* b, int64_t n) {
  // Four partial sums: lets the compiler vectorise without -ffast-math.
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

bool is_float_type(ScalarType t) { return t != ScalarType::kBool; }

}  // namespace

const char* scalar_type_name(ScalarType t) {
  switch (t) {
    case ScalarType::kFloat32: return "float32";
    case ScalarType::kFloat16: return "float16";
    case ScalarType::kBFloat16: return "bfloat16";
    case ScalarType::kBool: return "bool";
  }
  return "unknown";
}

Status check_decode_attention_params(const DecodeAttentionParams& p) {
  const std::string op = "decode_attention: ";
  if (p.batch <= 0 || p.q_len <= 0 || p.q_heads <= 0 || p.kv_heads <= 0 || p.head_dim <= 0 ||
      p.kv_len <= 0) {
    return Status(Code::kInvalidArgument,
                  op + "sizes must be positive, got batch=" + std::to_string(p.batch) +
                      " q_len=" + std::to_string(p.q_len) + " q_heads=" + std::to_string(p.q_heads) +
                      " kv_heads=" + std::to_string(p.kv_heads) + " head_dim=" +
                      std::to_string(p.head_dim) + " kv_len=" + std::to_string(p.kv_len));
  }
  if (p.q_heads % p.kv_heads != 0) {
    return Status(Code::kInvalidArgument, op + "q_heads (" + std::to_string(p.q_heads) +
                                              ") must be a multiple of kv_heads (" +
                                              std::to_string(p.kv_heads) + ")");
  }
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.out == nullptr) {
    return Status(Code::kInvalidArgument, op + "q, k, v and out must all be set");
  }
  if (!is_float_type(p.dtype)) {
    return Status(Code::kInvalidArgument, op + "q/k/v must be float32, float16 or bfloat16, got " +
                                              scalar_type_name(p.dtype));
  }
  if (p.mask != nullptr && p.mask_type != ScalarType::kBool && p.mask_type != ScalarType::kFloat32 &&
      p.mask_type != p.dtype) {
    return Status(Code::kInvalidArgument, op + "the mask must be bool, float32 or " +
                                              scalar_type_name(p.dtype) + " (the dtype of q), got " +
                                              scalar_type_name(p.mask_type));
  }
  const bool varlen = p.cu_seqlens_q || p.kv_batch_index || p.cache_seqlens || p.kv_mapped;
  if (p.mask != nullptr && varlen) {
    return Status(Code::kInvalidArgument,
                  op + "a mask cannot be combined with cu_seqlens_q, kv_batch_index, cache_seqlens or "
                       "kv_mapped (the variable-length path is causal per entry)");
  }
  // With cu_seqlens_q, q_len only bounds the query counts; each entry is checked against its own.
  if (p.mask == nullptr && p.cu_seqlens_q == nullptr && p.kv_len < p.q_len) {
    return Status(Code::kInvalidArgument,
                  op + "without a mask the attention is causal and needs kv_len >= q_len, got kv_len=" +
                      std::to_string(p.kv_len) + " q_len=" + std::to_string(p.q_len));
  }
  if (!(std::isfinite(p.scale))) {
    return Status(Code::kInvalidArgument, op + "scale must be finite");
  }
  return Status::Ok();
}

namespace {

// One batch entry's view of the variable-length fields (decode_attention.h has the contract).
struct Entry {
  int64_t q_count = 0;     // its query rows
  int64_t kv_count = 0;    // keys it attends over (n_b); query t sees keys s < kv_count - q_count + t + 1
  int64_t slot = 0;        // the cache row it reads
  int64_t first_row = 0;   // its first query row: b * Tq, or cu_seqlens_q[b] (lse index)
  int64_t q_offset = 0;    // element offset of its query t = 0, head 0 (add t * q_stride[1])
  int64_t out_offset = 0;  // likewise in out
};

Entry entry(const DecodeAttentionParams& p, int64_t b) {
  Entry e;
  if (p.cu_seqlens_q != nullptr) {
    e.first_row = p.cu_seqlens_q[b];
    e.q_count = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    e.q_offset = e.first_row * p.q_stride[1];
    e.out_offset = e.first_row * p.out_stride[1];
  } else {
    e.first_row = b * p.q_len;
    e.q_count = p.q_len;
    e.q_offset = b * p.q_stride[0];
    e.out_offset = b * p.out_stride[0];
  }
  e.slot = p.kv_batch_index != nullptr ? p.kv_batch_index[b] : b;
  e.kv_count = p.cache_seqlens != nullptr ? p.cache_seqlens[e.slot] + e.q_count : p.kv_len;
  return e;
}

// The host reads the int32 arrays directly, so every value is checked before anything is written.
Status check_varlen_values(const DecodeAttentionParams& p) {
  const std::string op = "decode_attention: ";
  for (int64_t b = 0; b < p.batch; ++b) {
    const std::string at = "[" + std::to_string(b) + "]";
    if (p.cu_seqlens_q != nullptr) {
      const int64_t lo = p.cu_seqlens_q[b], hi = p.cu_seqlens_q[b + 1];
      if (lo < 0 || hi < lo || hi - lo > p.q_len) {
        return Status(Code::kInvalidArgument,
                      op + "cu_seqlens_q must be non-negative and non-decreasing with steps of at most "
                           "q_len=" + std::to_string(p.q_len) + ", got cu_seqlens_q" + at + "=" +
                           std::to_string(lo) + " and cu_seqlens_q[" + std::to_string(b + 1) + "]=" +
                           std::to_string(hi));
      }
    }
    if (p.kv_batch_index != nullptr && p.kv_batch_index[b] < 0) {
      return Status(Code::kInvalidArgument, op + "kv_batch_index" + at + "=" +
                                                std::to_string(p.kv_batch_index[b]) + " is negative");
    }
    const Entry e = entry(p, b);
    if (p.cache_seqlens != nullptr && p.cache_seqlens[e.slot] < 0) {
      return Status(Code::kInvalidArgument, op + "cache_seqlens[" + std::to_string(e.slot) + "]=" +
                                                std::to_string(p.cache_seqlens[e.slot]) + " is negative");
    }
    if (e.kv_count > p.kv_len || e.kv_count < e.q_count) {
      return Status(Code::kInvalidArgument,
                    op + "entry " + std::to_string(b) + " attends over " + std::to_string(e.kv_count) +
                        " keys with " + std::to_string(e.q_count) + " queries; kv_len=" +
                        std::to_string(p.kv_len) + " must bound every entry's keys, and each entry "
                        "needs at least as many keys as queries");
    }
  }
  return Status::Ok();
}

}  // namespace

Status decode_attention_cpu(const DecodeAttentionParams& p) {
  PVT_RETURN_IF_ERROR(check_decode_attention_params(p));
  PVT_RETURN_IF_ERROR(check_varlen_values(p));
  const int64_t D = p.head_dim;
  const int64_t G = p.q_heads / p.kv_heads;
  const float neg_inf = -std::numeric_limits<float>::infinity();

  for (int64_t b = 0; b < p.batch; ++b) {
    const Entry e = entry(p, b);
    const int64_t Tq = e.q_count, S = e.kv_count;
    if (Tq == 0) continue;
    const int64_t R = G * Tq;  // query rows sharing one kv head: row r = g * Tq + t
    const bool refused = p.kv_mapped != nullptr && S > p.kv_mapped[e.slot];
    if (refused && p.error_flag != nullptr) *p.error_flag = 1;
    std::vector<float> q(static_cast<size_t>(R * D)), scores(static_cast<size_t>(R * (S > 0 ? S : 1)));
    std::vector<float> acc(static_cast<size_t>(R * D)), kv(static_cast<size_t>(D));
    for (int64_t hk = 0; hk < p.kv_heads; ++hk) {
      std::vector<float> denom(static_cast<size_t>(R), 0.f), rowmax(static_cast<size_t>(R), neg_inf);
      std::fill(acc.begin(), acc.end(), 0.f);
      if (!refused) {
        for (int64_t r = 0; r < R; ++r) {
          const int64_t h = hk * G + r / Tq, t = r % Tq;
          float* qr = q.data() + r * D;
          load_row(p.q, e.q_offset + t * p.q_stride[1] + h * p.q_stride[2], p.q_stride[3], D, p.dtype, qr);
          for (int64_t d = 0; d < D; ++d) qr[d] *= p.scale;
        }
        // Pass 1: scores, each key loaded once for all rows.
        for (int64_t s = 0; s < S; ++s) {
          load_row(p.k, s * p.k_stride[0] + e.slot * p.k_stride[1] + hk * p.k_stride[2], p.k_stride[3],
                   D, p.dtype, kv.data());
          for (int64_t r = 0; r < R; ++r) {
            const int64_t h = hk * G + r / Tq, t = r % Tq;
            float x = dot(q.data() + r * D, kv.data(), D);
            if (p.mask == nullptr) {
              if (s >= S - Tq + t + 1) x = neg_inf;
            } else {
              const float m = load(p.mask, b * p.mask_stride[0] + h * p.mask_stride[1] +
                                               t * p.mask_stride[2] + s * p.mask_stride[3],
                                   p.mask_type);
              x = p.mask_type == ScalarType::kBool ? (m != 0.f ? x : neg_inf) : x + m;
            }
            scores[r * S + s] = x;
          }
        }
        // Softmax per row; a row that sees nothing (max = -inf) keeps weight 0 everywhere.
        for (int64_t r = 0; r < R; ++r) {
          float* sr = scores.data() + r * S;
          float mx = neg_inf;
          for (int64_t s = 0; s < S; ++s) mx = sr[s] > mx ? sr[s] : mx;
          float sum = 0.f;
          for (int64_t s = 0; s < S; ++s) {
            sr[s] = mx == neg_inf ? 0.f : std::exp(sr[s] - mx);
            sum += sr[s];
          }
          denom[r] = sum;
          rowmax[r] = mx;
        }
        // Pass 2: weighted values, each value row loaded once for all rows.
        for (int64_t s = 0; s < S; ++s) {
          load_row(p.v, s * p.v_stride[0] + e.slot * p.v_stride[1] + hk * p.v_stride[2], p.v_stride[3],
                   D, p.dtype, kv.data());
          for (int64_t r = 0; r < R; ++r) {
            const float w = scores[r * S + s];
            if (w == 0.f) continue;
            float* ar = acc.data() + r * D;
            for (int64_t d = 0; d < D; ++d) ar[d] += w * kv[d];
          }
        }
      }
      for (int64_t r = 0; r < R; ++r) {
        const int64_t h = hk * G + r / Tq, t = r % Tq;
        const float inv = denom[r] > 0.f ? 1.f / denom[r] : 0.f;
        const int64_t base = e.out_offset + t * p.out_stride[1] + h * p.out_stride[2];
        for (int64_t d = 0; d < D; ++d) store(p.out, base + d * p.out_stride[3], p.dtype, acc[r * D + d] * inv);
        if (p.lse != nullptr) {
          p.lse[(e.first_row + t) * p.q_heads + h] =
              denom[r] > 0.f ? rowmax[r] + std::log(denom[r]) : neg_inf;
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace pvt

// Host merge of partial attention states (see merge_attention_states.h), and the shared check.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "float_convert.h"
#include "merge_attention_states.h"

namespace pvt {
namespace {

float load(const void* base, int64_t i, ScalarType t) {
  switch (t) {
    case ScalarType::kFloat32: return static_cast<const float*>(base)[i];
    case ScalarType::kFloat16: return host_float::half_to_float(static_cast<const uint16_t*>(base)[i]);
    case ScalarType::kBFloat16: return host_float::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case ScalarType::kBool: break;  // rejected by the check
  }
  return 0.f;
}

void store(void* base, int64_t i, ScalarType t, float v) {
  switch (t) {
    case ScalarType::kFloat32: static_cast<float*>(base)[i] = v; return;
    case ScalarType::kFloat16: static_cast<uint16_t*>(base)[i] = host_float::float_to_half(v); return;
    case ScalarType::kBFloat16: static_cast<uint16_t*>(base)[i] = host_float::float_to_bf16(v); return;
    case ScalarType::kBool: return;
  }
}

}  // namespace

Status check_merge_attention_states_params(const MergeAttentionStatesParams& p) {
  const std::string op = "merge_attention_states: ";
  if (p.num_parts < 1 || p.num_parts > kMaxMergeParts) {
    return Status(Code::kInvalidArgument, op + "the number of parts must be 1.." + std::to_string(kMaxMergeParts) +
                                              ", got " + std::to_string(p.num_parts));
  }
  if (p.rows <= 0 || p.head_dim <= 0) {
    return Status(Code::kInvalidArgument, op + "sizes must be positive, got rows=" + std::to_string(p.rows) +
                                              " head_dim=" + std::to_string(p.head_dim));
  }
  if (p.dtype == ScalarType::kBool) {
    return Status(Code::kInvalidArgument, op + "outputs must be float32, float16 or bfloat16, got bool");
  }
  if (p.out == nullptr) return Status(Code::kInvalidArgument, op + "out must be set");
  for (int64_t i = 0; i < p.num_parts; ++i) {
    if (p.outs[i] == nullptr || p.lses[i] == nullptr) {
      return Status(Code::kInvalidArgument, op + "part " + std::to_string(i) + " has no output or no lse");
    }
  }
  return Status::Ok();
}

Status merge_attention_states_cpu(const MergeAttentionStatesParams& p) {
  PVT_RETURN_IF_ERROR(check_merge_attention_states_params(p));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t n = p.num_parts, D = p.head_dim;
  std::vector<float> w(static_cast<size_t>(n)), acc(static_cast<size_t>(D));
  for (int64_t r = 0; r < p.rows; ++r) {
    float mx = neg_inf;
    for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, p.lses[i][r]);  // fmax: a NaN part does not hide the max
    const bool none = mx == neg_inf;  // no part saw a key
    float sum = 0.f;
    for (int64_t i = 0; i < n; ++i) {
      const float l = p.lses[i][r];
      w[i] = none || l == neg_inf ? 0.f : std::exp(l - mx);
      if (std::isnan(l)) w[i] = l;  // a NaN part makes the row NaN rather than silently dropping it
      sum += w[i];
    }
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int64_t i = 0; i < n; ++i) {
      if (w[i] == 0.f) continue;  // also skips a part whose output is garbage-free zeros
      for (int64_t d = 0; d < D; ++d) acc[d] += w[i] * load(p.outs[i], r * D + d, p.dtype);
    }
    const float inv = none ? 0.f : 1.f / sum;
    for (int64_t d = 0; d < D; ++d) store(p.out, r * D + d, p.dtype, acc[d] * inv);
    if (p.lse != nullptr) p.lse[r] = none ? neg_inf : mx + std::log(sum);
  }
  return Status::Ok();
}

}  // namespace pvt

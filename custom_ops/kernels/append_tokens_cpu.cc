// Host append (and the shared parameter check). Plain loops: the host path serves CI and CPU
// tensors, where the copy is never the bottleneck; clarity wins over speed.
#include <cstring>
#include <string>

#include "append_tokens.h"

namespace pvt {

Status check_append_params(const AppendParams& p) {
  if (p.dst == nullptr || p.src == nullptr) {
    return Status(Code::kInvalidArgument, std::string("append: ") +
                                              (p.dst == nullptr ? "dst" : "src") + " is null");
  }
  if (p.batch <= 0 || p.tokens <= 0 || p.heads <= 0 || p.head_dim <= 0) {
    return Status(Code::kInvalidArgument,
                  "append: sizes must be positive, got batch=" + std::to_string(p.batch) +
                      " tokens=" + std::to_string(p.tokens) + " heads=" + std::to_string(p.heads) +
                      " head_dim=" + std::to_string(p.head_dim));
  }
  if (p.dst_pos < 0) {
    return Status(Code::kInvalidArgument,
                  "append: dst_pos must be >= 0, got " + std::to_string(p.dst_pos));
  }
  if (p.elem_bytes != 1 && p.elem_bytes != 2 && p.elem_bytes != 4) {  // 1: 8-bit caches' codes
    return Status(Code::kInvalidArgument, "append: element size must be 1, 2 or 4 bytes, got " +
                                              std::to_string(p.elem_bytes));
  }
  return Status::Ok();
}

Status append_tokens_cpu(const AppendParams& p) {
  PVT_RETURN_IF_ERROR(check_append_params(p));
  const int64_t eb = p.elem_bytes;
  const int64_t row = p.head_dim * eb;  // bytes of one (token, b, h) row in dst
  const char* src = static_cast<const char*>(p.src);
  char* dst = static_cast<char*>(p.dst);
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t h = 0; h < p.heads; ++h) {
        char* d = dst + (((p.dst_pos + t) * p.batch + b) * p.heads + h) * row;
        const char* s = src + (b * p.src_stride[0] + t * p.src_stride[1] + h * p.src_stride[2]) * eb;
        if (p.src_stride[3] == 1) {
          std::memcpy(d, s, static_cast<size_t>(row));
        } else {
          for (int64_t i = 0; i < p.head_dim; ++i) {
            std::memcpy(d + i * eb, s + i * p.src_stride[3] * eb, static_cast<size_t>(eb));
          }
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace pvt

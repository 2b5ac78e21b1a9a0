// Host varlen append (and the shared parameter check): one memcpy per (token, head) row.
#include <cstring>
#include <string>

#include "append_varlen.h"

namespace pvt {

Status check_append_varlen_params(const AppendVarlenParams& p) {
  const std::string op = "append_varlen: ";
  if (p.dst == nullptr || p.src == nullptr || p.cu_seqlens == nullptr || p.cache_seqlens == nullptr) {
    return Status(Code::kInvalidArgument, op + "dst, src, cu_seqlens and cache_seqlens must be set");
  }
  if (p.num_seqs <= 0 || p.total_tokens < 0 || p.heads <= 0 || p.head_dim <= 0 || p.num_slots <= 0 ||
      p.max_seq_len <= 0) {
    return Status(Code::kInvalidArgument,
                  op + "sizes must be positive, got num_seqs=" + std::to_string(p.num_seqs) +
                      " total_tokens=" + std::to_string(p.total_tokens) + " heads=" +
                      std::to_string(p.heads) + " head_dim=" + std::to_string(p.head_dim) +
                      " num_slots=" + std::to_string(p.num_slots) +
                      " max_seq_len=" + std::to_string(p.max_seq_len));
  }
  if (p.elem_bytes != 2 && p.elem_bytes != 4) {
    return Status(Code::kInvalidArgument,
                  op + "element size must be 2 or 4 bytes, got " + std::to_string(p.elem_bytes));
  }
  return Status::Ok();
}

Status append_varlen_cpu(const AppendVarlenParams& p) {
  PVT_RETURN_IF_ERROR(check_append_varlen_params(p));
  const int64_t eb = p.elem_bytes;
  const size_t row = static_cast<size_t>(p.head_dim * eb);
  char* dst = static_cast<char*>(p.dst);
  const char* src = static_cast<const char*>(p.src);
  for (int64_t b = 0; b < p.num_seqs; ++b) {
    const int64_t first = p.cu_seqlens[b], count = p.cu_seqlens[b + 1] - first;
    const int64_t slot = p.slot_ids ? p.slot_ids[b] : b;
    if (count <= 0) continue;
    if (slot < 0 || slot >= p.num_slots) {
      if (p.error_flag) *p.error_flag = 1;
      continue;
    }
    const int64_t pos = p.cache_seqlens[slot];
    const int64_t limit = p.kv_mapped ? p.kv_mapped[slot] : p.max_seq_len;
    if (pos < 0 || pos + count > limit || pos + count > p.max_seq_len || first + count > p.total_tokens) {
      if (p.error_flag) *p.error_flag = 1;
      continue;
    }
    for (int64_t t = 0; t < count; ++t) {
      for (int64_t h = 0; h < p.heads; ++h) {
        char* d = dst + (slot * p.dst_stride[0] + (pos + t) * p.dst_stride[1] + h * p.dst_stride[2]) * eb;
        const char* s = src + ((first + t) * p.src_stride[0] + h * p.src_stride[1]) * eb;
        std::memcpy(d, s, row);
      }
    }
  }
  return Status::Ok();
}

}  // namespace pvt

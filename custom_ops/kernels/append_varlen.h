// Varlen append into a slot cache: packed new tokens of n sequences, each written at the end of its
// own slot. Sequence b owns rows cu_seqlens[b] .. cu_seqlens[b+1]-1 of src; its row t goes to token
// cache_seqlens[slot_ids[b]] + t of slot slot_ids[b]:
//   dst[slot, cache_seqlens[slot] + t, h, :] = src[cu_seqlens[b] + t, h, :]
// The lengths live in the memory the kernel runs on (device memory for CUDA, never read by the
// host). A sequence whose write would pass kv_mapped[slot] (or max_seq_len) is skipped whole and sets
// *error_flag = 1: never a write to unmapped memory. dtype-agnostic: only the element size matters.
#pragma once

#include <cstdint>

#include "../core/status.h"

namespace pvt {

struct AppendVarlenParams {
  void* dst = nullptr;        // element (slot 0, token 0, head 0, 0) of the cache (a layer's K or V)
  const void* src = nullptr;  // packed [total_tokens, heads, head_dim]
  int64_t num_seqs = 0;       // n
  int64_t total_tokens = 0;   // rows of src; an upper bound is enough for the CUDA grid
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t elem_bytes = 0;     // 2 or 4
  int64_t num_slots = 0;
  int64_t max_seq_len = 0;
  // Strides in ELEMENTS. head_dim is contiguous in both dst and src.
  int64_t dst_stride[3] = {0, 0, 0};  // (slot, token, head)
  int64_t src_stride[2] = {0, 0};     // (row, head)
  const int32_t* cu_seqlens = nullptr;     // [n + 1], non-decreasing, cu_seqlens[0] == 0
  const int32_t* slot_ids = nullptr;       // [n]; null: sequence b lives in slot b
  const int32_t* cache_seqlens = nullptr;  // [num_slots]: lengths before this write
  const int32_t* kv_mapped = nullptr;      // [num_slots]: mapped rows per slot; null: all mapped
  int32_t* error_flag = nullptr;           // may be null
};

Status check_append_varlen_params(const AppendVarlenParams& p);
// Host implementation (append_varlen_cpu.cc). The arrays are read on the host.
Status append_varlen_cpu(const AppendVarlenParams& p);
// CUDA implementation (append_varlen_cuda.cu): queues the copy on `stream` (a cudaStream_t).
Status append_varlen_cuda(const AppendVarlenParams& p, void* stream);

}  // namespace pvt

// Copy tokens into a seq-major cache: dst[(pos + t), b, h, d] = src[b, t, h, d].
// One kernel serves every writer: append of 1 or T tokens, and migration of a whole dense cache
// (pos = 0, T = S). The copy is dtype-agnostic: only the element size matters.
#pragma once

#include <cstdint>

#include "../core/status.h"

namespace pvt {

struct AppendParams {
  void* dst = nullptr;        // cache base: seq-major [capacity, batch, heads, head_dim], contiguous
  const void* src = nullptr;  // tokens, logical [batch, tokens, heads, head_dim], any strides
  int64_t batch = 0;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t dst_pos = 0;        // token position of the first written token
  int64_t src_stride[4] = {0, 0, 0, 0};  // in ELEMENTS (not bytes), for (b, t, h, d)
  int64_t elem_bytes = 0;     // 1 (8-bit codes), 2 or 4
};

// Host implementation (append_tokens_cpu.cc). Always available.
Status append_tokens_cpu(const AppendParams& p);
// CUDA implementation (append_tokens_cuda.cu): queues the copy on `stream` (a cudaStream_t) and
// returns the launch status; only in builds with PADDLE_VTENSOR_WITH_CUDA.
Status append_tokens_cuda(const AppendParams& p, void* stream);

// Shared validation (sizes positive, elem_bytes 1, 2 or 4, pointers set).
Status check_append_params(const AppendParams& p);

}  // namespace pvt

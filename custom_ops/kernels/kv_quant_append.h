// Quantizing append: float tokens in, 8-bit codes (and, for int8, their per-token scales) out, into
// a cache of any layout (seq-major VTensor, slot cache) described by strides. Codes follow
// kv_quant.h; the host and CUDA kernels encode with the same functions.
#pragma once

#include <cstdint>

#include "../core/status.h"
#include "decode_attention.h"
#include "kv_quant.h"

namespace pvt {

struct QuantAppendParams {
  KvQuant kind = KvQuant::kNone;           // kFp8E4M3 or kInt8
  ScalarType src_type = ScalarType::kFloat32;  // of the tokens: float32, float16 or bfloat16
  // The tokens form an (outer, inner) grid of token rows of `heads` x `head_dim` values: (b, t) for
  // an append of [B, T, H, D], (1, T) for one slot's packed rows. All strides in ELEMENTS (the
  // codes are one byte, so their strides are bytes too); head_dim is contiguous everywhere.
  int64_t outer = 0, inner = 0, heads = 0, head_dim = 0;
  const void* src = nullptr;
  int64_t src_stride[3] = {0, 0, 0};    // for (outer, inner, h)
  void* dst = nullptr;                  // code of (outer 0, inner 0, head 0, d 0)
  int64_t dst_stride[3] = {0, 0, 0};    // for (outer, inner, h)
  // fp8: read, one per head (stride[0] = stride[1] = 0), > 0 and finite (the op checks).
  // int8: written, amax / 127 of each (outer, inner, h) row.
  float* scale = nullptr;
  int64_t scale_stride[3] = {0, 0, 0};  // for (outer, inner, h)
};

// Sizes positive, pointers set, kind and source type supported.
Status check_quant_append_params(const QuantAppendParams& p);

// Host implementation (kv_quant_append_cpu.cc), parallel over token rows.
Status quant_append_cpu(const QuantAppendParams& p);
// CUDA implementation (kv_quant_append_cuda.cu): queued on `stream`, one warp per (row, head).
Status quant_append_cuda(const QuantAppendParams& p, void* stream);

}  // namespace pvt

// Decode attention over an 8-bit KV cache (kv_quant.h): the same contract as decode_attention.h
// (layouts, query groups, masks, causal rule, the variable-length fields of slot caches, lse), with
// K and V read as one-byte codes and dequantized in registers: k = decode(code) * k_scale. No
// dequantized copy of the cache is ever made. Softmax and accumulation are float32.
#pragma once

#include <cstdint>

#include "../core/status.h"
#include "decode_attention.h"
#include "kv_quant.h"

namespace pvt {

struct QuantAttentionParams {
  // Everything but the element type of K and V: attn.k / attn.v point at the codes, attn.k_stride /
  // attn.v_stride count codes (= bytes); attn.dtype is the type of q and out.
  DecodeAttentionParams attn;
  KvQuant kind = KvQuant::kNone;
  // Scales, float32, at s * stride[0] + row * stride[1] + h * stride[2] (row: the cache row, i.e.
  // the slot with kv_batch_index). fp8: one per kv head, stride {0, 0, 1}; int8: one per token
  // and head, the layout of the cache without head_dim.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int64_t k_scale_stride[3] = {0, 0, 0};
  int64_t v_scale_stride[3] = {0, 0, 0};
  // CUDA: the tensor-core kernel where it applies (kv_quant_attention_mma_cuda.cu); false keeps the
  // CUDA-core kernel (the harness compares the two; the host ignores it).
  bool tensor_cores = true;
  // CUDA, tensor cores: keys a warp takes of every tile. 0: the plan's choice (choose_block_shape,
  // kv_quant_attention_plan.h); 16 or 32 forced (32 with blocks of 4 warps only). A benchmark knob.
  int warp_keys = 0;
  // CUDA, tensor cores: the keys on the MMA's M side and the query heads on N (mma_keys_kernel, groups of
  // at most 8 query heads a kv head). 0: the plan's choice; 1 forced; -1 never. A benchmark knob.
  int keys_on_m = 0;
};

// decode_attention's own check of attn, plus the kind and the scale pointers.
Status check_quant_attention_params(const QuantAttentionParams& p);

// Host implementation (kv_quant_attention_cpu.cc): one task per (entry, kv head).
Status quant_attention_cpu(const QuantAttentionParams& p);
// CUDA implementation (kv_quant_attention_cuda.cu): one query token per entry (q_len 1, or 0/1
// rows per entry with cu_seqlens_q), no mask, head_dim 64, 128 or 256, any query-group size. q of
// float16 / bfloat16 at head_dim 64 or 128 runs on tensor cores (up to 16 query heads of a kv head
// per block, one read of the cache for them); the rest on CUDA cores (fast for groups of 1, 2 and 4:
// larger groups read the cache once per 4 query heads). Splits the keys over blocks through
// `attn.workspace`, sized by quant_attention_cuda_workspace_bytes on the same device.
size_t quant_attention_cuda_workspace_bytes(const QuantAttentionParams& p);
Status quant_attention_cuda(const QuantAttentionParams& p, void* stream);

}  // namespace pvt

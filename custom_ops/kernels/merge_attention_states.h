// Merge partial attention results by their log-sum-exp (sequence parallelism, split-KV).
// Attention of a query over keys split into parts P_1..P_n: each part gives o_i = softmax over P_i
// applied to V, and lse_i = log(sum_{s in P_i} exp(score_s)). Over the whole key set,
//   lse = log(sum_i exp(lse_i)),   o = sum_i exp(lse_i - lse) * o_i,
// computed with the running max subtracted so nothing overflows. A part that saw no key has lse -inf
// and weight 0; a row where every part saw nothing gets o = 0 and lse = -inf (what the attention
// kernels give for such a query). Accumulation is float32 for every dtype.
#pragma once

#include <cstdint>

#include "../core/status.h"
#include "decode_attention.h"  // ScalarType

namespace pvt {

// Parts per merge: the pointer arrays travel by value into the CUDA kernel's parameters.
constexpr int64_t kMaxMergeParts = 64;

struct MergeAttentionStatesParams {
  int64_t num_parts = 0;  // 1 .. kMaxMergeParts
  int64_t rows = 0;       // (query, head) pairs: every leading dimension of the outputs times heads
  int64_t head_dim = 0;   // D
  ScalarType dtype = ScalarType::kFloat32;  // of outs and out: float32, float16 or bfloat16
  // Part i: outs[i] is [rows, head_dim] contiguous, lses[i] is float32 [rows] contiguous.
  const void* outs[kMaxMergeParts] = {};
  const float* lses[kMaxMergeParts] = {};
  void* out = nullptr;   // [rows, head_dim], dtype
  float* lse = nullptr;  // [rows] float32; may be null (not written)
};

// Shared validation: sizes, part count, pointers, dtype.
Status check_merge_attention_states_params(const MergeAttentionStatesParams& p);

// Host implementation (merge_attention_states_cpu.cc). Always available.
Status merge_attention_states_cpu(const MergeAttentionStatesParams& p);

// CUDA implementation (merge_attention_states_cuda.cu), only in builds with PADDLE_VTENSOR_WITH_CUDA:
// queues the merge on `stream` (a cudaStream_t) and returns the launch status.
Status merge_attention_states_cuda(const MergeAttentionStatesParams& p, void* stream);

}  // namespace pvt

// One sequence of the accept/advance step (speculative_accept.h), written once for both backends:
// the host loop and the CUDA kernel (one thread per sequence) call these same functions, so the two
// cannot drift. Compiled as __host__ __device__ under nvcc, as plain inline functions otherwise.
#pragma once

#include <cstdint>

#include "speculative_accept.h"

#ifdef __CUDACC__
#define PVT_HOST_DEVICE __host__ __device__
#else
#define PVT_HOST_DEVICE
#endif

namespace pvt {
namespace spec_detail {

// Leading draft tokens equal to the target's token at the same position.
PVT_HOST_DEVICE inline int64_t accepted_count(const SpeculativeAcceptParams& p, int64_t i) {
  const int64_t* d = p.draft_tokens + i * p.num_draft;
  const int64_t* t = p.target_tokens + i * (p.num_draft + 1);
  int64_t a = 0;
  while (a < p.num_draft && d[a] == t[a]) ++a;
  return a;
}

// 0 when sequence i may be applied, else a SpeculativeAcceptError (repeats are checked apart).
PVT_HOST_DEVICE inline int32_t check_row(const SpeculativeAcceptParams& p, int64_t i) {
  if (p.finished[i] != 0) return 0;  // left untouched: nothing to check
  const int64_t s = p.slot_ids[i];
  if (s < 0 || s >= p.target_num_slots || s >= p.draft_num_slots) {
    return static_cast<int32_t>(SpeculativeAcceptError::kSlotOutOfRange);
  }
  const int64_t len = p.out_len[i];
  if (len < 0 || len > p.max_new_tokens) return static_cast<int32_t>(SpeculativeAcceptError::kOutLenOutOfRange);
  const int64_t a = accepted_count(p, i);
  const int64_t t = static_cast<int64_t>(p.target_seqlens[s]) + a + p.target_advance;
  if (t < 0 || t > p.target_capacity) return static_cast<int32_t>(SpeculativeAcceptError::kTargetLengthOutOfRange);
  const int64_t d = static_cast<int64_t>(p.draft_seqlens[s]) + a + p.draft_advance;
  if (d < 0 || d > p.draft_capacity) return static_cast<int32_t>(SpeculativeAcceptError::kDraftLengthOutOfRange);
  return 0;
}

// Whether another sequence of the batch names the same slot (the updates would race / double count).
PVT_HOST_DEVICE inline bool slot_repeated(const SpeculativeAcceptParams& p, int64_t i) {
  for (int64_t j = 0; j < p.batch; ++j) {
    if (j != i && p.slot_ids[j] == p.slot_ids[i]) return true;
  }
  return false;
}

// Applies sequence i (already checked).
PVT_HOST_DEVICE inline void apply_row(const SpeculativeAcceptParams& p, int64_t i) {
  if (p.finished[i] != 0) {
    p.accepted[i] = 0;
    p.next_tokens[i] = p.pad_token_id;
    return;
  }
  const int64_t a = accepted_count(p, i);
  const int64_t* t = p.target_tokens + i * (p.num_draft + 1);
  int64_t len = p.out_len[i];
  int32_t done = 0;
  // target[0..a-1] are the accepted drafts (equal to them), target[a] the target's own next token.
  for (int64_t j = 0; j <= a && !done; ++j) {
    if (len >= p.max_new_tokens) {
      done = 1;
      break;
    }
    p.out_ids[i * p.max_new_tokens + len] = t[j];
    ++len;
    if (p.eos_token_id >= 0 && t[j] == p.eos_token_id) done = 1;
  }
  if (len >= p.max_new_tokens) done = 1;
  const int32_t s = p.slot_ids[i];
  p.target_seqlens[s] = static_cast<int32_t>(p.target_seqlens[s] + a + p.target_advance);
  p.draft_seqlens[s] = static_cast<int32_t>(p.draft_seqlens[s] + a + p.draft_advance);
  p.out_len[i] = static_cast<int32_t>(len);
  p.finished[i] = done;
  p.accepted[i] = static_cast<int32_t>(a);
  p.next_tokens[i] = t[a];
}

}  // namespace spec_detail
}  // namespace pvt

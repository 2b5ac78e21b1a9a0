// Speculative decoding's accept/advance step, for a batch of sequences each living in a slot of a
// target and a draft slot cache (docs/SLOT_CACHE.md): how many of the k draft tokens the target
// agrees with, which tokens to emit, and the new per-slot lengths of both caches. Everything is read
// and written where the kernel runs (device memory on CUDA), so a decode step never reads it back.
//
// Per active sequence i (finished[i] == 0), with slot s = slot_ids[i]:
//   a = the number of leading j in [0, k) with draft[i, j] == target[i, j]        (accepted[i] = a)
//   emit target[i, 0..a] (the a accepted drafts, which equal the target's own greedy tokens, plus
//     the target's token after them) into out_ids[i, out_len[i]...], stopping after an eos token or
//     when out_len reaches max_new_tokens; either sets finished[i] = 1
//   next_tokens[i] = target[i, a]                  (the token the next step feeds to both models)
//   target_seqlens[s] += a + target_advance;  draft_seqlens[s] += a + draft_advance
// A finished sequence is left as it is: accepted 0, nothing emitted, lengths unchanged, and
// next_tokens[i] = pad_token_id.
//
// Rolling back is only the length update: the rejected positions' K/V stay where they were written
// (mapped, past the slot's length) and are overwritten by the next step. The caller (the host
// scheduler) decides mapping ahead of the step (reserve_slot); nothing here maps or unmaps.
#pragma once

#include <cstdint>

#include "../core/status.h"

namespace pvt {

struct SpeculativeAcceptParams {
  int64_t batch = 0;       // n sequences in this step
  int64_t num_draft = 0;   // k >= 1 draft tokens per sequence
  // Token arrays, row-major and contiguous (strides in ELEMENTS are implied: k, k + 1, max_new_tokens).
  const int64_t* draft_tokens = nullptr;   // [n, k]
  const int64_t* target_tokens = nullptr;  // [n, k + 1]: the target's greedy token at each verified position
  const int32_t* slot_ids = nullptr;       // [n]: distinct slots, each in [0, num_slots) of both caches
  // Per-slot lengths (flash-attn's cache_seqlens), updated in place.
  int32_t* target_seqlens = nullptr;  // [target_num_slots]
  int64_t target_num_slots = 0;
  int64_t target_capacity = 0;        // max_seq_len of the target cache: a new length must stay <= this
  int64_t target_advance = 1;         // added with a (1: the token fed before the drafts is committed)
  int32_t* draft_seqlens = nullptr;   // [draft_num_slots]
  int64_t draft_num_slots = 0;
  int64_t draft_capacity = 0;
  int64_t draft_advance = 0;          // added with a (negative: rolls back what drafting advanced)
  // Emission.
  int64_t* out_ids = nullptr;         // [n, max_new_tokens]
  int32_t* out_len = nullptr;         // [n], in [0, max_new_tokens]
  int32_t* finished = nullptr;        // [n], 0 or 1
  int64_t max_new_tokens = 0;
  int64_t eos_token_id = -1;          // < 0: none
  int64_t pad_token_id = 0;
  // Outputs.
  int32_t* accepted = nullptr;        // [n]
  int64_t* next_tokens = nullptr;     // [n]
  // CUDA only (may be null on the host): set to a nonzero ErrorKind when a sequence's inputs are
  // invalid (its slot out of range or repeated, a new length outside [0, capacity], out_len out of
  // range); that sequence is then left unchanged. The host reads it at its finished-sequence check.
  int32_t* error_flag = nullptr;
};

// What error_flag holds after a failed CUDA step (the first kind seen wins).
enum class SpeculativeAcceptError : int32_t {
  kNone = 0,
  kSlotOutOfRange = 1,
  kSlotRepeated = 2,
  kTargetLengthOutOfRange = 3,
  kDraftLengthOutOfRange = 4,
  kOutLenOutOfRange = 5,
};
const char* speculative_accept_error_name(int32_t code);

// Sizes and pointers (both backends check these before launching).
Status check_speculative_accept_params(const SpeculativeAcceptParams& p);
// Host implementation: checks every sequence first (slots, lengths, out_len) and returns
// InvalidArgument / OutOfRange naming the sequence and slot with nothing changed, or applies them all.
Status speculative_accept_cpu(const SpeculativeAcceptParams& p);
// CUDA implementation: queues one kernel on `stream` (a cudaStream_t); per-sequence input errors go
// to error_flag (required) instead of a status, since the host must not wait for the kernel.
Status speculative_accept_cuda(const SpeculativeAcceptParams& p, void* stream);

}  // namespace pvt

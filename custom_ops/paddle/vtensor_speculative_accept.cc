// vtensor_speculative_accept: speculative decoding's accept/advance step on the device
// (kernels/speculative_accept.h says what it computes). Every tensor is updated in place, so a
// decode loop calls it without allocating and without reading anything back.
//   DraftTokens   int64 [n, k]         the draft's proposals
//   TargetTokens  int64 [n, k + 1]     the target's greedy token at each verified position
//   SlotIds       int32 [n]            each sequence's slot, in both caches
//   TargetSeqlens int32 [target slots] in/out: the target cache's cache_seqlens
//   DraftSeqlens  int32 [draft slots]  in/out: the draft cache's cache_seqlens
//   OutIds        int64 [n, max_new]   in/out: emitted tokens
//   OutLen        int32 [n]            in/out: tokens emitted so far
//   Finished      int32 [n]            in/out: 1 once a sequence hit eos or max_new
//   Accepted      int32 [n]            out: draft tokens accepted this step
//   NextTokens    int64 [n]            out: the token both models take next
//   ErrorFlag     int32 [1]            in/out: CUDA reports bad sequences here (0 = none); on the CPU
//                                      the op raises instead, with every tensor unchanged
//   attrs target_capacity, draft_capacity (max_seq_len of each cache), target_advance,
//         draft_advance, eos_token_id (< 0: none), pad_token_id
#include <atomic>
#include <string>

#include "../op_names.h"
#include "op_support.h"
#include "../kernels/speculative_accept.h"

namespace {

constexpr const char* kOp = pvt::names::kSpeculativeAccept;

// How many times the kernel was launched, per backend: tests read it to prove which path a decode
// loop took (pvt_speculative_accept_launches below).
std::atomic<int64_t> g_launches[2];

using pvt::dims_str;

void check_tensor(const paddle::Tensor& t, const char* name, phi::DataType dtype, std::vector<int64_t> shape,
                  const phi::Place& place) {
  PD_CHECK(t.dtype() == dtype, kOp, ": ", name, " must be ", phi::DataTypeToString(dtype), ", got ",
           phi::DataTypeToString(t.dtype()));
  PD_CHECK(t.place() == place, kOp, ": ", name, " is on ", t.place().DebugString(), " but draft_tokens on ",
           place.DebugString(), "; all must share a place");
  const auto& d = t.dims();
  bool same = d.size() == static_cast<int>(shape.size());
  for (size_t i = 0; same && i < shape.size(); ++i) same = shape[i] < 0 || d[i] == shape[i];
  std::string want = "[";
  for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + (shape[i] < 0 ? std::string("any") : std::to_string(shape[i]));
  PD_CHECK(same, kOp, ": ", name, " must have shape ", want, "], got ", dims_str(d));
  PD_CHECK(t.is_dense_tensor() && t.is_contiguous(), kOp, ": ", name, " must be a contiguous dense tensor");
}

}  // namespace

void VTensorSpeculativeAccept(const paddle::Tensor& draft_tokens, const paddle::Tensor& target_tokens,
                              const paddle::Tensor& slot_ids, paddle::Tensor& target_seqlens,
                              paddle::Tensor& draft_seqlens, paddle::Tensor& out_ids, paddle::Tensor& out_len,
                              paddle::Tensor& finished, paddle::Tensor& accepted, paddle::Tensor& next_tokens,
                              paddle::Tensor& error_flag, int64_t target_capacity, int64_t draft_capacity,
                              int64_t target_advance, int64_t draft_advance, int64_t eos_token_id,
                              int64_t pad_token_id) {
  const auto& dd = draft_tokens.dims();
  PD_CHECK(dd.size() == 2 && dd[0] > 0 && dd[1] > 0, kOp,
           ": draft_tokens must be [batch, k] with batch, k >= 1, got ", dims_str(dd));
  const int64_t n = dd[0], k = dd[1];
  const phi::Place place = draft_tokens.place();
  check_tensor(draft_tokens, "draft_tokens", phi::DataType::INT64, {n, k}, place);
  check_tensor(target_tokens, "target_tokens", phi::DataType::INT64, {n, k + 1}, place);
  check_tensor(slot_ids, "slot_ids", phi::DataType::INT32, {n}, place);
  check_tensor(target_seqlens, "target_seqlens", phi::DataType::INT32, {-1}, place);
  check_tensor(draft_seqlens, "draft_seqlens", phi::DataType::INT32, {-1}, place);
  check_tensor(out_ids, "out_ids", phi::DataType::INT64, {n, -1}, place);
  check_tensor(out_len, "out_len", phi::DataType::INT32, {n}, place);
  check_tensor(finished, "finished", phi::DataType::INT32, {n}, place);
  check_tensor(accepted, "accepted", phi::DataType::INT32, {n}, place);
  check_tensor(next_tokens, "next_tokens", phi::DataType::INT64, {n}, place);
  check_tensor(error_flag, "error_flag", phi::DataType::INT32, {1}, place);
  PD_CHECK(out_ids.dims()[1] >= 1, kOp, ": out_ids must have room for at least one token, got ",
           dims_str(out_ids.dims()));

  pvt::SpeculativeAcceptParams p;
  p.batch = n;
  p.num_draft = k;
  p.draft_tokens = draft_tokens.data<int64_t>();
  p.target_tokens = target_tokens.data<int64_t>();
  p.slot_ids = slot_ids.data<int32_t>();
  p.target_seqlens = target_seqlens.data<int32_t>();
  p.target_num_slots = target_seqlens.dims()[0];
  p.target_capacity = target_capacity;
  p.target_advance = target_advance;
  p.draft_seqlens = draft_seqlens.data<int32_t>();
  p.draft_num_slots = draft_seqlens.dims()[0];
  p.draft_capacity = draft_capacity;
  p.draft_advance = draft_advance;
  p.out_ids = out_ids.data<int64_t>();
  p.out_len = out_len.data<int32_t>();
  p.finished = finished.data<int32_t>();
  p.max_new_tokens = out_ids.dims()[1];
  p.eos_token_id = eos_token_id;
  p.pad_token_id = pad_token_id;
  p.accepted = accepted.data<int32_t>();
  p.next_tokens = next_tokens.data<int64_t>();
  p.error_flag = error_flag.data<int32_t>();

  if (place.GetType() == phi::AllocationType::CPU) {
    pvt::throw_if_error(pvt::speculative_accept_cpu(p), kOp);
    g_launches[0].fetch_add(1);
    return;
  }
#ifdef PADDLE_VTENSOR_WITH_CUDA
  PD_CHECK(place.GetType() == phi::AllocationType::GPU, kOp, ": tensors must be on the CPU or a GPU, got ",
           place.DebugString());
  pvt::DeviceGuard guard(place, kOp);
  pvt::throw_if_error(pvt::speculative_accept_cuda(p, pvt::stream_of(draft_tokens)), kOp);
  g_launches[1].fetch_add(1);
#else
  PD_THROW(kOp, ": this build of paddle_vtensor has no CUDA kernels (tensors on ", place.DebugString(), ")");
#endif
}

// Launches so far on the host (kind 0) or on CUDA devices (kind 1), for tests through ctypes.
extern "C" int64_t pvt_speculative_accept_launches(int kind) {
  return (kind == 0 || kind == 1) ? g_launches[kind].load() : -1;
}

PVT_BUILD_OP(PVT_OP_SPECULATIVE_ACCEPT)
    .Inputs({"DraftTokens", "TargetTokens", "SlotIds", "TargetSeqlens", "DraftSeqlens", "OutIds", "OutLen",
             "Finished", "Accepted", "NextTokens", "ErrorFlag"})
    .Outputs({"TargetSeqlensOut", "DraftSeqlensOut", "OutIdsOut", "OutLenOut", "FinishedOut", "AcceptedOut",
              "NextTokensOut", "ErrorFlagOut"})
    .Attrs({PVT_ATTR_TARGET_CAPACITY ": int64_t", PVT_ATTR_DRAFT_CAPACITY ": int64_t", PVT_ATTR_TARGET_ADVANCE ": int64_t",
            PVT_ATTR_DRAFT_ADVANCE ": int64_t", PVT_ATTR_EOS_TOKEN_ID ": int64_t", PVT_ATTR_PAD_TOKEN_ID ": int64_t"})
    .SetInplaceMap({{"TargetSeqlens", "TargetSeqlensOut"}, {"DraftSeqlens", "DraftSeqlensOut"},
                    {"OutIds", "OutIdsOut"}, {"OutLen", "OutLenOut"}, {"Finished", "FinishedOut"},
                    {"Accepted", "AcceptedOut"}, {"NextTokens", "NextTokensOut"}, {"ErrorFlag", "ErrorFlagOut"}})
    .SetKernelFn(PD_KERNEL(VTensorSpeculativeAccept));

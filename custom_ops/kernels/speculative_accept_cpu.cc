// Host accept/advance (and the shared parameter check): check every sequence, then apply them all,
// so a bad sequence leaves every length, token and flag exactly as it was.
#include <string>

#include "speculative_accept.h"
#include "speculative_accept_row.h"

namespace pvt {

const char* speculative_accept_error_name(int32_t code) {
  switch (static_cast<SpeculativeAcceptError>(code)) {
    case SpeculativeAcceptError::kNone: return "none";
    case SpeculativeAcceptError::kSlotOutOfRange: return "a slot id is outside [0, num_slots) of a cache";
    case SpeculativeAcceptError::kSlotRepeated: return "two sequences name the same slot";
    case SpeculativeAcceptError::kTargetLengthOutOfRange:
      return "a target slot's new length would leave [0, target_capacity]";
    case SpeculativeAcceptError::kDraftLengthOutOfRange:
      return "a draft slot's new length would leave [0, draft_capacity]";
    case SpeculativeAcceptError::kOutLenOutOfRange: return "an out_len is outside [0, max_new_tokens]";
  }
  return "unknown error";
}

Status check_speculative_accept_params(const SpeculativeAcceptParams& p) {
  const char* what = "speculative_accept: ";
  if (p.batch <= 0) return Status(Code::kInvalidArgument, std::string(what) + "batch must be positive, got " + std::to_string(p.batch));
  if (p.num_draft < 1) {
    return Status(Code::kInvalidArgument, std::string(what) + "num_draft (k) must be >= 1, got " + std::to_string(p.num_draft));
  }
  if (p.max_new_tokens < 1) {
    return Status(Code::kInvalidArgument,
                  std::string(what) + "max_new_tokens must be >= 1, got " + std::to_string(p.max_new_tokens));
  }
  if (p.target_num_slots < 1 || p.draft_num_slots < 1 || p.target_capacity < 0 || p.draft_capacity < 0) {
    return Status(Code::kInvalidArgument, std::string(what) + "caches must have at least one slot and a capacity >= 0");
  }
  if (!p.draft_tokens || !p.target_tokens || !p.slot_ids || !p.target_seqlens || !p.draft_seqlens ||
      !p.out_ids || !p.out_len || !p.finished || !p.accepted || !p.next_tokens) {
    return Status(Code::kInvalidArgument, std::string(what) + "a required array pointer is null");
  }
  return Status::Ok();
}

Status speculative_accept_cpu(const SpeculativeAcceptParams& p) {
  PVT_RETURN_IF_ERROR(check_speculative_accept_params(p));
  for (int64_t i = 0; i < p.batch; ++i) {
    int32_t err = spec_detail::check_row(p, i);
    if (err == 0 && p.finished[i] == 0 && spec_detail::slot_repeated(p, i)) {
      err = static_cast<int32_t>(SpeculativeAcceptError::kSlotRepeated);
    }
    if (err != 0) {
      const bool range = err == static_cast<int32_t>(SpeculativeAcceptError::kTargetLengthOutOfRange) ||
                         err == static_cast<int32_t>(SpeculativeAcceptError::kDraftLengthOutOfRange);
      return Status(range ? Code::kOutOfRange : Code::kInvalidArgument,
                    std::string("speculative_accept: sequence ") + std::to_string(i) + " (slot " +
                        std::to_string(p.slot_ids[i]) + "): " + speculative_accept_error_name(err) +
                        "; nothing was changed");
    }
  }
  for (int64_t i = 0; i < p.batch; ++i) spec_detail::apply_row(p, i);
  return Status::Ok();
}

}  // namespace pvt

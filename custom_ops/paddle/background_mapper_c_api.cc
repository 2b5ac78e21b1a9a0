// C entry points of the background mapper (issue 30 point 2, core/background_mapper.h): queue a
// batch of slot reservations, wait for it, ask whether it ran, forget it. Python:
// paddle_vtensor/map_ahead.py. The cache is found by its base pointer as the slot entry points find
// it; errors reported as they report them.
#include <cstdint>
#include <vector>

#include "../core/apis.h"
#include "slot_c_api_support.h"

using pvt::c_api::find;
using pvt::c_api::report;

extern "C" {

// Queues reserve of (slots[i], tokens[i]) on the cache at `ptr` (prefetch != 0: as rows needed
// later, pvt::AheadKind::kPrefetch); *ticket names the batch. Bad slots or lengths, or
// n_slots != n_tokens, are refused here (nothing queued).
int pvt_reserve_slots_async(const void* ptr, const int64_t* slots, int64_t n_slots, const int64_t* tokens,
                            int64_t n_tokens, int prefetch, uint64_t* ticket, char* err, int64_t err_len) {
  *ticket = 0;
  int code = 0;
  auto cache = find(ptr, err, err_len, &code);
  if (!cache) return code;
  if (n_slots < 0 || n_tokens < 0 || (n_slots > 0 && slots == nullptr) || (n_tokens > 0 && tokens == nullptr)) {
    return report(pvt::Status(pvt::Code::kInvalidArgument, "a batch of reservations needs arrays of slots and lengths"),
                  err, err_len);
  }
  return report(pvt::catch_bad_alloc("reserve_slots_async", [&] {
                  return pvt::map_ahead(cache, std::vector<int64_t>(slots, slots + n_slots),
                                        std::vector<int64_t>(tokens, tokens + n_tokens), ticket,
                                        prefetch ? pvt::AheadKind::kPrefetch : pvt::AheadKind::kBatch);
                }),
                err, err_len);
}

// Blocks until the batch has run; its status (the cache is as before the batch on error).
int pvt_ahead_wait(uint64_t ticket, char* err, int64_t err_len) {
  return report(pvt::wait_ahead(ticket), err, err_len);
}

int pvt_ahead_done(uint64_t ticket) { return pvt::ahead_done(ticket) ? 1 : 0; }

void pvt_ahead_forget(uint64_t ticket) { pvt::forget_ahead(ticket); }

int64_t pvt_ahead_tickets() { return static_cast<int64_t>(pvt::ahead_tickets()); }

}  // extern "C"

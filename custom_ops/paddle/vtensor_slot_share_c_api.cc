// C entry points for sharing memory between the slots of one slot cache (issue 31): share a slot's
// prefix into another slot without copying its whole chunks, announce a write into rows that may be
// shared (copy-on-write of those chunks, decided here, on the host, before the step), and read the
// cache's sharing bookkeeping. Python: paddle_vtensor/sharing.py. Keyed and reported like the other
// slot entry points (slot_c_api_support.h); the core range-checks every value.
#include <cstdint>

#include "slot_c_api_support.h"

using pvt::c_api::find;
using pvt::c_api::find_base;
using pvt::c_api::report;

extern "C" {

// SlotCache::share_prefix: dst holds src's first `tokens` rows; the partial chunk is copied on
// `stream` (null: the host, or the legacy default stream).
int pvt_slot_share_prefix(const void* ptr, int64_t src, int64_t dst, int64_t tokens, void* stream, char* err,
                          int64_t err_len) {
  int code = 0;
  auto cache = find(ptr, err, err_len, &code);
  return cache ? report(cache->share_prefix(src, dst, tokens, stream), err, err_len) : code;
}

// Rows [write_from, tokens) of `slot` will be written: the chunks of theirs that another slot maps
// too become private copies (SlotCache::make_private), then rows [0, tokens) are reserved.
int pvt_slot_reserve_for_write(const void* ptr, int64_t slot, int64_t tokens, int64_t write_from, void* stream,
                               char* err, int64_t err_len) {
  int code = 0;
  auto cache = find(ptr, err, err_len, &code);
  if (!cache) return code;
  code = report(cache->make_private(slot, write_from, tokens, stream), err, err_len);
  return code ? code : report(cache->reserve(slot, tokens, stream), err, err_len);
}

// Returns 0 when ptr is no slot cache's base, else 1 and out[0..4] = max_seq_len, slot_rows (the
// padded row stride), align_slots, mapped_bytes (physical), shared_bytes (further mappings).
int pvt_slot_share_info(const void* ptr, int64_t* out) {
  auto cache = find_base(ptr);
  if (!cache || out == nullptr) return 0;
  const pvt::SlotCacheShape& s = cache->shape();
  const int64_t v[5] = {s.max_seq_len, s.slot_rows, s.align_slots ? 1 : 0,
                        static_cast<int64_t>(cache->mapped_bytes()), static_cast<int64_t>(cache->shared_bytes())};
  for (int i = 0; i < 5; ++i) out[i] = v[i];
  return 1;
}

}  // extern "C"

// C entry points for the host decisions on a slot cache (reserve / release a slot, take back a
// reservation whose companion failed, read its bookkeeping). Not tensor ops: they move no data, and
// the scheduler calls them between steps.
// Python reaches them with ctypes (paddle_vtensor/slots.py), keyed by the cache tensor's data pointer,
// which must be the cache's base: a pointer inside it (a slice of the cache) is refused, as the ops
// refuse such views. A pointer cannot tell a reshaped view from the cache: Python checks the tensor.
//
// Errors: "<Code>: <message>" in err and the Code as the return value; the core's messages carry
// no caller prefix, Python adds "reserve_slot: " once. Slot ids and token counts arrive as int64 and
// are range-checked by the core (slot in [0, num_slots): InvalidArgument; tokens < 0: InvalidArgument;
// tokens > max_seq_len: OutOfRange); a Python int past int64 must be refused before ctypes wraps it.
#include <cstdint>
#include <vector>

#include "slot_c_api_support.h"

using pvt::c_api::find;
using pvt::c_api::find_base;
using pvt::c_api::report;

extern "C" {

int pvt_slot_reserve(const void* ptr, int64_t slot, int64_t tokens, void* stream, char* err, int64_t err_len) {
  int code = 0;
  auto cache = find(ptr, err, err_len, &code);
  return cache ? report(cache->reserve(slot, tokens, stream), err, err_len) : code;
}

int pvt_slot_unreserve(const void* ptr, int64_t slot, int64_t tokens, char* err, int64_t err_len) {
  int code = 0;
  auto cache = find(ptr, err, err_len, &code);
  return cache ? report(cache->unreserve(slot, tokens), err, err_len) : code;
}

int pvt_slot_release(const void* ptr, int64_t slot, void* stream, char* err, int64_t err_len) {
  int code = 0;
  auto cache = find(ptr, err, err_len, &code);
  return cache ? report(cache->release(slot, stream), err, err_len) : code;
}

// Returns 0 when ptr is in no slot cache, else 1 and out[0..5] = num_slots, max_seq_len, row_bytes,
// chunk_bytes, reserved_bytes, mapped_bytes.
int pvt_slot_info(const void* ptr, int64_t* out) {
  auto cache = find_base(ptr);
  if (!cache || out == nullptr) return 0;
  const pvt::SlotCacheShape& s = cache->shape();
  const int64_t v[6] = {s.num_slots, s.max_seq_len, s.row_bytes, static_cast<int64_t>(cache->chunk_bytes()),
                        static_cast<int64_t>(cache->reserved_bytes()), static_cast<int64_t>(cache->mapped_bytes())};
  for (int i = 0; i < 6; ++i) out[i] = v[i];
  return 1;
}

// Fills out[0..num_slots) with each slot's mapped rows; returns 0 when ptr is in no slot cache.
int pvt_slot_mapped_tokens(const void* ptr, int32_t* out, int64_t n) {
  auto cache = find_base(ptr);
  if (!cache || out == nullptr) return 0;
  const std::vector<int32_t> m = cache->mapped_tokens_all(nullptr);
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(m.size()); ++i) out[i] = m[static_cast<size_t>(i)];
  return 1;
}

}  // extern "C"

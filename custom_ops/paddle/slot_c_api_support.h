// What the slot-cache C entry points share (vtensor_slot_c_api.cc, vtensor_slot_share_c_api.cc):
// the "<Code>: <message>" error report and finding the cache behind a tensor's data pointer, which
// must be the cache's base (a pointer inside it, a slice of the cache, is refused as the ops refuse
// such views).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "../core/apis.h"

namespace pvt {
namespace c_api {

// Copies "<Code>: <message>" into err (NUL-terminated, truncated) and returns the code (0: ok).
inline int report(const Status& st, char* err, int64_t err_len) {
  if (!st.ok() && err != nullptr && err_len > 0) {
    const std::string text = st.to_string();
    const size_t n = std::min(text.size(), static_cast<size_t>(err_len - 1));
    std::memcpy(err, text.data(), n);
    err[n] = '\0';
  }
  return static_cast<int>(st.code());
}

// The cache whose base is `ptr`, or null (a pointer inside a cache is not its base).
inline std::shared_ptr<SlotCache> find_base(const void* ptr) {
  auto cache = SlotCache::find(ptr);
  return cache && cache->data() == ptr ? cache : nullptr;
}

// find_base, or null with the refusal reported into err / *code.
inline std::shared_ptr<SlotCache> find(const void* ptr, char* err, int64_t err_len, int* code) {
  auto cache = find_base(ptr);
  if (!cache) {
    const bool inside = SlotCache::find(ptr) != nullptr;
    *code = report(Status(Code::kInvalidArgument, inside ? "the tensor is a view inside a slot cache, not the cache itself"
                                                         : "the tensor is not a slot cache"),
                   err, err_len);
  }
  return cache;
}

}  // namespace c_api
}  // namespace pvt

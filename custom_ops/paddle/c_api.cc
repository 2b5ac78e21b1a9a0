// Plain C entry points for what is not a tensor op (stats, limits, pointer lookup). Python reaches
// them with ctypes on the same shared library that holds the ops, so both see one registry.
#include <cstdint>
#include <cstdio>
#include <string>

#include "../core/apis.h"

// The hash of the sources this library was built from (paddle_vtensor/_build.py passes it), kept
// as a plain string in the binary so Python can compare it without loading the library.
#ifndef PVT_SOURCE_DIGEST
#define PVT_SOURCE_DIGEST unknown
#endif
#define PVT_STRINGIFY2(x) #x
#define PVT_STRINGIFY(x) PVT_STRINGIFY2(x)
extern "C" __attribute__((used)) const char pvt_source_digest[] =
    "PVT_SOURCE_DIGEST=" PVT_STRINGIFY(PVT_SOURCE_DIGEST) ";";

namespace {
pvt::Device device_of(int kind, int index) {
  return kind == 1 ? pvt::Device::cuda(index) : pvt::Device::host();
}
}  // namespace

extern "C" {

// Fills out[0..10] with reserved, mapped, peak_mapped, live_regions, live_vtensors, map_calls,
// unmap_calls, mapped_limit, bytes_written, shared_bytes, pooled_bytes (the order of pvt::MemoryStats).
void pvt_memory_stats(int kind, int index, int64_t* out) {
  const pvt::MemoryStats s = pvt::memory_stats(device_of(kind, index));
  const int64_t v[11] = {s.reserved_bytes, s.mapped_bytes, s.peak_mapped_bytes, s.live_regions,
                         s.live_vtensors,  s.map_calls,    s.unmap_calls,       s.mapped_limit,
                         s.bytes_written,  s.shared_bytes, s.pooled_bytes};
  for (int i = 0; i < 11; ++i) out[i] = v[i];
}

// Returns 0, or the status code (InvalidArgument) with "<Code>: <message>" in err[0..err_len),
// as the slot entry points report (paddle_vtensor/errors.py maps the code to the exception).
int pvt_set_mapped_limit(int kind, int index, int64_t bytes, char* err, int64_t err_len) {
  if (bytes < 0) {
    const pvt::Status st(pvt::Code::kInvalidArgument,
                         "limit_bytes must be >= 0 (0 or None: no limit), got " + std::to_string(bytes));
    std::snprintf(err, static_cast<size_t>(err_len), "%s", st.to_string().c_str());
    return static_cast<int>(st.code());
  }
  pvt::set_mapped_limit(device_of(kind, index), bytes);
  return 0;
}

// The name of status code `code` as the ops spell it in their errors ("<op>: <name>: ..."), or
// null past the last code: lets Python check that its table of exceptions covers every code.
const char* pvt_code_name(int code) {
  if (code < 0 || code > static_cast<int>(pvt::Code::kConflict)) return nullptr;
  return pvt::code_name(static_cast<pvt::Code>(code));
}

void pvt_reset_peak_mapped(int kind, int index) { pvt::reset_peak_mapped(device_of(kind, index)); }

// Describes the cache whose reservation holds `ptr`: returns 0 if none, else 1 and fills
// out[0..5] = batch, heads, head_dim, elem_bytes, capacity_tokens, longest live view.
int pvt_find_cache(const void* ptr, int64_t* out) {
  auto cache = pvt::SeqMajorCache::find(ptr);
  if (!cache) return 0;
  const pvt::CacheShape& s = cache->shape();
  const int64_t v[6] = {s.batch, s.heads, s.head_dim, s.elem_bytes, cache->capacity_tokens(),
                        cache->longest_view()};
  for (int i = 0; i < 6; ++i) out[i] = v[i];
  return 1;
}

}  // extern "C"

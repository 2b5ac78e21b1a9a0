// ChunkPool: physical chunks kept ready between a release and the next map, one pool per (backend,
// chunk size), bounded per device (issue 30 point 1). Region::create_phys takes from it before it
// creates, Region::release_phys gives to it before it releases, so a slot released and reserved
// again costs map + set access, not create + release.
//
// Bounds. set_pool_limit(device, bytes) caps the bytes pooled on a device (default 0: no pool, a
// released chunk goes back to the driver at once, as before the pool). The mapped limit
// (set_mapped_limit) caps mapped + pooled bytes: a create that would pass it first trims the
// device's pool and retries; a fill stops at it. Pooled bytes are not mapped_bytes (nothing reads
// them); memory_stats shows them as pooled_bytes.
// How other allocators (Paddle's) still get memory: the pool holds at most its limit; trim(device)
// hands every pooled chunk back; a create that fails with kOutOfMemory (cuMemCreate on a full GPU)
// trims the device's pool and retries once.
// Contents. A pooled chunk keeps its bytes (host pages are not punched, CUDA memory never zeroed):
// a new mapping of it reads what its last user wrote. The slot ops read only rows written since
// their reserve, so a KV cache never sees them; anything that reads unwritten rows must not rely
// on zeros.
// A backend must outlive its pooled chunks (only the native harness makes backends that die: it
// trims first). Thread-safe: one mutex; backend calls run outside it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend.h"

namespace pvt {

// A pooled chunk of `bytes` from `backend` (uncounted from pooled_bytes: the caller counts it as
// mapped); false when the pool has none.
bool pool_take(Backend* backend, size_t bytes, PhysHandle* handle);
// Offers a chunk mapped nowhere: true when the pool kept it (counted in pooled_bytes; the caller
// uncounts it from mapped), false when the device's pool would pass its limit (the caller releases it).
bool pool_put(Backend* backend, size_t bytes, PhysHandle handle);
// Releases every pooled chunk of `device` (all backends, all sizes). The first release error is
// returned; a chunk that fails to release leaves the pool but stays counted (its memory is held).
Status pool_trim(Device device);
// Caps the bytes pooled on `device` (0: no pool); trims what is over the new bound.
Status set_pool_limit(Device device, int64_t bytes);
int64_t pool_limit(Device device);
// Creates chunks of `chunk_bytes` (a multiple of the backend's granularity) into the pool until it
// holds `bytes` of that size on this backend, or the pool limit or the mapped limit would be passed
// (stops there, not an error). *created: how many it made. Errors from create_chunk are returned
// (what was created stays pooled).
Status pool_fill(Backend* backend, size_t chunk_bytes, int64_t bytes, int64_t* created);

}  // namespace pvt

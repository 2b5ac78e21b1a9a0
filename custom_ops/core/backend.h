// Backend: the virtual-memory primitives, one implementation per device kind. Physical memory and
// its mappings are separate, so one physical chunk can be mapped at several addresses (aliases).
//   host: mmap(PROT_READ) reservation (reads zeros, writes fault); chunks are page ranges of a memfd,
//         mapped MAP_SHARED|MAP_FIXED into it; unmapping puts read-only anonymous memory back;
//         release punches the pages out.
//   cuda: cuMemAddressReserve / cuMemCreate / cuMemMap+cuMemSetAccess / cuMemUnmap / cuMemRelease.
// A Region (region.h) is the only caller; it keeps the chunk bookkeeping (which chunk is mapped
// where, how many places map it), the backend keeps none beyond what the host needs to hand out
// memfd offsets.
// Streams are ordered by events: record_event after work is queued, wait_event before memory that
// work touches goes away. The host runs nothing asynchronously and has no events.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device.h"
#include "status.h"

namespace pvt {

// Opaque handle of one physical chunk (a CUmemGenericAllocationHandle on CUDA; on the host where the
// chunk's pages live in the backend's memfd).
using PhysHandle = uint64_t;
// Opaque event (a CUevent on CUDA); 0 means none.
using EventHandle = uint64_t;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // Smallest mappable unit in bytes; every chunk size is a multiple of it.
  virtual size_t granularity() const = 0;
  // Reserve `bytes` (a multiple of granularity) of address space; no physical memory.
  virtual Status reserve(size_t bytes, void** base) = 0;
  virtual Status free_reservation(void* base, size_t bytes) = 0;
  // Create `bytes` (a multiple of granularity) of physical memory, mapped nowhere yet.
  // kOutOfMemory when the device has no room.
  virtual Status create_chunk(size_t bytes, PhysHandle* handle) = 0;
  // Map the whole of `handle` (created with these `bytes`) at [addr, addr+bytes), a reserved range
  // mapped to nothing else, readable and writable. One handle may be mapped at several addresses at
  // once: every mapping reads and writes the same bytes. On failure [addr, +bytes) stays unmapped.
  virtual Status map_chunk(void* addr, size_t bytes, PhysHandle handle) = 0;
  // Return [addr, addr+bytes) (one whole mapping) to the reserved-only state; the physical chunk
  // stays (release_chunk frees it). The caller has waited for every stream whose work touches the
  // range (Region::record_use / wait_event).
  virtual Status unmap_chunk(void* addr, size_t bytes) = 0;
  // Free the physical memory of `handle` (created with `bytes`), which is mapped nowhere any more.
  virtual Status release_chunk(PhysHandle handle, size_t bytes) = 0;
  // Copy `bytes` from `src` to `dst` (both mapped, of this backend), in `stream` order on CUDA
  // (cuMemcpyAsync: the caller records the stream before unmapping either side), at once on the
  // host. The one data movement the core does: a slot's partial chunk when it shares a prefix, and a
  // shared chunk made private before a write (SlotCache::share_prefix / make_private).
  virtual Status copy(void* dst, const void* src, size_t bytes, void* stream) = 0;
  // Record on `stream` (a cudaStream_t / CUstream; nullptr: the legacy default stream) an event
  // that completes when the work queued on it so far has finished; *event == 0 creates one first.
  // The host leaves *event at 0 (nothing to wait for).
  virtual Status record_event(void* stream, EventHandle* event) = 0;
  // Block the calling thread until `event` has completed.
  virtual Status wait_event(EventHandle event) = 0;
  // Without blocking: *done = whether `event` has completed (the host: always; CUDA: cuEventQuery).
  // How a release defers its unmaps instead of waiting (Region::unmap_range).
  virtual Status event_done(EventHandle event, bool* done) = 0;
  virtual void destroy_event(EventHandle event) = 0;
  // Reads of reserved places no chunk is mapped at return zeros instead of faulting (issue 30
  // point 4). The host's reservation reads zeros always and ignores this. CUDA: reservations made
  // from now on are covered by a read-only zero cover of runs of at most `bytes` (rounded up to the
  // granularity; 0: no cover, such reads fault), see zero_cover.h for its cost.
  virtual Status set_zero_granule(size_t bytes) {
    (void)bytes;
    return Status::Ok();
  }
  virtual size_t zero_granule() const { return 0; }
};

// The host backend (host_backend.cc), a process-wide object.
Backend* host_backend();

// The process-wide backend for `device` (backend.cc); created on first use, never destroyed.
// kUnsupported for CUDA in a build without PADDLE_VTENSOR_WITH_CUDA.
Status get_backend(Device device, Backend** out);

// Ok when this process may use `device`. For CUDA: kUnsupported in a build without CUDA, and in a
// child forked from a process that had initialised CUDA (the driver's state does not survive
// fork(); calls there may hang), with a message saying so. The adapter checks it at each op.
Status check_device_usable(Device device);

}  // namespace pvt

// Per-device counters, updated by Region and SeqMajorCache; read by memory_stats() and the harness.
#pragma once

#include <cstdint>

#include "device.h"

namespace pvt {

struct MemoryStats {
  int64_t reserved_bytes = 0;     // virtual address space held by live regions
  int64_t mapped_bytes = 0;       // physical memory in use: each chunk once, however many places map it
  int64_t peak_mapped_bytes = 0;  // high-water mark of mapped_bytes since start (or reset)
  int64_t live_regions = 0;       // live reservations (one per cache)
  int64_t live_vtensors = 0;      // live tensors (views) backed by a cache
  int64_t map_calls = 0;          // chunk mappings made since start (aliases included)
  int64_t unmap_calls = 0;        // chunk mappings removed since start
  int64_t mapped_limit = 0;       // 0: no limit; else mapping past it fails with kOutOfMemory
  int64_t bytes_written = 0;      // bytes the append kernels were given to write into caches
  // Bytes of the mappings beyond the first of each physical chunk (aliases, Region::alias_range):
  // virtual bytes that see memory mapped_bytes already counts. Last, so readers that take the fields
  // in order (pvt_memory_stats) keep their indices.
  int64_t shared_bytes = 0;
  // Physical memory held ready in the chunk pool (chunk_pool.h): mapped nowhere, so not in
  // mapped_bytes, but counted with it against the mapped limit. Last, for the same reason.
  int64_t pooled_bytes = 0;
};

MemoryStats memory_stats(Device device);
// Cap on mapped_bytes + pooled_bytes (physical memory; an alias costs none) for `device` (0 removes
// the cap; a map that would pass it trims the pool first, chunk_pool.h). Lets users bound the cache's footprint, and
// lets tests provoke kOutOfMemory without exhausting the machine.
void set_mapped_limit(Device device, int64_t bytes);
void reset_peak_mapped(Device device);
// Counts `bytes` written into caches on `device`: every append/migration kernel the adapter queues
// reports what it writes, so "bytes written per step" is counted, not inferred.
void add_bytes_written(Device device, int64_t bytes);

// Called with every change of mapped bytes (after it is counted), so a framework can show VTensor
// memory in its own accounting; the Paddle adapter forwards it to Paddle's memory stats. One
// observer per process; nullptr removes it. Must not call back into the core.
using MappedObserver = void (*)(Device device, int64_t delta);
void set_mapped_observer(MappedObserver observer);

namespace stats_detail {
// Return false (and change nothing) when `delta` would take mapped + pooled past the mapped limit.
bool try_add_mapped(Device device, int64_t delta);
bool try_add_pooled(Device device, int64_t delta);
void add_pooled(Device device, int64_t delta);  // unconditional; negative when a chunk leaves the pool
void add_mapped(Device device, int64_t delta);  // unconditional; negative on unmap
void add_reserved(Device device, int64_t delta, int64_t regions_delta);
void add_views(Device device, int64_t delta);
void add_calls(Device device, int64_t maps, int64_t unmaps);
void add_shared(Device device, int64_t delta);  // negative when an alias goes
}  // namespace stats_detail

}  // namespace pvt

// Region: one reserved virtual range cut into equal chunks, any of which can be mapped or released.
// Ranges are chunk-aligned byte offsets from base(); the region remembers which chunks are mapped, so
// callers may grow a tail (the KV cache today) or manage independent sub-ranges (one per sequence).
//
// Host memory of the bookkeeping grows with what is mapped, never with what is reserved: a sorted
// map of mapped chunk -> its physical chunk, so a reservation of any size the address space allows
// (terabytes, one-page chunks) costs a few hundred bytes until it is used.
//
// Physical chunks come from and go back to the chunk pool (chunk_pool.h) when it has room.
// Physical chunks are shared: alias_range maps the chunks behind a range of one region into another
// range (of it or of another region on the same backend), so both ranges read and write the same
// bytes and nothing is copied. A PhysChunk counts the places it is mapped at and is released when
// the last one is unmapped; memory_stats() counts its bytes once in mapped_bytes and every further
// mapping in shared_bytes.
//
// Streams: release must not pull memory from under kernels still queued on it. Every stream that
// used the region (wrote or read it) is remembered with an event recorded after its last use
// (record_use). Unmapping never blocks the host for them (issue 30 point 3): when every such event
// has completed (Backend::event_done, a query) the chunks are unmapped at once; else they leave the
// mapped bookkeeping now (is_mapped/chunk_mapped say no; nothing may use them) and wait in a pending
// list, with a copy of the events, until a later call finds the events done (collect(), run at every
// map, unmap and alias) and unmaps them. Their physical memory stays counted in mapped_bytes until
// then. Mapping or aliasing over a pending chunk first waits for that chunk's events (the only wait),
// and the destructor waits for all. The host has no events: it never defers.
// Steps released by a host store and finished by the device (StepCounters, step_counters.h) are a
// second kind of use: an unmap is deferred until every step issued by then has finished.
// Not thread-safe by itself: SeqMajorCache serialises access with its own mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "backend.h"
#include "step_counters.h"

namespace pvt {

// One physical chunk (a backend handle of one region's chunk size) and the number of places it is
// mapped at, in any region of its backend. Created by Region::map_range, shared by alias_range,
// released (and deleted) by the Region that removes its last mapping. The count is atomic: two
// regions guarded by different locks may unmap aliases of one chunk at the same time.
struct PhysChunk {
  explicit PhysChunk(PhysHandle h) : handle(h) {}
  const PhysHandle handle;
  std::atomic<int> mappings{0};
};

class Region {
 public:
  // `reserve_bytes` and `chunk_bytes` are rounded up: chunk to the backend granularity, the
  // reservation to a whole number of chunks. kInvalidArgument when that overflows the address
  // space, kOutOfMemory when the backend cannot reserve it (or host memory runs out).
  static Status create(Device device, size_t reserve_bytes, size_t chunk_bytes,
                       std::unique_ptr<Region>* out);
  // The same on a given backend (which must outlive the region): how the native harness puts an
  // observing backend between a region and the driver.
  static Status create_on(Backend* backend, size_t reserve_bytes, size_t chunk_bytes,
                          std::unique_ptr<Region>* out);
  ~Region();  // waits for every using stream, unmaps every mapped chunk, then frees the range
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  Device device() const { return backend_->device(); }
  char* base() const { return base_; }
  size_t reserved_bytes() const { return chunk_bytes_ * num_chunks_; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  size_t num_chunks() const { return num_chunks_; }
  // Bytes mapped in this region, aliases included (memory_stats counts physical memory).
  size_t mapped_bytes() const { return chunk_bytes_ * mapped_.size(); }
  bool chunk_mapped(size_t chunk) const { return mapped_.count(chunk) != 0; }
  // True when every byte of [offset, offset+bytes) lies in a mapped chunk.
  bool is_mapped(size_t offset, size_t bytes) const;

  // Map every not-yet-mapped chunk in [offset, offset+bytes) (both chunk-aligned). All or nothing:
  // on failure the chunks this call mapped are released again and the region is as before.
  Status map_range(size_t offset, size_t bytes);
  // Unmap every mapped chunk in [offset, offset+bytes) (both chunk-aligned), after waiting for
  // every stream that used the region; a physical chunk mapped nowhere else is released.
  Status unmap_range(size_t offset, size_t bytes);
  // Unmaps at once (no stream wait, no deferral) the mapped chunks in [offset, offset+bytes), which
  // the caller has just mapped and nothing has used: how a batch of reservations that failed
  // halfway undoes itself (SlotCache::reserve_batch). Errors are returned; what failed stays mapped.
  Status undo_map(size_t offset, size_t bytes);
  // Map at [dst_offset, dst_offset+bytes) of this region the physical chunks that back
  // [src_offset, src_offset+bytes) of `src` (this region or another on the same backend): afterwards
  // both ranges are the same memory. Whole chunks only: kInvalidArgument unless both regions have
  // the same chunk size and backend, offsets and size are chunk-aligned, every source chunk is mapped
  // and no destination chunk is (two overlapping ranges of one region never qualify); kOutOfRange
  // past either reservation. Costs no physical memory (the mapped limit does not apply). All or
  // nothing: on failure the chunks this call mapped are unmapped and both regions are as before.
  // The caller serialises access to both regions for the duration of the call.
  Status alias_range(const Region& src, size_t src_offset, size_t dst_offset, size_t bytes);
  // Copy `bytes` from src_offset to dst_offset of this region (both ranges mapped) in `stream` order
  // (Backend::copy); the caller records the stream (record_use) before anything may unmap them.
  Status copy(size_t dst_offset, size_t src_offset, size_t bytes, void* stream);
  // Copy-on-write of one chunk: when chunk `chunk` is mapped here and elsewhere too, map a new
  // physical chunk holding a copy of its bytes in its place (the copy is made through a scratch
  // mapping on `stream`, waited for; the other mappings keep the old chunk). Waits for every stream
  // that used the region before unmapping. A chunk mapped only here is left as it is. All or
  // nothing: on failure the chunk stays mapped to the shared memory.
  Status make_private(size_t chunk, void* stream);
  // Physical bytes behind this region's mappings: each physical chunk once, however many of its
  // chunks map it (mapped_bytes() minus the aliases within the region). Counted again only after
  // the mappings changed (O(mapped) then, O(1) otherwise): callers ask around every fork.
  size_t physical_bytes() const;
  // The physical chunk mapped at `chunk`, or nullptr: lets callers (and tests) see who shares what.
  const PhysChunk* phys_chunk(size_t chunk) const;
  // Convenience for a growing tail: map [0, round_up(end)) / release everything from round_up(end).
  Status ensure_mapped(size_t end);
  Status release_from(size_t end);

  // Work queued on `stream` so far may touch this region's memory: the next unmap waits for it.
  // Call it after queuing the work (a write or a read). One event per distinct stream, re-recorded
  // on each use, so the bookkeeping is bounded by the number of streams. No-op on the host.
  Status record_use(void* stream);
  // The event record_use(stream) records, for work that records it itself: an event-record node of
  // a CUDA graph (cudaEventRecordWithFlags(event, s, cudaEventRecordExternal) during capture), whose
  // every launch re-records it, so an unmap after a launch waits for the graph's work before that
  // node as for record_use's. Records it on `stream` once now (remembering the stream; it completes
  // with the work queued so far). Call it outside stream capture. The event lives as long as this
  // region: a graph recording it must not be launched after the region is gone. *event = 0 on the
  // host (nothing to record).
  Status use_event(void* stream, EventHandle* event);
  size_t streams_in_use() const { return uses_.size(); }
  // Steps counted by `counters` may use this region's memory: an unmap waits (without blocking, as
  // for streams) until every step issued by then has finished. Held until the counters retire.
  // kInvalidArgument for null.
  Status use_counters(std::shared_ptr<const StepCounters> counters);
  size_t counters_in_use() const { return counters_.size(); }
  // Unmaps the pending chunks whose events have completed; wait: all of them, blocking. Every map,
  // unmap and alias runs it without waiting first.
  Status collect(bool wait);
  // Chunks unmapped by a call but not yet by the backend (their streams still run).
  size_t pending_chunks() const;

  size_t round_up(size_t bytes) const { return (bytes + chunk_bytes_ - 1) / chunk_bytes_ * chunk_bytes_; }

 private:
  Region(Backend* backend, char* base, size_t chunk_bytes, size_t num_chunks);
  Status check_range(size_t offset, size_t bytes, const char* what) const;
  Status map_range_impl(size_t offset, size_t bytes);
  Status unmap_range_impl(size_t offset, size_t bytes);
  Status alias_range_impl(const Region& src, size_t src_offset, size_t dst_offset, size_t bytes);
  Status wait_uses();
  // Block until the work queued on `stream` so far has finished (nothing on the host).
  Status wait_stream(void* stream);
  Status make_private_impl(size_t chunk, void* stream);
  // A new physical chunk of chunk_bytes_, counted against the mapped limit, mapped nowhere yet.
  // These four return kOutOfMemory instead of throwing when host memory runs out, so callers can
  // undo what they did before.
  Status create_phys(PhysChunk** out);
  // Frees a physical chunk mapped nowhere any more and uncounts it.
  Status release_phys(PhysChunk* chunk);
  // Maps `chunk` at chunk index `c` (unmapped) and records it; on failure nothing changed.
  Status attach(size_t c, PhysChunk* chunk);
  // Unmaps one chunk (the caller waited for the streams) and updates the bookkeeping; releases its
  // physical chunk when this was the last mapping.
  Status detach(std::map<size_t, PhysChunk*>::iterator it);
  // After one unmap of `chunk`: counts it, drops one mapping of `chunk`, releases it after the last.
  Status drop_mapping(PhysChunk* chunk);
  // *done = whether every using stream's last recorded event has completed and every issued step
  // has finished (no wait).
  Status uses_done(bool* done);

  // A step count to wait for: the counters' issued() when the unmap was asked for.
  struct Fence {
    std::shared_ptr<const StepCounters> counters;
    uint64_t step;
    bool done() const { return counters->finished() >= step; }
  };
  // Chunks a call unmapped while the streams that used them still ran, and those streams' events.
  struct Pending {
    std::vector<EventHandle> events;                   // owned by uses_
    std::vector<Fence> fences;                         // steps issued by then
    std::vector<std::pair<size_t, PhysChunk*>> chunks;  // chunk index -> its physical chunk
  };
  // Whether p's events and fences are done (wait: blocks until they are).
  Status pending_done(const Pending& p, bool wait, bool* done);
  // Unmaps what is left of `p`'s chunks (its events have completed); on failure the rest stay.
  Status retire(Pending& p);
  // Waits for and retires every pending entry holding a chunk in [first, last): before mapping there.
  Status settle(size_t first, size_t last);

  Backend* backend_;
  char* base_;
  size_t chunk_bytes_;
  size_t num_chunks_;
  std::map<size_t, PhysChunk*> mapped_;  // mapped chunk index -> its physical chunk
  // physical_bytes() of mapped_ as it was when last counted; stale once a mapping changed.
  mutable size_t physical_ = 0;
  mutable bool physical_stale_ = false;
  // Chunks [0, prefix_) are all mapped: a growing tail costs O(new chunks) (times log of the
  // mapped count) per call instead of a scan from chunk 0.
  size_t prefix_ = 0;
  std::vector<std::pair<void*, EventHandle>> uses_;  // stream -> event recorded after its last use
  std::vector<std::shared_ptr<const StepCounters>> counters_;  // use_counters, until they retire
  std::vector<Pending> pending_;
};

}  // namespace pvt

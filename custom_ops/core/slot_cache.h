// SlotCache: one reserved range holding `num_slots` slots of `slot_rows` token rows each,
// batch-major (slot s, token t at byte (s * slot_rows + t) * row_bytes): the flash-attn k_cache
// layout, and the model-wide "token rows that hold every layer" layout (docs/SLOT_CACHE.md). A slot
// holds at most max_seq_len rows; slot_rows >= max_seq_len is its stride.
//
// Each slot is mapped on demand up to its own length, by the host, ahead of the step that needs it
// (reserve); release gives a slot's memory back.
//   - Aligned slots (shape.align_slots, what the Paddle adapter always makes): slot_rows is
//     max_seq_len rounded up so every slot starts on a chunk boundary (padding in virtual memory
//     only: rows past max_seq_len are never mapped). No chunk holds rows of two slots, so a slot's
//     whole chunks can be mapped into another slot (share_prefix: zero-copy prefix sharing).
//   - Unaligned slots (slot_rows == max_seq_len): a chunk at the border of two slots is mapped
//     while either needs it and released when neither does. Cannot share.
// Either way mapped memory follows the sum of the slots' lengths (plus at most one chunk per slot).
//
// Sharing: after share_prefix(src, dst, n) dst's whole chunks below row n are src's physical
// chunks (refcounted: releasing either slot leaves the other intact) and the chunk holding row n,
// if n falls inside one, is dst's own copy. Appending to either slot writes past the shared chunks.
// A write into rows that are shared (after a rollback below the shared prefix) must be announced
// first: make_private(slot, from, to) replaces every shared chunk overlapping those rows by a
// private copy, so the kernels never write shared memory.
//
// mapped_tokens(slot) is the number of leading rows of the slot the cache guarantees mapped: the
// kernels check every read and write against it (kv_mapped in decode_attention.h), so a caller that
// did not reserve gets an error, never a fault.
//
// Threads. Every public method may be called from any thread at any time; the bookkeeping is
// under one mutex. What that alone does not give is memory that stays mapped between an op's check
// of mapped_tokens and its kernels' reads and writes: an op takes a SlotCacheHold (below) over the
// caches it touches before its checks and keeps it until its host work is done, and release() waits
// for every hold to go (reserve() does not: it only adds mappings). Reservations queued on the
// background mapper (reserve_batch, background_mapper.h) come first: every call and every hold
// waits until the batches queued before it are carried out (AheadGate, a host wait); prefetches
// (rows needed later) only release, share_prefix and make_private wait for. Guaranteed then:
//   - CPU: an op's check, append and attention see one state of the slots; a release of a slot
//     the op reads either finished before the op's check (the op refuses: nothing mapped) or waits
//     until the op returned. No fault, no torn read, whatever threads call reserve/release.
//   - CUDA: an op holds the caches while it queues its kernels and records its stream
//     (record_use); a release waits for that hold, then marks the slot unmapped (mapped_tokens 0)
//     and hands its chunks to the region, which unmaps them once every recorded stream's queued
//     work has finished (Region: deferred, checked without blocking at later calls, or collect()),
//     so kernels queued before release() began finish first. Work queued after release() returned
//     reads the refreshed device copy of mapped_tokens and is refused (error flag), never faults.
//     Release never blocks the host on the GPU; a reserve of a slot whose chunks are still pending
//     waits for those chunks' events only.
//   - Not covered: memory read by anything but the slot ops (a plain Paddle op or read_slot's
//     slicing of the cache tensor) while another thread releases that slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "ahead_gate.h"
#include "lookahead_marks.h"
#include "region.h"

namespace pvt {

struct SlotCacheShape {
  int64_t num_slots = 0;
  int64_t max_seq_len = 0;
  int64_t row_bytes = 0;  // bytes of one token row of one slot ([H, D] or [L, 2, Hkv, D] elements)
  bool align_slots = false;  // every slot starts on a chunk boundary (create sets slot_rows)
  int64_t slot_rows = 0;     // a slot's row stride; set by SlotCache::create (ignored on input)
  // Only for a shape SlotCache::create accepted (it checks num_slots * slot_rows * row_bytes fits).
  int64_t slot_bytes() const { return slot_rows * row_bytes; }
};

class SlotCache {
 public:
  // chunk_bytes 0: kDefaultChunkBytes (seq_cache.h); rounded up to the backend granularity.
  static Status create(Device device, const SlotCacheShape& shape, size_t chunk_bytes,
                       std::shared_ptr<SlotCache>* out);
  // The same on a given backend (which must outlive the cache): how the native harness injects
  // failures (Region::create_on).
  static Status create_on(Backend* backend, const SlotCacheShape& shape, size_t chunk_bytes,
                          std::shared_ptr<SlotCache>* out);
  ~SlotCache();
  SlotCache(const SlotCache&) = delete;
  SlotCache& operator=(const SlotCache&) = delete;

  Device device() const { return region_->device(); }
  const SlotCacheShape& shape() const { return shape_; }
  char* data() const { return region_->base(); }
  size_t chunk_bytes() const { return region_->chunk_bytes(); }
  size_t reserved_bytes() const { return region_->reserved_bytes(); }
  // Physical bytes mapped for this cache (a chunk shared by several slots counted once), and the
  // bytes of the further mappings of shared chunks.
  size_t mapped_bytes() const;
  size_t shared_bytes() const;
  int32_t mapped_tokens(int64_t slot) const;
  // A copy of every slot's mapped_tokens, and a counter that changes whenever any of them does
  // (the adapter keeps a device copy and refreshes it only when the version moved).
  std::vector<int32_t> mapped_tokens_all(uint64_t* version) const;

  // Map the chunks covering rows [0, tokens) of `slot` (those already mapped stay). All or nothing;
  // never lowers mapped_tokens. kInvalidArgument for a slot outside [0, num_slots) or tokens < 0,
  // kOutOfRange for tokens > max_seq_len, kOutOfMemory when memory (or the limit) runs out.
  // Messages carry no caller prefix ("slot 9 is out of range [0, 4)"): the caller adds its name.
  Status reserve(int64_t slot, int64_t tokens, void* stream);
  // Takes back reserve() calls that raised `slot` from `old` mapped tokens, for a caller whose
  // companion reservation failed right after (an int8 cache's codes after its scales): the chunks
  // they mapped that no other slot needs are unmapped at once (nothing may have used those rows),
  // mapped_tokens back to `old`. Nothing happens when the slot holds `old` or fewer. Waits for the
  // ops holding the cache, like release. kInvalidArgument for a bad slot or old < 0.
  Status unreserve(int64_t slot, int64_t old);
  // reserve() of every (slots[i], tokens[i]) in order, all or nothing over the batch: on failure
  // every slot is as it was (the chunks the call mapped are unmapped again at once: nothing used
  // them yet). What the background mapper carries out (background_mapper.h). announced: the batch
  // was announced with ahead().enter(kBatch) (the caller, the mapper, leaves it after; this call must not
  // wait for itself); otherwise it waits for the announced batches first, like every other call. kInvalidArgument
  // when the vectors differ in length; per pair the errors of reserve.
  Status reserve_batch(const std::vector<int64_t>& slots, const std::vector<int64_t>& tokens, bool announced);
  // Rows needed later (the background mapper's AheadKind::kPrefetch): reserve(slots[i], tokens[i])
  // in order, each pair under the cache's lock on its own (callers wait at most for one slot's
  // mapping) and all or nothing, stopping at the first error, which is returned; the pairs before it
  // stay mapped. A slot already holding the rows costs one atomic load. Called by the mapper after
  // the gate was entered (it waits for nothing); errors of check_batch as reserve_batch's.
  Status prefetch(const std::vector<int64_t>& slots, const std::vector<int64_t>& tokens);
  // The checks reserve_batch makes before it maps anything (no lock needed: they read the shape).
  Status check_batch(const std::vector<int64_t>& slots, const std::vector<int64_t>& tokens) const;
  // Orders callers after queued background reservations (ahead_gate.h): reserve, reserve_batch and
  // SlotCacheHold wait for queued batches; share_prefix, make_private and release for prefetches too.
  AheadGate& ahead() const { return ahead_; }
  // Watched caches (lookahead.h): reserve and reserve_batch publish each slot's length here, and
  // mark the slots whose next chunk should be mapped; release forgets the slot.
  LookaheadMarks& lookahead() { return lookahead_; }
  // The mapper's look at a watched cache: every marked slot (a released one is skipped) is mapped
  // up to its published length plus lookahead().rows(), rounded up to the end of its chunk (so
  // the next mark comes when the slot enters the next chunk), each slot under the lock on its own
  // as prefetch. *mapped_slots: the slots it mapped. Errors are counted (lookahead().failures())
  // and the first returned; the other slots are still looked at.
  Status map_lookahead(int64_t* mapped_slots);

  // Make `dst` hold rows [0, tokens) of `src` (the same cache): the whole chunks below row `tokens`
  // are mapped to src's physical chunks (no bytes copied), the chunk holding row `tokens` (when it
  // falls inside one) is mapped fresh and src's rows in it copied on `stream`. mapped_tokens(dst)
  // becomes `tokens`. All or nothing. kInvalidArgument for bad slots, src == dst, a cache without
  // aligned slots, tokens < 1, tokens past mapped_tokens(src) (an empty or released src has none),
  // a dst that holds rows (release it first); kOutOfMemory when the copied chunk cannot be mapped.
  Status share_prefix(int64_t src, int64_t dst, int64_t tokens, void* stream);
  // Rows [from, to) of `slot` are about to be written (to clamped to mapped_tokens): every chunk of
  // theirs that another slot maps too is replaced by a private copy first (Region::make_private;
  // waits for the cache's streams, like release). Chunks mapped only here are untouched. On failure
  // the chunks already made private stay so (their bytes are the same); the rest stay shared.
  // kInvalidArgument for a bad slot or from < 0.
  Status make_private(int64_t slot, int64_t from, int64_t to, void* stream);
  // The first row in [from, to) of `slot` that lies in a chunk another slot maps too, or -1. An op
  // that writes those rows checks this first (on the host): a write there would show in the other
  // slot, so it is refused until make_private copied the chunk. -1 as well for a bad slot.
  int64_t first_shared_row(int64_t slot, int64_t from, int64_t to) const;
  // Unmap the slot's chunks that no other slot needs; mapped_tokens(slot) becomes 0. Waits for every
  // SlotCacheHold; the unmaps themselves wait for `stream` and every stream recorded with
  // record_use (work queued on them may still read the slot) without blocking: deferred until their
  // events complete (Region::unmap_range). kInvalidArgument for a slot outside [0, num_slots).
  Status release(int64_t slot, void* stream);
  // Unmaps the released chunks whose streams have finished, without waiting (wait: all, blocking).
  Status collect(bool wait);
  // collect() on every live slot cache of `device`; *pending: chunks still pending after it.
  static Status collect_all(Device device, bool wait, size_t* pending);
  size_t pending_chunks() const;

  // Work queued on `stream` may read or write this cache: a later release waits for it
  // (Region::record_use). The ops call it after queuing their kernels.
  Status record_use(void* stream);
  // The event record_use(stream) records (Region::use_event): a step captured as a CUDA graph
  // records it in the graph (an event-record node, cudaEventRecordExternal), so a release after a
  // launch waits for the launch's work without a record_use call per step. Take it before the
  // capture; the graph must not be launched after this cache is gone. 0 on the host.
  Status use_event(void* stream, EventHandle* event);
  // Steps released by a host store and finished by the device (a StepDoorbell's counters) use this
  // cache: a release defers its unmaps until every step issued by then has finished
  // (Region::use_counters). Nothing to call per step. kInvalidArgument for null.
  Status use_counters(std::shared_ptr<const StepCounters> counters);

  // The live slot cache whose reservation contains `ptr`, or null.
  static std::shared_ptr<SlotCache> find(const void* ptr);

  // Opaque per-cache state an adapter attaches (device copies of mapped_tokens, the error flag);
  // destroyed with the cache.
  std::shared_ptr<void> attachment() const;
  void set_attachment(std::shared_ptr<void> a);

 private:
  friend class SlotCacheHold;
  SlotCache(SlotCacheShape shape, std::unique_ptr<Region> region);
  Status check_slot(int64_t slot) const;
  Status check_reserve(int64_t slot, int64_t tokens) const;
  // reserve() under mu_ (and use_mu_ shared).
  Status reserve_locked(int64_t slot, int64_t tokens);
  // Undoes reserve_locked(slot, ...) of a slot that had `old` tokens mapped: unmaps at once the
  // chunks it mapped that no other slot needs (nothing used them), mapped_tokens back to `old`.
  void unreserve_locked(int64_t slot, int32_t old);
  Status share_prefix_locked(int64_t src, int64_t dst, int64_t tokens, void* stream);
  // Without a lock: whether every slots[i] (in range) holds tokens[i] rows (in range), by values no batch can take back
  // (a reserve_batch that fails lowers what it raised: batch_seq_ is odd while one runs, and a read
  // that overlapped one is not trusted). False sends the caller to the locked path.
  bool rows_mapped(const int64_t* slots, const int64_t* tokens, size_t n) const;
  // Watched caches: lookahead_.publish of every (slots[i], tokens[i]) (nothing when not watched).
  void publish(const int64_t* slots, const int64_t* tokens, size_t n);
  // `rows` of `slot` rounded up to where its last chunk ends (at most max_seq_len).
  int64_t chunk_end_rows(int64_t slot, int64_t rows) const;
  // True when a slot other than `slot` has mapped rows inside chunk `c`.
  bool chunk_needed_by_other(size_t c, int64_t slot) const;

  const SlotCacheShape shape_;
  std::unique_ptr<Region> region_;
  // Held shared by SlotCacheHold and reserve (neither unmaps), exclusive by release; taken before mu_.
  mutable std::shared_mutex use_mu_;
  mutable std::mutex mu_;  // the bookkeeping below and region_
  // Written under mu_; atomic so that reserve and prefetch can see without the lock that a slot
  // already holds the rows asked for (the step path's usual case once rows are mapped ahead).
  std::vector<std::atomic<int32_t>> mapped_;
  std::atomic<uint64_t> batch_seq_{0};  // odd while a reserve_batch may still undo what it mapped
  uint64_t version_ = 0;
  std::shared_ptr<void> attachment_;
  mutable AheadGate ahead_;
  LookaheadMarks lookahead_;
};

// Keeps what is mapped in one or two caches mapped while it lives (release waits for it; reserve
// does not). An op takes one over every cache it touches before it reads mapped_tokens for its
// checks and drops it after its host work (CPU kernels run, CUDA kernels queued and recorded). The
// caches must outlive it. Taken in address order, once per distinct cache, so ops holding (k, v)
// and (v, k) cannot deadlock with releases queued between them. Not reentrant: a thread holding a
// cache must not reserve or release it.
class SlotCacheHold {
 public:
  explicit SlotCacheHold(const SlotCache& a, const SlotCache* b = nullptr);
  SlotCacheHold(const SlotCacheHold&) = delete;
  SlotCacheHold& operator=(const SlotCacheHold&) = delete;

 private:
  std::shared_lock<std::shared_mutex> first_, second_;
};

}  // namespace pvt

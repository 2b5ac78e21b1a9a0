// LookaheadMarks: what a slot cache's step path tells the background mapper without a call
// (issue 30 point 5, "no queue call at the crossing step"). When a cache is watched
// (lookahead.h), every reserve / reserve_batch publishes each slot's length (one relaxed store)
// and, when the slot's rows plus the look-ahead pass what it has mapped (the slot entered a new
// chunk), marks the slot and the cache (two stores). The mapper, waking on a short timed wait,
// takes the marks and maps the slots ahead (SlotCache::map_lookahead). No lock, no syscall, no
// allocation on the step path; a mark set while the mapper scans is kept for its next look.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace pvt {

class LookaheadMarks {
 public:
  explicit LookaheadMarks(size_t slots) : wanted_(slots), marked_(slots) {}  // zeros

  // Rows to keep mapped beyond each slot's published length (0: not watched, publish does nothing).
  void set_rows(int64_t rows) { rows_.store(rows, std::memory_order_release); }
  int64_t rows() const { return rows_.load(std::memory_order_acquire); }

  // The step path: `slot` asked for `tokens` rows and holds `mapped`; `ahead` is rows() (read once
  // a batch by the caller: one load, not one a slot).
  void publish(int64_t slot, int64_t tokens, int64_t mapped, int64_t ahead) {
    if (ahead == 0) return;
    wanted_[static_cast<size_t>(slot)].store(tokens, std::memory_order_relaxed);
    if (tokens + ahead <= mapped) return;
    // Release: the mapper that sees the mark sees the length stored before it.
    if (!marked_[static_cast<size_t>(slot)].load(std::memory_order_relaxed)) {
      marked_[static_cast<size_t>(slot)].store(true, std::memory_order_release);
    }
    if (!any_.load(std::memory_order_relaxed)) any_.store(true, std::memory_order_release);
  }
  // A released slot: nothing to map ahead until it publishes again (under the cache's lock, which
  // the mapper holds when it reads wanted()).
  void forget(int64_t slot) {
    wanted_[static_cast<size_t>(slot)].store(0, std::memory_order_relaxed);
    marked_[static_cast<size_t>(slot)].store(false, std::memory_order_relaxed);
  }
  // The mapper: whether any slot was marked since the last take_any (and clears it), then per slot.
  // Loads first: a look that finds nothing writes nothing, so the step path's lines stay its own.
  bool take_any() { return any_.load(std::memory_order_acquire) && any_.exchange(false, std::memory_order_acq_rel); }
  bool take(int64_t slot) { return marked_[static_cast<size_t>(slot)].exchange(false, std::memory_order_acq_rel); }
  int64_t wanted(int64_t slot) const { return wanted_[static_cast<size_t>(slot)].load(std::memory_order_acquire); }

  // Looks whose mapping failed (kOutOfMemory, a driver error): the step's own reserve then maps
  // what it needs, or reports the error itself. Counted for tests and stats.
  void count_failure() { failures_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

 private:
  // What the step path reads (rows_, the arrays' headers) apart from what the mapper writes (any_,
  // failures_): a look must not take the step's cache line away.
  alignas(64) std::atomic<int64_t> rows_{0};
  std::vector<std::atomic<int64_t>> wanted_;
  std::vector<std::atomic<bool>> marked_;
  alignas(64) std::atomic<bool> any_{false};
  std::atomic<uint64_t> failures_{0};
};

}  // namespace pvt

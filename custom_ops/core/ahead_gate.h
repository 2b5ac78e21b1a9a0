// AheadGate: how a slot cache orders its callers after work queued for it on the background mapper
// (background_mapper.h). enter(kind) is called on the submitting thread when a batch is queued,
// leave(kind) by the mapper when it has carried it out. Two kinds of batch:
//   - a batch (AheadKind::kBatch, all or nothing: what the next step needs): every other call on the
//     cache (reserve, release, share, an op's SlotCacheHold) first waits until none is left
//     (wait_batches), so an op issued after it sees its rows mapped, in program order;
//   - a prefetch (AheadKind::kPrefetch: rows needed steps later, mapped slot by slot): only the calls
//     that take mappings away or move them (release, share_prefix, make_private) wait for it
//     (wait_all), so a released slot is never mapped again by a prefetch queued before the release.
//     Reserve and the ops need not: a prefetch only adds mappings, as a concurrent reserve does, and
//     what a step needs is mapped by then (the step path never waits on the mapper's driver calls).
// A wait covers the work entered before it, not work entered later by other threads (counts of work
// entered and left; the mapper finishes work in the order it was entered).
// The waits are host waits on a host thread (never a device sync); with nothing queued, one atomic load.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace pvt {

enum class AheadKind { kBatch, kPrefetch };

class AheadGate {
 public:
  void enter(AheadKind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    counter(kind).entered.fetch_add(1, std::memory_order_relaxed);
  }
  // The mapper carries work out in the order it was entered (one thread, one queue), so the first
  // `left` entered of each kind are done.
  void leave(AheadKind kind) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      counter(kind).left.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
  }
  // Blocks until every batch (kBatch) entered before this call has left; prefetches may still be
  // queued. Work entered after the call is not waited for, so a caller is never starved by others
  // that keep queuing (waiting for "nothing queued" was: the 16-core H200 hung there).
  void wait_batches() const {
    const uint64_t b = batches_.entered.load(std::memory_order_acquire);
    wait_until([&] { return batches_.left.load(std::memory_order_acquire) >= b; });
  }
  // Blocks until everything entered before this call, batches and prefetches, has left.
  void wait_all() const {
    const uint64_t b = batches_.entered.load(std::memory_order_acquire);
    const uint64_t p = prefetches_.entered.load(std::memory_order_acquire);
    wait_until([&] {
      return batches_.left.load(std::memory_order_acquire) >= b && prefetches_.left.load(std::memory_order_acquire) >= p;
    });
  }
  bool idle() const { return batches_.idle() && prefetches_.idle(); }

 private:
  struct Count {
    std::atomic<uint64_t> entered{0}, left{0};
    bool idle() const { return left.load(std::memory_order_acquire) == entered.load(std::memory_order_acquire); }
  };
  Count& counter(AheadKind kind) { return kind == AheadKind::kBatch ? batches_ : prefetches_; }
  template <class Pred>
  void wait_until(Pred open) const {
    if (open()) return;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, open);
  }

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  Count batches_, prefetches_;
};

}  // namespace pvt

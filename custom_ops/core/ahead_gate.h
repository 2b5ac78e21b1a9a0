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
// The waits are host waits on a host thread (never a device sync); with nothing queued, one atomic load.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace pvt {

enum class AheadKind { kBatch, kPrefetch };

class AheadGate {
 public:
  void enter(AheadKind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    counter(kind).fetch_add(1, std::memory_order_relaxed);
  }
  void leave(AheadKind kind) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      counter(kind).fetch_sub(1, std::memory_order_release);
    }
    cv_.notify_all();
  }
  // Blocks until every entered batch (kBatch) has left; prefetches may still be queued.
  void wait_batches() const { wait_until([&] { return batches_.load(std::memory_order_acquire) == 0; }); }
  // Blocks until everything entered, batches and prefetches, has left.
  void wait_all() const { wait_until([&] { return idle(); }); }
  bool idle() const {
    return batches_.load(std::memory_order_acquire) == 0 && prefetches_.load(std::memory_order_acquire) == 0;
  }

 private:
  std::atomic<int>& counter(AheadKind kind) { return kind == AheadKind::kBatch ? batches_ : prefetches_; }
  template <class Pred>
  void wait_until(Pred open) const {
    if (open()) return;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, open);
  }

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::atomic<int> batches_{0};
  std::atomic<int> prefetches_{0};
};

}  // namespace pvt

// AheadGate: how a slot cache orders its callers after work queued for it on the background mapper
// (background_mapper.h). enter() is called on the submitting thread when a batch of reservations is
// queued, leave() by the mapper when it has carried it out; every other call on the cache
// (reserve, release, share, an op's SlotCacheHold) first waits until nothing entered is left. So a
// release or an op issued after a queued reservation sees it done, in program order, and the wait
// is a host wait on a host thread (never a device sync). When nothing is queued the wait is one
// atomic load.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace pvt {

class AheadGate {
 public:
  void enter() {
    std::lock_guard<std::mutex> lock(mu_);
    queued_.fetch_add(1, std::memory_order_relaxed);
  }
  void leave() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queued_.fetch_sub(1, std::memory_order_release);
    }
    cv_.notify_all();
  }
  // Blocks until every entered batch has left.
  void wait() const {
    if (queued_.load(std::memory_order_acquire) == 0) return;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queued_.load(std::memory_order_acquire) == 0; });
  }
  bool idle() const { return queued_.load(std::memory_order_acquire) == 0; }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::atomic<int> queued_{0};
};

}  // namespace pvt

// A host backend whose map_chunk behaves like the CUDA driver's seen from the host (issue 30,
// the background mapper): it can keep the mapping thread's CPU busy for spin_us per map (cuMemMap +
// cuMemSetAccess are ~35 µs of host time on the H200), block every map until open() (to hold the
// mapper in the middle of a batch), and it records the scheduling policy of the thread that mapped
// (the mapper's, when the mapper maps) and counts the maps made on the thread that built it; fail_map holds one map until let_fail() and fails it. force_other: the mapping thread puts itself back to
// SCHED_OTHER (the policy the mapper had before it ran as SCHED_BATCH), for before/after benches.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/backend.h"

namespace pvt_test {

class SlowMapBackend final : public pvt::Backend {
 public:
  SlowMapBackend() : real_(pvt::host_backend()), builder_(std::this_thread::get_id()) {}
  pvt::Device device() const override { return real_->device(); }
  size_t granularity() const override { return real_->granularity(); }
  pvt::Status reserve(size_t bytes, void** base) override { return real_->reserve(bytes, base); }
  pvt::Status free_reservation(void* base, size_t bytes) override { return real_->free_reservation(base, bytes); }
  pvt::Status create_chunk(size_t bytes, pvt::PhysHandle* h) override { return real_->create_chunk(bytes, h); }
  pvt::Status map_chunk(void* addr, size_t bytes, pvt::PhysHandle h) override {
    if (force_other.load()) {
      sched_param none{};
      (void)pthread_setschedparam(pthread_self(), SCHED_OTHER, &none);
    }
    map_policy.store(sched_getscheduler(0));
    if (std::this_thread::get_id() == builder_) ++builder_maps;
    if (maps_.fetch_add(1) == fail_map) {  // held until let_fail(), then fails as a full device would
      std::unique_lock<std::mutex> lock(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return fail_go_; });
      --waiting_;
      return pvt::Status(pvt::Code::kOutOfMemory, "injected: no memory for this map");
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
      --waiting_;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us.load());
    while (std::chrono::steady_clock::now() < until) {
    }
    return real_->map_chunk(addr, bytes, h);
  }
  pvt::Status unmap_chunk(void* addr, size_t bytes) override { return real_->unmap_chunk(addr, bytes); }
  pvt::Status release_chunk(pvt::PhysHandle h, size_t bytes) override { return real_->release_chunk(h, bytes); }
  pvt::Status copy(void* dst, const void* src, size_t bytes, void* stream) override {
    return real_->copy(dst, src, bytes, stream);
  }
  pvt::Status record_event(void* stream, pvt::EventHandle* e) override { return real_->record_event(stream, e); }
  pvt::Status wait_event(pvt::EventHandle e) override { return real_->wait_event(e); }
  pvt::Status event_done(pvt::EventHandle e, bool* done) override { return real_->event_done(e, done); }
  void destroy_event(pvt::EventHandle e) override { real_->destroy_event(e); }

  // Maps block from close() until open(); wait_blocked() returns once a map is blocked.
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void let_fail() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fail_go_ = true;
    }
    cv_.notify_all();
  }
  void wait_blocked() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }

  std::atomic<int> spin_us{0};
  std::atomic<bool> force_other{false};
  std::atomic<int> map_policy{-1};  // sched_getscheduler of the thread of the last map
  std::atomic<int> builder_maps{0};  // maps made on the thread that built this backend (not the mapper's)
  // The map with this index (0: the first since the backend was made) is held until let_fail(),
  // then fails with kOutOfMemory; -1: none.
  std::atomic<long> fail_map{-1};

 private:
  pvt::Backend* real_;
  const std::thread::id builder_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  bool fail_go_ = false;
  int waiting_ = 0;
  std::atomic<long> maps_{0};
};

}  // namespace pvt_test

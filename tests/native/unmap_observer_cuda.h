// Shared by the CUDA native tests that check unmap order (test_cuda.cu, test_deferred_release.cu,
// test_step_doorbell.cu): the observing backend, the spin kernel (spin_kernel_cuda.cuh) that keeps a reader
// queued, a check of a runtime call, and a check of what a reader copied.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "harness.h"
#include "spin_kernel_cuda.cuh"  // spin_kernel: work that is still queued

namespace pvt_test {

using pvt::Backend;
using pvt::Device;
using pvt::EventHandle;
using pvt::PhysHandle;
using pvt::Status;

// The real CUDA backend with one observation: at every unmap, whether `watch` (an event recorded
// right after a reader's work on another stream) is still pending. An unmap issued while a reader
// may still run is what Region's deferred unmap must prevent; checking it here, before cuMemUnmap,
// keeps the test independent of whatever the driver itself waits for inside cuMemUnmap (on the H200
// a release that waited only for the first stream still passed test_cuda.cu's end-to-end test).
class UnmapObserver final : public Backend {
 public:
  explicit UnmapObserver(Backend* real) : real_(real) {}
  Device device() const override { return real_->device(); }
  size_t granularity() const override { return real_->granularity(); }
  Status reserve(size_t bytes, void** base) override { return real_->reserve(bytes, base); }
  Status free_reservation(void* base, size_t bytes) override { return real_->free_reservation(base, bytes); }
  Status create_chunk(size_t bytes, PhysHandle* h) override { return real_->create_chunk(bytes, h); }
  Status map_chunk(void* addr, size_t bytes, PhysHandle h) override { return real_->map_chunk(addr, bytes, h); }
  Status unmap_chunk(void* addr, size_t bytes) override {
    ++unmaps;
    if ((watch != nullptr && cudaEventQuery(watch) == cudaErrorNotReady) || (running && running())) ++unmaps_while_reading;
    return real_->unmap_chunk(addr, bytes);
  }
  Status release_chunk(PhysHandle h, size_t bytes) override { return real_->release_chunk(h, bytes); }
  Status copy(void* dst, const void* src, size_t bytes, void* stream) override {
    return real_->copy(dst, src, bytes, stream);
  }
  Status record_event(void* stream, EventHandle* e) override { return real_->record_event(stream, e); }
  Status wait_event(EventHandle e) override { return real_->wait_event(e); }
  Status event_done(EventHandle e, bool* done) override { return real_->event_done(e, done); }
  void destroy_event(EventHandle e) override { real_->destroy_event(e); }

  cudaEvent_t watch = nullptr;
  std::function<bool()> running;  // or this: whether the reader may still run (a step not yet finished)
  int unmaps = 0, unmaps_while_reading = 0;

 private:
  Backend* real_;
};

inline bool check_cuda(Report& r, cudaError_t e, const std::string& name) {
  return r.check(e == cudaSuccess, name, cudaGetErrorString(e));
}

// Whether the `bytes` device bytes at `p` are all `value`: copied out on `stream` and waited for (the
// legacy default stream where null: it also waits for the other blocking streams' work; a doorbell's test
// passes a stream of its own, since launches waiting for a ring must not hold the copy). *why says what
// differed, for a failure's message.
inline bool device_bytes_are(const void* p, size_t bytes, unsigned char value, cudaStream_t stream,
                             std::string* why) {
  std::vector<unsigned char> got(bytes);
  cudaError_t e = cudaMemcpyAsync(got.data(), p, bytes, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    *why = std::string("copy: ") + cudaGetErrorString(e);
    return false;
  }
  const auto bad = std::find_if(got.begin(), got.end(), [&](unsigned char b) { return b != value; });
  if (bad == got.end()) return true;
  *why = "byte " + std::to_string(bad - got.begin()) + " is " + std::to_string(*bad) + ", want " + std::to_string(value);
  return false;
}

}  // namespace pvt_test

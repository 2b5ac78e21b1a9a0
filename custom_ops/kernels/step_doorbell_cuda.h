// StepDoorbell: a decode step with no driver call on the scheduler's thread (issue 30 point 5).
//
// Why: with the mapping ahead (lookahead.h) the step path is reserve_batch + one cudaGraphLaunch,
// and the launch alone has a p99 of 16-50 µs on the H200 against a step p50 of 5-15 µs
// (PERFORMANCE_H200.md 6d): the tail is the driver's. Here the launches are made ahead of time by a
// launcher thread, each gated on the device, and the scheduler releases a step by one store to
// host-mapped memory (ring()). What runs per launch is one graph:
//
//   gate (1 thread: step n = ++counter; waits until the host's bell reaches n; then sets the IF
//         condition to "n not cancelled")
//   IF { body }          the caller's captured step (kernels, copies, memsets, child graphs)
//   done (1 thread: writes n to host-mapped memory, so the host waits without a driver call)
//   event records        optional, for other consumers (not the slot cache: see counters())
//
// A slot cache used by these steps takes the doorbell's counters (SlotCache::use_counters): a release
// defers its unmaps until every step rung by then has finished, read from host memory. (The cache's
// use event would not do: a graph node re-records it at each launch, and launches run ahead of the
// rings, so a reserve waiting for a released chunk would wait for a step its own thread must ring.)
//
// The launcher keeps `depth` launches ahead of the last ring; stop() (and the destructor) cancels
// the launched steps that were never rung (their gate sets the condition to 0: the body is skipped,
// done and the events still complete), so no stream is left waiting on a bell.
// Cost: a gate that waits polls host memory from one thread of one SM, only while the stream has
// nothing else to run (the previous step has finished); the bell's store reaches the device in about
// a PCIe round trip.
// Not for Paddle's executor (it launches its own kernels); for programs that capture their step as
// a graph: the native harness and the torch extension's users.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "../core/status.h"
#include "../core/step_counters.h"

namespace pvt {

class StepDoorbell {
 public:
  // body: the step graph (cloned: the caller may destroy it); stream: where the steps run (the
  // launcher owns it from now on: the caller enqueues nothing else there until stop());
  // record_after: events recorded after each step (copied handles; they must outlive this object);
  // depth >= 1: launches kept ahead of the last ring. kInvalidArgument for a null body or stream, a
  // null event, depth < 1, or a body the device cannot run under an IF node (a host node, an event
  // node: the driver's message says which); kDriver for other runtime errors.
  static Status create(cudaGraph_t body, cudaStream_t stream, const std::vector<cudaEvent_t>& record_after,
                       int depth, std::unique_ptr<StepDoorbell>* out);
  ~StepDoorbell();  // stop(), then frees the graph and the words
  StepDoorbell(const StepDoorbell&) = delete;
  StepDoorbell& operator=(const StepDoorbell&) = delete;

  // The step path: releases the next step and returns its number (1, 2, ...). One release store; no
  // driver call, no lock, no allocation. After stop(): kInvalidArgument (nothing is rung). A launch
  // that failed on the launcher thread is reported here (and by stop()).
  Status ring(uint64_t* step);
  // Steps finished on the device (run, or skipped by stop()); a load from host-mapped memory.
  uint64_t done() const;
  // Spins until done() >= step, yielding the CPU once yield_after_us have passed; false after
  // timeout_us. (A scheduler that owns its CPU may spin throughout: yield_after_us >= timeout_us.)
  bool wait_done(uint64_t step, double timeout_us, double yield_after_us = 1000) const;
  // Stops launching, cancels the launched steps not rung, waits (up to 10 s) for every launched step
  // to finish. Idempotent. kDriver if a launch failed or the steps did not finish.
  Status stop();

  // issued() = steps rung, finished() = done(); retired after stop() has drained every launch. The
  // words stay valid as long as any holder keeps them (a cache may outlive the doorbell).
  std::shared_ptr<const StepCounters> counters() const;
  uint64_t rung() const { return rung_; }
  uint64_t launched() const { return launched_.load(std::memory_order_acquire); }
  // The launcher's cudaGraphLaunch times in µs, for benchmarks (read after stop()).
  const std::vector<double>& launch_us() const { return launch_us_; }

 private:
  struct Words;     // the host-mapped words: bell, cancel_after, done
  class Counters;  // owns the words (StepCounters for the caches)
  StepDoorbell() = default;
  void launch_loop();

  std::shared_ptr<Counters> shared_;
  Words* words_ = nullptr;        // host pointer (cudaHostAlloc, mapped), owned by shared_
  Words* words_dev_ = nullptr;    // the same words as the device sees them
  uint64_t* counter_ = nullptr;   // device: steps the gates have started
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int depth_ = 1;
  uint64_t rung_ = 0;             // the scheduler's thread only
  std::atomic<uint64_t> launched_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<int> launch_error_{0};  // a cudaError_t of the launcher; 0 while none
  std::mutex stop_mu_;
  bool stopped_ = false;
  std::thread launcher_;
  std::vector<double> launch_us_;
};

}  // namespace pvt

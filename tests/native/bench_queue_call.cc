// µs of the map_ahead call itself (the step path's "queue next step"), on the host, when every
// slot crosses a chunk: the issue 30 H200 run saw 290-330 µs at p99 when 64-256 slots crossed,
// against 14 µs when none did, though the previous batch had finished and the call only checks
// the batch and queues it. Cause: the kernel's wakeup preemption. A SCHED_OTHER mapper woken by
// the call may be run on the caller's CPU at once, the caller waiting until it is migrated while
// the mapper makes its (CPU-busy) driver calls. The mapper now runs as SCHED_BATCH, which never
// preempts on wakeup. This bench shows both: slots x 1 crossing a step, each map spinning spin_us
// of CPU as the driver would (SlowMapBackend), a step of step_ms sleeping as the host waits for the
// device; first with the mapper as it runs now (SCHED_BATCH), then with the mapper put back to
// SCHED_OTHER from inside its first map. The last column counts the calls during which the caller
// was switched out involuntarily (getrusage RUSAGE_THREAD): preemption, not a lock.
// Usage: bench_queue_call [slots=64] [steps=200] [spin_us=35] [step_ms=8]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/apis.h"
#include "slow_map_backend.h"

using namespace pvt;

namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Involuntary context switches of the calling thread so far (it was preempted, not blocked).
long involuntary_switches() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_nivcsw;
}

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// One phase: `steps` steps, each queueing a prefetch in which every slot maps one chunk more.
void phase(pvt_test::SlowMapBackend& slow, int slots, int steps, int step_ms, bool other) {
  constexpr int64_t kRowBytes = 1024, kRowsPerChunk = 4;  // one 4 KiB page a chunk
  std::shared_ptr<SlotCache> c;
  SlotCacheShape shape{slots, kRowsPerChunk * (steps + 2), kRowBytes};
  shape.align_slots = true;
  if (!SlotCache::create_on(&slow, shape, 4096, &c).ok()) std::exit(1);
  slow.force_other = other;
  std::vector<int64_t> ids(slots), tokens(slots);
  for (int s = 0; s < slots; ++s) ids[s] = s;
  std::vector<double> queue_us;
  int preempted = 0;  // calls during which this thread was switched out involuntarily
  for (int step = 0; step < steps; ++step) {
    for (auto& t : tokens) t = kRowsPerChunk * (step + 1);
    AheadTicket ticket = 0;
    const long switches = involuntary_switches();
    const double t0 = now_us();
    if (!map_ahead(c, ids, tokens, &ticket, AheadKind::kPrefetch).ok()) std::exit(1);
    queue_us.push_back(now_us() - t0);
    preempted += involuntary_switches() != switches;
    forget_ahead(ticket);
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));  // the device step
  }
  for (int s = 0; s < slots; ++s) (void)c->release(s, nullptr);  // waits for the last prefetch
  std::printf("| %s | %d | %.1f | %.1f | %.1f | %.1f | %d of %d |\n", other ? "SCHED_OTHER (before)" : "SCHED_BATCH (now)",
              slots, slots * slow.spin_us.load() / 1e3, pct(queue_us, 0.5), pct(queue_us, 0.99),
              *std::max_element(queue_us.begin(), queue_us.end()), preempted, steps);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int slots = argc > 1 ? std::atoi(argv[1]) : 64;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 200;
  pvt_test::SlowMapBackend slow;
  slow.spin_us = argc > 3 ? std::atoi(argv[3]) : 35;
  const int step_ms = argc > 4 ? std::atoi(argv[4]) : 8;
  std::printf("| mapper thread | slots crossing | mapper busy ms/step | queue call p50 us | p99 | max | calls preempted |\n"
              "|---|---:|---:|---:|---:|---:|---:|\n");
  phase(slow, slots, steps, step_ms, false);  // SCHED_BATCH is set when the thread starts: this first
  phase(slow, slots, steps, step_ms, true);
  return 0;
}

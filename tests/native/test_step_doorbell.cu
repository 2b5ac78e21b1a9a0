// CUDA test of StepDoorbell (kernels/step_doorbell_cuda.h, issue 30 point 5), for the H200: steps
// launched ahead by a launcher thread, each released on the device by a host store.
// - Refusals: a null body or stream, depth < 1, a null event, a body with a host node.
// - Gating: launched steps do not run before their ring; each ring runs exactly one body (a count
//   in host-mapped memory); ring returns while its step still runs; wait_done times out when
//   nothing is rung.
// - stop(): the launched steps never rung skip their body, the stream drains, ring is refused, the
//   counters retire.
// - A slot cache fenced by the doorbell's counters (SlotCache::use_counters): a step writes a
//   slot, spins ~2 ms and copies it out; the slot is released from an idle stream right after its
//   ring. No chunk may be unmapped before that step has finished (an observing backend checks at
//   every unmap), the release is deferred and then retired once the step is done although later
//   launches are still waiting for their rings, a reserve over the pending chunks waits for the
//   step (no deadlock), and the copy holds the step's bytes. --no-counters leaves use_counters out
//   (the break: the release then unmaps under the running step and the test must fail).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/apis.h"
#include "harness.h"
#include "kernels/step_doorbell_cuda.h"
#include "unmap_observer_cuda.h"

using namespace pvt;
using pvt_test::Report;
using pvt_test::UnmapObserver;
using pvt_test::check_cuda;
using pvt_test::device_bytes_are;
using pvt_test::spin_kernel;

namespace {

const Device kGpu = Device::cuda(0);
constexpr long long kSpin2ms = 4000000;  // ~2 ms at 1.98 GHz

__global__ void bump(volatile unsigned* count) { *count = *count + 1; }

void host_fn(void*) {}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A body captured on `s`: bump the host-mapped count, spin `cycles`.
cudaGraph_t capture_count_body(cudaStream_t s, unsigned* count_dev, long long cycles) {
  cudaGraph_t g = nullptr;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  bump<<<1, 1, 0, s>>>(count_dev);
  spin_kernel<<<1, 1, 0, s>>>(cycles);
  cudaStreamEndCapture(s, &g);
  return g;
}

void refusals(Report& r, cudaStream_t s, cudaGraph_t body) {
  std::unique_ptr<StepDoorbell> d;
  r.code(StepDoorbell::create(nullptr, s, {}, 2, &d), Code::kInvalidArgument, "null_body_refused");
  r.code(StepDoorbell::create(body, nullptr, {}, 2, &d), Code::kInvalidArgument, "legacy_stream_refused");
  r.code(StepDoorbell::create(body, s, {}, 0, &d), Code::kInvalidArgument, "depth_0_refused");
  r.code(StepDoorbell::create(body, s, {nullptr}, 2, &d), Code::kInvalidArgument, "null_event_refused");
  cudaGraph_t host_body = nullptr;
  cudaGraphNode_t n;
  cudaHostNodeParams hp = {};
  hp.fn = host_fn;
  cudaGraphCreate(&host_body, 0);
  cudaGraphAddHostNode(&n, host_body, nullptr, 0, &hp);
  const Status st = StepDoorbell::create(host_body, s, {}, 2, &d);
  std::printf("info a body with a host node: %s\n", st.to_string().c_str());
  r.code(st, Code::kInvalidArgument, "body_with_a_host_node_refused");
  r.check(d == nullptr, "nothing_made_on_refusal");
  cudaGraphDestroy(host_body);
  (void)cudaGetLastError();
  r.check(cudaStreamQuery(s) == cudaSuccess, "stream_left_idle_after_refusals");
}

void gating(Report& r, cudaStream_t s, cudaGraph_t body, volatile unsigned* count) {
  std::unique_ptr<StepDoorbell> d;
  if (!r.ok(StepDoorbell::create(body, s, {}, 3, &d), "create depth 3")) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  r.eq(d->launched(), 3, "three_launched_ahead");
  r.eq(*count, 0, "no_body_runs_before_its_ring");
  r.eq(d->done(), 0, "nothing_done_before_a_ring");
  r.check(!d->wait_done(1, 5000), "wait_done_times_out_when_nothing_is_rung");
  bool each_once = true, returned_early = true;
  std::vector<double> ring_us;
  for (uint64_t want = 1; want <= 10; ++want) {
    uint64_t n = 0;
    const double t0 = now_us();
    const Status st = d->ring(&n);
    ring_us.push_back(now_us() - t0);
    if (!r.ok(st, "ring") || !r.eq(n, want, "ring numbers steps")) return;
    returned_early = returned_early && d->done() < n;  // its body spins ~1 ms
    if (!d->wait_done(n, 2e6)) {
      r.check(false, "step_finished_within_2_s", std::to_string(n));
      return;
    }
    each_once = each_once && *count == n && d->done() == n;
  }
  r.check(each_once, "each_ring_runs_exactly_one_body");
  r.check(returned_early, "ring_returns_while_its_step_runs");
  std::sort(ring_us.begin(), ring_us.end());
  std::printf("info ring(): median %.2f us, max %.2f us (a store)\n", ring_us[ring_us.size() / 2], ring_us.back());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const uint64_t launched = d->launched();
  r.check(launched >= 11 && launched <= 13, "launcher_keeps_depth_ahead", std::to_string(launched));
  const auto counters = d->counters();
  r.ok(d->stop(), "stop");
  r.eq(*count, 10, "stop_skips_the_bodies_never_rung");
  r.eq(d->done(), d->launched(), "every_launch_finished_after_stop");
  r.check(cudaStreamQuery(s) == cudaSuccess, "stream_drained_after_stop");
  uint64_t n = 0;
  r.code(d->ring(&n), Code::kInvalidArgument, "ring_after_stop_refused");
  r.check(counters->retired() && counters->issued() == counters->finished(), "counters_retire_after_stop");
  r.ok(d->stop(), "stop_twice");
  d.reset();
  r.eq(counters->finished(), launched, "counters_outlive_the_doorbell");
}

__global__ void fill(unsigned char* p, size_t n, unsigned char v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}

void fenced_cache(Report& r, cudaStream_t s, bool no_counters) {
  Backend* real = nullptr;
  if (!r.ok(get_backend(kGpu, &real), "backend")) return;
  UnmapObserver obs(real);
  SlotCacheShape shape;
  shape.num_slots = 4;
  shape.max_seq_len = 4096;
  shape.row_bytes = 2048;  // a 2 MiB chunk holds 1024 rows
  shape.align_slots = true;
  std::shared_ptr<SlotCache> cache;
  if (!r.ok(SlotCache::create_on(&obs, shape, 0, &cache), "cache: create")) return;
  const int64_t slot = 1;
  const size_t bytes = 2048 * 2048;  // 2048 rows: two chunks
  unsigned char* base = reinterpret_cast<unsigned char*>(cache->data() + slot * cache->shape().slot_bytes());
  void* out = nullptr;
  cudaStream_t cap = nullptr, idle = nullptr;
  if (!check_cuda(r, cudaMalloc(&out, bytes), "cache: out") ||
      !check_cuda(r, cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking), "cache: capture stream") ||
      !check_cuda(r, cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking), "cache: idle stream"))
    return;
  // Mapped before the capture: a copy node's addresses are looked at when the graph is built.
  if (!r.ok(cache->reserve(slot, 2048, nullptr), "cache: reserve before the capture")) return;
  // The step: write the slot, spin ~2 ms, copy the slot out (reads it at the end of the step).
  cudaGraph_t body = nullptr;
  cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal);
  fill<<<64, 256, 0, cap>>>(base, bytes, 0x5a);
  spin_kernel<<<1, 1, 0, cap>>>(kSpin2ms);
  cudaMemcpyAsync(out, base, bytes, cudaMemcpyDeviceToDevice, cap);
  if (!check_cuda(r, cudaStreamEndCapture(cap, &body), "cache: capture")) return;
  std::unique_ptr<StepDoorbell> d;
  if (!r.ok(StepDoorbell::create(body, s, {}, 2, &d), "cache: doorbell")) return;
  if (!no_counters) r.ok(cache->use_counters(d->counters()), "cache: use_counters");
  uint64_t reading = 0;  // the step that reads the slot (0: none)
  obs.running = [&] { return d->done() < reading; };
  std::vector<double> us;
  bool deferred = true, retired_after_step = true, contents_ok = true, reserve_waited = true;
  const int unmaps_before = obs.unmaps;
  for (int round = 0; round < 10; ++round) {
    if (!r.ok(cache->reserve(slot, 2048, nullptr), "cache: reserve")) break;
    uint64_t n = 0;
    if (!r.ok(d->ring(&n), "cache: ring")) break;
    reading = n;
    const double t0 = now_us();
    const Status st = cache->release(slot, idle);  // nothing queued on `idle`: only the fence orders it
    us.push_back(now_us() - t0);
    if (!r.ok(st, "cache: release")) break;
    deferred = deferred && cache->pending_chunks() == 2 && d->done() < n;
    if (round % 2 == 1) {  // a reserve over the pending chunks waits for step n, not for a later ring
      const Status again = cache->reserve(slot, 2048, nullptr);
      reserve_waited = reserve_waited && again.ok() && d->done() >= n;
      r.ok(cache->release(slot, idle), "cache: release again");
    }
    if (!d->wait_done(n, 2e6)) {
      r.check(false, "cache: step finished within 2 s");
      break;
    }
    (void)cache->collect(false);
    retired_after_step = retired_after_step && cache->pending_chunks() == 0;
    std::string why;
    contents_ok = contents_ok && device_bytes_are(out, bytes, 0x5a, idle, &why);
  }
  r.ok(d->stop(), "cache: stop");
  obs.running = nullptr;
  r.check(deferred, "cache: release_deferred_while_its_step_runs");
  r.check(retired_after_step, "cache: retired_once_the_step_finished_though_later_launches_wait");
  r.check(reserve_waited, "cache: reserve_over_pending_chunks_waits_for_the_step");
  r.eq(obs.unmaps_while_reading, 0, "cache: no_unmap_while_the_step_may_read");
  r.check(obs.unmaps - unmaps_before >= 20, "cache: every_release_unmapped", std::to_string(obs.unmaps - unmaps_before));
  r.check(contents_ok, "cache: the_step_copied_the_bytes_it_wrote");
  std::sort(us.begin(), us.end());
  if (!us.empty()) {
    std::printf("info release right after a ring (2 chunks, ~2 ms step): median %.1f us, max %.1f us\n",
                us[us.size() / 2], us.back());
  }
  d.reset();
  cache.reset();
  cudaGraphDestroy(body);
  cudaFree(out);
  cudaStreamDestroy(cap);
  cudaStreamDestroy(idle);
}

}  // namespace

int main(int argc, char** argv) {
  const bool no_counters = argc > 1 && std::strcmp(argv[1], "--no-counters") == 0;
  Report r;
  cudaStream_t s = nullptr, cap = nullptr;
  unsigned* count = nullptr;
  unsigned* count_dev = nullptr;
  if (!check_cuda(r, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream") ||
      !check_cuda(r, cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking), "capture stream") ||
      !check_cuda(r, cudaHostAlloc(reinterpret_cast<void**>(&count), sizeof(unsigned), cudaHostAllocMapped), "count") ||
      !check_cuda(r, cudaHostGetDevicePointer(reinterpret_cast<void**>(&count_dev), count, 0), "count dev"))
    return r.finish();
  *count = 0;
  cudaGraph_t body = capture_count_body(cap, count_dev, kSpin2ms / 2);
  if (!r.check(body != nullptr, "capture the counting body")) return r.finish();
  refusals(r, s, body);
  gating(r, s, body, count);
  fenced_cache(r, s, no_counters);
  cudaGraphDestroy(body);
  cudaFreeHost(count);
  return r.finish();
}

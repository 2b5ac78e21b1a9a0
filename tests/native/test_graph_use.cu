// A step captured as a CUDA graph records the slot cache's use event itself (SlotCache::use_event,
// issue 30 point 5): a release after a graph launch must wait for the graph's work as after a
// record_use. For the H200: the graph writes a slot (memset), spins ~2 ms, copies the slot out and
// records two events as event-record nodes (cudaEventRecordExternal): the observer's `read_done`
// and the cache's use event. Each round re-reserves the slot, launches the graph and releases the
// slot from another, idle stream, so only the graph's node can make the release wait. Checks: the
// release returns in microseconds with its chunks pending, no chunk is unmapped while the copy may
// run (UnmapObserver), the copy holds the graph's bytes, collect() retires all after the stream.
// --no-event-node captures the graph without the use-event node (the break: the release then
// unmaps under the running graph and the test must fail). Also: use_event on a host cache is 0.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/apis.h"
#include "harness.h"
#include "unmap_observer_cuda.h"

using namespace pvt;
using pvt_test::Report;
using pvt_test::UnmapObserver;

namespace {

const Device kGpu = Device::cuda(0);

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

bool cuda_ok(Report& r, cudaError_t e, const std::string& name) {
  return r.check(e == cudaSuccess, name, cudaGetErrorString(e));
}

}  // namespace

int main(int argc, char** argv) {
  const bool no_event_node = argc > 1 && std::strcmp(argv[1], "--no-event-node") == 0;
  Report r;
  {
    std::shared_ptr<SlotCache> host;
    EventHandle e = 1;
    r.ok(SlotCache::create(Device::host(), SlotCacheShape{2, 16, 64}, 0, &host), "host: create");
    r.ok(host->use_event(nullptr, &e), "host: use_event");
    r.eq(e, 0, "host: no event to record");
  }
  Backend* real = nullptr;
  if (!r.ok(get_backend(kGpu, &real), "backend")) return r.finish();
  UnmapObserver obs(real);
  SlotCacheShape shape;
  shape.num_slots = 4;
  shape.max_seq_len = 4096;
  shape.row_bytes = 2048;  // a 2 MiB chunk holds 1024 rows
  shape.align_slots = true;
  std::shared_ptr<SlotCache> cache;
  if (!r.ok(SlotCache::create_on(&obs, shape, 0, &cache), "create")) return r.finish();
  cudaStream_t s = nullptr, idle = nullptr;
  cudaEvent_t read_done = nullptr;
  void* out = nullptr;
  const size_t bytes = 2048 * 2048;  // 2048 rows: two chunks
  if (!cuda_ok(r, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream") ||
      !cuda_ok(r, cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking), "idle stream") ||
      !cuda_ok(r, cudaEventCreateWithFlags(&read_done, cudaEventDisableTiming), "event") ||
      !cuda_ok(r, cudaMalloc(&out, bytes), "out"))
    return r.finish();
  const int64_t slot = 1;
  char* base = cache->data() + slot * cache->shape().slot_bytes();
  if (!r.ok(cache->reserve(slot, 2048, s), "first reserve")) return r.finish();
  EventHandle use = 0;
  if (!r.ok(cache->use_event(s, &use), "use_event") || !r.check(use != 0, "use_event: an event")) return r.finish();
  spin_kernel<<<1, 1, 0, s>>>(1000);  // loads the module outside the capture
  cudaStreamSynchronize(s);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  const long long spin_cycles = 4000000;  // ~2 ms at 1.98 GHz
  cuda_ok(r, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture begins");
  cudaMemsetAsync(base, 0x5a, bytes, s);
  spin_kernel<<<1, 1, 0, s>>>(spin_cycles);
  cudaMemcpyAsync(out, base, bytes, cudaMemcpyDeviceToDevice, s);
  cudaEventRecordWithFlags(read_done, s, cudaEventRecordExternal);
  if (!no_event_node) cudaEventRecordWithFlags(reinterpret_cast<cudaEvent_t>(use), s, cudaEventRecordExternal);
  if (!cuda_ok(r, cudaStreamEndCapture(s, &graph), "capture ends") ||
      !cuda_ok(r, cudaGraphInstantiate(&exec, graph, 0), "instantiate"))
    return r.finish();
  obs.watch = read_done;
  std::vector<double> us;
  bool deferred = true, released_at_once = true, contents_ok = true;
  for (int round = 0; round < 10; ++round) {
    if (round > 0 && !r.ok(cache->reserve(slot, 2048, s), "reserve again")) break;
    if (!cuda_ok(r, cudaGraphLaunch(exec, s), "launch")) break;
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = cache->release(slot, idle);  // nothing queued on `idle`: only the graph's node orders it
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (!r.ok(st, "release")) break;
    released_at_once = released_at_once && cache->mapped_tokens(slot) == 0;
    deferred = deferred && cache->pending_chunks() == 2 && cudaEventQuery(read_done) == cudaErrorNotReady;
    cudaStreamSynchronize(s);
    (void)cache->collect(false);
    std::vector<unsigned char> got(bytes);
    const cudaError_t copied = cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost);
    contents_ok = contents_ok && copied == cudaSuccess &&
                  std::all_of(got.begin(), got.end(), [](unsigned char b) { return b == 0x5a; });
  }
  r.check(released_at_once, "slot_reads_as_released_at_once");
  r.check(deferred, "unmaps_deferred_while_the_graph_runs");
  r.eq(cache->pending_chunks(), 0, "collect_after_the_stream_retires_all");
  r.eq(obs.unmaps_while_reading, 0, "no_unmap_while_the_graph_may_read");
  r.check(obs.unmaps >= 20, "every_release_unmapped", std::to_string(obs.unmaps));
  r.check(contents_ok, "the_graph_copied_the_bytes_it_wrote");
  std::sort(us.begin(), us.end());
  if (!us.empty()) {
    std::printf("info release after a graph launch (2 chunks, ~2 ms queued): median %.1f us, max %.1f us\n",
                us[us.size() / 2], us.back());
    r.check(us[us.size() / 2] < 100.0, "release_does_not_wait_for_the_graph", std::to_string(us[us.size() / 2]));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cache.reset();
  r.eq(memory_stats(kGpu).mapped_bytes, 0, "destroyed_unmaps_all");
  cudaFree(out);
  cudaEventDestroy(read_done);
  cudaStreamDestroy(s);
  cudaStreamDestroy(idle);
  return r.finish();
}

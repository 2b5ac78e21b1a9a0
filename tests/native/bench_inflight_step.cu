// Host µs per inflight step (issue 30 point 5), for the H200: a Llama-3-8B-shaped token-row slot
// cache (32 layers x K,V x 8 kv heads x 128 x fp16 = 128 KiB a token row, 16 rows a 2 MiB chunk,
// max_seq_len 8192) with 64 and 256 slots. A step is what the scheduler does on the host: make the
// step's rows mapped, launch the step (a kernel writing every slot's new row at positions passed
// as kernel parameters + a spin kernel standing for the model, `step_ms` long), record the cache's
// use; then (outside the timing) wait for the step, as sampling does. Patterns (run_pattern):
// (a) none crosses, (b) the average rate, (c) every slot crosses in the same step (decode: every
// 16th step; timed over those steps), (s) every slot crosses every step (16 rows a step).
// Three ways to map (Mapping): before = reserve on the step path, no pool; after, next step = the
// pool + the next step's rows queued after the launch as a batch, waited for at the next step
// (the design measured first); after, a chunk ahead = the pool + a prefetch of a whole chunk
// beyond the next step, so a slot's crossing was mapped 16 steps earlier and the step path's
// reserve_batch takes no lock. Every call on the step path is timed: the table gives p99 and max of
// each kind. Then time to first token: 256 prompts of 512 tokens arrive at once: reserve 256 slots
// x 512 rows, launch a prefill-sized step, wait; with and without the pool, with 2 and 32 MiB chunks.
// A fourth way (issue 30 point 5, section 6d of PERFORMANCE_H200.md): the step as one CUDA graph
// launch on a watched cache (lookahead.h). The graph holds the row-writing kernel (positions in a
// device array the graph itself advances by the step's growth, exactly what the host mirrors for
// reserve_batch), the model's spin kernel and an event-record node of the cache's use event
// (SlotCache::use_event), so the host step path is reserve_batch (lock-free: the mapper mapped the
// chunk ahead on its own) + cudaGraphLaunch, the same at crossing and other steps.
// A fifth (section 6e): the same graph's body launched ahead by StepDoorbell's launcher thread
// (kernels/step_doorbell_cuda.h), each launch gated on the device until the host rings it; the
// cache fenced by the doorbell's counters (SlotCache::use_counters). The step path is reserve_batch
// + ring (one store to host-mapped memory): no driver call. The step's wall time (host step start
// to the device's done, minus the model's step) shows what the gate adds on the device.
// Usage: bench_inflight_step [--cover] [--focus] [--pin] [--slots N] [--doorbell-only] [--plain-wait]
//   --cover: the zero cover at 64 MiB (doubles the driver time of each mapping; default off, the
//   library's default); --focus: only (a) and (c), the graph launch and the doorbell on a watched
//   cache (400 / 1600 steps: 100 crossing steps), no time to first token; --pin: the mapper and
//   launcher threads on CPUs 1.., this (step) thread on CPU 0; --slots N: only N slots;
//   --doorbell-only (with --focus): the doorbell's rows alone; --plain-wait: see g_plain_wait.
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/apis.h"
#include "kernels/step_doorbell_cuda.h"
#include "step_timing.cuh"

using namespace pvt;
using namespace pvt_bench;

namespace {

const Device kGpu = Device::cuda(0);
constexpr int64_t kRowBytes = 131072, kMaxSeqLen = 8192, kBaseLen = 512;
constexpr size_t kChunk = size_t(2) << 20;

#define OK(x)                                                                          \
  do {                                                                                 \
    Status s_ = (x);                                                                   \
    if (!s_.ok()) {                                                                    \
      std::printf("FAIL %s: %s (line %d)\n", #x, s_.to_string().c_str(), __LINE__);   \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// The step's positions, passed by value as kernel parameters (1 KiB at 256 slots; the limit is
// 4 KiB): no cudaMemcpyAsync on the step path (it cost 20-40 µs at p99 in this VM).
constexpr int kMaxSlots = 256;
struct Positions {
  int32_t row[kMaxSlots];
};

// One block per slot writes the row at pos.row[slot] (16-byte stores).
__global__ void write_rows(char* base, Positions pos, int64_t slot_bytes, int64_t row_bytes) {
  uint4* row = reinterpret_cast<uint4*>(base + blockIdx.x * slot_bytes + int64_t(pos.row[blockIdx.x]) * row_bytes);
  for (int64_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x) row[i] = make_uint4(blockIdx.x, 1, 2, 3);
}

// The graph's version: one block per slot writes the row at pos[slot], then moves pos[slot] on by
// `growth` for the next launch (the host's reserve_batch mirrors the same lengths).
__global__ void write_rows_advance(char* base, int32_t* pos, int64_t slot_bytes, int64_t row_bytes, int growth) {
  const int32_t at = pos[blockIdx.x];
  uint4* row = reinterpret_cast<uint4*>(base + blockIdx.x * slot_bytes + int64_t(at) * row_bytes);
  for (int64_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x) row[i] = make_uint4(blockIdx.x, 1, 2, 3);
  __syncthreads();
  if (threadIdx.x == 0) pos[blockIdx.x] = at + growth;
}

struct Timer {  // every call of each kind on the step path
  // Keyed by the literal's address and reserved ahead: no allocation inside a timed step (a
  // vector's growth or a std::string key would show in the step's tail).
  std::vector<std::pair<const char*, std::vector<double>>> calls;
  Timer() { calls.reserve(16); }
  std::vector<double>& of(const char* what) {
    for (auto& c : calls) {
      if (c.first == what) return c.second;
    }
    calls.emplace_back(what, std::vector<double>());
    calls.back().second.reserve(1 << 14);
    return calls.back().second;
  }
  template <class F>
  void time(const char* what, F fn) {
    std::vector<double>& v = of(what);
    const double t0 = now_us();
    fn();
    v.push_back(now_us() - t0);
  }
  void print() const {  // "kind p50/p99/max" per kind
    for (const auto& c : calls) {
      std::printf(" %s %.1f/%.1f/%.1f;", c.first, pct(c.second, 0.5), pct(c.second, 0.99),
                  *std::max_element(c.second.begin(), c.second.end()));
    }
  }
};

struct Ctx {
  std::shared_ptr<SlotCache> cache;
  int slots = 0;
  long long cycles_per_ms = 0;
  cudaStream_t stream = nullptr;
};

void reset_slots(Ctx& c) {
  for (int s = 0; s < c.slots; ++s) OK(c.cache->release(s, c.stream));
  OK(c.cache->collect(true));
}

// How the step's rows get mapped.
enum class Mapping {
  kBefore,     // SlotCache::reserve per slot on the step path, no pool
  kNextStep,   // pool + the next step's rows queued as a batch after the launch, its ticket waited
  kChunkAhead,  // pool + a whole chunk more than the next step needs queued as a prefetch after the
                // launch; the step path's reserve_batch finds its rows mapped (no lock, no wait)
  kGraph,       // pool + a watched cache (the mapper maps a chunk ahead on its own, nothing queued)
                // + the step as one graph launch (write_rows_advance, spin, use-event record)
  kDoorbell     // as kGraph, but launched ahead by StepDoorbell and released by ring(): a store
};
const char* name(Mapping m) {
  switch (m) {
    case Mapping::kBefore: return "before: reserve on the step";
    case Mapping::kNextStep: return "after: next step ahead";
    case Mapping::kChunkAhead: return "after: a chunk ahead (queued prefetch)";
    case Mapping::kGraph: return "after: watched + one graph launch";
    case Mapping::kDoorbell: return "after: watched + doorbell (a store)";
  }
  return "?";
}

// --plain-wait: the step thread waits for a doorbell step in a loop of plain loads (no pause
// instruction, so a hypervisor's pause-loop exits cannot take its CPU between steps).
bool g_plain_wait = false;

// --pin (pin_threads): the background threads' CPUs (1..) and the step thread's (0).
bool g_pinned = false;
cpu_set_t g_background, g_step;

// Runs `fn` (which starts a thread: it inherits the mask) on the background CPUs when pinned.
template <class F>
void on_background_cpus(F fn) {
  if (g_pinned) pthread_setaffinity_np(pthread_self(), sizeof(g_background), &g_background);
  fn();
  if (g_pinned) pthread_setaffinity_np(pthread_self(), sizeof(g_step), &g_step);
}

// The step captured once as a graph on c.stream (Mapping::kGraph, kDoorbell); `pos` is the device
// array of the rows it writes, advanced by `growth` per launch. kGraph: the graph records the
// cache's use event and is launched by the step path. kDoorbell: the graph is the body of a
// StepDoorbell (no event node: the cache uses the doorbell's counters) launched ahead.
struct GraphStep {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int32_t* pos = nullptr;
  std::unique_ptr<StepDoorbell> doorbell;
  GraphStep(Ctx& c, const std::vector<int64_t>& first_rows, int growth, double step_ms, bool with_doorbell) {
    std::vector<int32_t> host(first_rows.begin(), first_rows.end());
    CK(cudaMalloc(&pos, host.size() * sizeof(int32_t)));
    CK(cudaMemcpy(pos, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    EventHandle use = 0;  // the event a release checks for c.stream: the graph records it
    if (!with_doorbell) OK(c.cache->use_event(c.stream, &use));
    CK(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal));
    write_rows_advance<<<c.slots, 256, 0, c.stream>>>(c.cache->data(), pos, c.cache->shape().slot_bytes(), kRowBytes, growth);
    spin_kernel<<<1, 1, 0, c.stream>>>(static_cast<long long>(step_ms * c.cycles_per_ms));
    if (!with_doorbell) CK(cudaEventRecordWithFlags(reinterpret_cast<cudaEvent_t>(use), c.stream, cudaEventRecordExternal));
    CK(cudaStreamEndCapture(c.stream, &graph));
    if (with_doorbell) {
      on_background_cpus([&] { OK(StepDoorbell::create(graph, c.stream, {}, 2, &doorbell)); });
      OK(c.cache->use_counters(doorbell->counters()));
      return;
    }
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphUpload(exec, c.stream));
    CK(cudaStreamSynchronize(c.stream));
  }
  ~GraphStep() {
    if (doorbell) OK(doorbell->stop());
    doorbell.reset();
    if (exec) cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(pos);
  }
};

// The control of the doorbell's rows: reserve_batch's fast path (rows_mapped + publish: per slot a range
// check, a load of the slot's mapped rows compared with its length, a store of the length) on arrays no
// other thread touches, timed in the same loop just before the step. Its spread is this machine's and
// this thread's, not the cache's lines shared with the mapper and the launcher: where the control's p99
// sits as far above its p50 as the step's does, the step's tail is not the library's.
struct Control {
  std::vector<std::atomic<int32_t>> mapped;
  std::vector<std::atomic<int64_t>> wanted;
  std::atomic<uint64_t> seq{0};
  explicit Control(size_t n) : mapped(n), wanted(n) {
    for (auto& m : mapped) m.store(static_cast<int32_t>(kMaxSeqLen));
  }
  bool pass(const std::vector<int64_t>& slots, const std::vector<int64_t>& tokens) {
    const uint64_t before = seq.load();
    for (size_t i = 0; i < slots.size(); ++i) {
      const bool in_range = slots[i] >= 0 && slots[i] < static_cast<int64_t>(mapped.size()) && tokens[i] >= 0 &&
                            tokens[i] <= kMaxSeqLen;
      if (!in_range) return false;
      if (tokens[i] > mapped[static_cast<size_t>(slots[i])].load()) return false;
    }
    if (seq.load() != before) return false;
    for (size_t i = 0; i < slots.size(); ++i) wanted[static_cast<size_t>(slots[i])].store(tokens[i], std::memory_order_relaxed);
    return true;
  }
};

// Waits (up to 5 s) until the mapper has mapped every slot `rows` past len (a watched cache).
void wait_mapped_ahead(Ctx& c, const std::vector<int64_t>& len, int64_t rows) {
  const double until = now_us() + 5e6;
  for (int s = 0; s < c.slots; ++s) {
    while (c.cache->mapped_tokens(s) < std::min(len[s] + rows, kMaxSeqLen)) {
      if (now_us() > until) {
        std::printf("FAIL the mapper did not map slot %d ahead within 5 s\n", s);
        std::exit(1);
      }
      std::this_thread::yield();
    }
  }
}

// One pattern: (a) no growth; (b) 1 row a step, slots staggered (1/16 cross a step); (c) 1 row a
// step, every slot crossing in the same step (every 16th step: its p50/p99 are over those steps
// only); (s) sustained: 16 rows a step, every slot crosses every step (a chunked prefill's rate).
void run_pattern(Ctx& c, Mapping mode, char pattern, int steps, double step_ms) {
  const int64_t rows_per_chunk = static_cast<int64_t>(c.cache->chunk_bytes()) / kRowBytes;
  const int64_t growth = pattern == 'a' ? 0 : pattern == 's' ? rows_per_chunk : 1;
  std::vector<int64_t> len(c.slots), slots(c.slots);
  // (c): one row before a chunk's end, so the first step crosses; (a)/(s): one row into a chunk.
  const int64_t base = pattern == 'c' ? kBaseLen : kBaseLen + 1;
  for (int s = 0; s < c.slots; ++s) {
    slots[s] = s;
    len[s] = base + (pattern == 'b' ? s % rows_per_chunk : 0);
    OK(c.cache->reserve(s, len[s], nullptr));
  }
  auto grown = [&](const std::vector<int64_t>& l, int64_t by) {
    std::vector<int64_t> n(l);
    for (auto& x : n) x = std::min(x + by, kMaxSeqLen);
    return n;
  };
  AheadTicket ticket = 0;
  // Before the loop, as a scheduler does when a request is admitted: the first step's rows (and,
  // a chunk ahead, the chunk after them) queued and carried out.
  if (mode == Mapping::kNextStep) {  // carried out before the first step (its wait then finds it done)
    OK(map_ahead(c.cache, slots, grown(len, growth), &ticket));
    while (!ahead_done(ticket)) std::this_thread::yield();
  }
  if (mode == Mapping::kChunkAhead) {
    OK(map_ahead(c.cache, slots, grown(len, growth + rows_per_chunk), &ticket, AheadKind::kPrefetch));
    OK(wait_ahead(ticket));
  }
  std::unique_ptr<GraphStep> graph;
  const bool graphed = mode == Mapping::kGraph || mode == Mapping::kDoorbell;
  if (graphed) {  // watched before the lengths are published, then the first look
    OK(watch_ahead(c.cache, rows_per_chunk));
    OK(c.cache->reserve_batch(slots, len, false));
    wait_mapped_ahead(c, len, rows_per_chunk);
    std::vector<int64_t> first_rows(len);
    for (auto& r : first_rows) r += growth - 1;  // the first step writes row next - 1
    graph.reset(new GraphStep(c, first_rows, static_cast<int>(growth), step_ms, mode == Mapping::kDoorbell));
  }
  Timer timer;
  std::vector<double> host, crossing_host, wall_over;  // wall_over: step start to done, minus the model
  host.reserve(steps);
  crossing_host.reserve(steps);
  wall_over.reserve(steps);
  double crossings = 0;
  Positions pos{};
  Control control(static_cast<size_t>(c.slots));
  for (int step = 0; step < steps; ++step) {
    const std::vector<int64_t> next = grown(len, growth);
    int crossed = 0;
    for (int s = 0; s < c.slots; ++s) crossed += (next[s] * kRowBytes + kChunk - 1) / kChunk != (len[s] * kRowBytes + kChunk - 1) / kChunk;
    timer.time("empty timed region", [] {});
    if (mode == Mapping::kDoorbell) {
      timer.time("control: the fast path on private arrays", [&] {
        if (!control.pass(slots, next)) {
          std::printf("FAIL the control's pass refused a step\n");
          std::exit(1);
        }
      });
    }
    const double t0 = now_us();
    uint64_t rung = 0;
    if (mode == Mapping::kDoorbell) {
      timer.time("reserve_batch (watched)", [&] { OK(c.cache->reserve_batch(slots, next, false)); });
      timer.time("ring (a store)", [&] { OK(graph->doorbell->ring(&rung)); });
    } else if (mode == Mapping::kGraph) {
      timer.time("reserve_batch (watched)", [&] { OK(c.cache->reserve_batch(slots, next, false)); });
      timer.time("cudaGraphLaunch", [&] { CK(cudaGraphLaunch(graph->exec, c.stream)); });
    } else if (mode == Mapping::kNextStep) {
      timer.time("wait for the ticket", [&] { OK(wait_ahead(ticket)); });
    } else if (mode == Mapping::kChunkAhead) {
      timer.time("reserve_batch (mapped ahead)", [&] { OK(c.cache->reserve_batch(slots, next, false)); });
    } else {
      for (int s = 0; s < c.slots; ++s) timer.time("reserve (maps on the step)", [&] { OK(c.cache->reserve(s, next[s], nullptr)); });
    }
    if (!graphed) {
      for (int s = 0; s < c.slots; ++s) pos.row[s] = static_cast<int32_t>(next[s] - 1);
      timer.time("launch write_rows", [&] {
        write_rows<<<c.slots, 256, 0, c.stream>>>(c.cache->data(), pos, c.cache->shape().slot_bytes(), kRowBytes);
      });
      timer.time("launch model step", [&] { spin_kernel<<<1, 1, 0, c.stream>>>(static_cast<long long>(step_ms * c.cycles_per_ms)); });
      timer.time("record_use (cuEventRecord)", [&] { OK(c.cache->record_use(c.stream)); });
    }
    if (mode == Mapping::kNextStep) {
      timer.time("queue next step", [&] { OK(map_ahead(c.cache, slots, grown(next, growth), &ticket)); });
    } else if (mode == Mapping::kChunkAhead) {
      timer.time("queue a chunk ahead", [&] {
        OK(map_ahead(c.cache, slots, grown(next, growth + rows_per_chunk), &ticket, AheadKind::kPrefetch));
        forget_ahead(ticket);
      });
    }
    const double took = now_us() - t0;
    host.push_back(took);
    if (crossed == c.slots) crossing_host.push_back(took);
    crossings += crossed;
    len = next;
    // The step's tokens to the host (sampling): not host work.
    if (mode == Mapping::kDoorbell) {
      bool finished = true;
      if (g_plain_wait) {
        const double until = now_us() + 5e6;
        for (uint32_t i = 1; graph->doorbell->done() < rung; ++i) {
          if ((i & 4095) == 0 && now_us() > until) {
            finished = false;
            break;
          }
        }
      } else {
        finished = graph->doorbell->wait_done(rung, 5e6, /*yield_after_us: spin, as sampling on its own CPU*/ 5e6);
      }
      if (!finished) {
        std::printf("FAIL step %llu did not finish within 5 s\n", static_cast<unsigned long long>(rung));
        std::exit(1);
      }
    } else {
      CK(cudaStreamSynchronize(c.stream));
    }
    wall_over.push_back(now_us() - t0 - step_ms * 1000.0);
  }
  if (mode == Mapping::kNextStep) OK(wait_ahead(ticket));
  CK(cudaGetLastError());
  std::vector<double> launches;
  if (graph && graph->doorbell) {  // drain the launches never rung (their bodies skip)
    OK(graph->doorbell->stop());
    launches = graph->doorbell->launch_us();
  }
  if (graph) {  // the graph advanced its positions as the host did: the row after the last written
    std::vector<int32_t> got(c.slots);
    CK(cudaMemcpy(got.data(), graph->pos, got.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int s = 0; s < c.slots; ++s) wrong += got[s] != len[s] - 1 + growth;
    if (wrong) {
      std::printf("FAIL %d slots' device positions differ from the host's lengths\n", wrong);
      std::exit(1);
    }
    graph.reset();
    OK(watch_ahead(c.cache, 0));
  }
  const std::vector<double>& v = pattern == 'c' ? crossing_host : host;
  std::printf("| %d | %s | (%c) | %.1f | %zu | %.1f | %.1f | %.1f |", c.slots, name(mode), pattern, crossings / steps,
              v.size(), pct(v, 0.5), pct(v, 0.99), *std::max_element(v.begin(), v.end()));
  if (pattern == 'c') {
    std::printf(" all %zu steps: %.1f / %.1f / %.1f;", host.size(), pct(host, 0.5), pct(host, 0.99),
                *std::max_element(host.begin(), host.end()));
  }
  timer.print();
  std::printf(" step wall minus model p50/p99 %.1f/%.1f;", pct(wall_over, 0.5), pct(wall_over, 0.99));
  if (!launches.empty()) {  // off the step path: the launcher thread's calls
    std::printf(" launcher's cudaGraphLaunch p50/p99/max %.1f/%.1f/%.1f (%zu);", pct(launches, 0.5), pct(launches, 0.99),
                *std::max_element(launches.begin(), launches.end()), launches.size());
  }
  std::printf("\n");
  std::fflush(stdout);
  reset_slots(c);
}

// Time to first token: 256 prompts of 512 tokens at once on `c`'s cache (its chunk size), with the
// pool filled or without it.
void ttft(Ctx& c, bool pool) {
  constexpr int64_t kPrompt = 512;
  const size_t chunk = c.cache->chunk_bytes();
  OK(set_pool_limit(kGpu, pool ? int64_t(64) << 30 : 0));
  int64_t created = 0;
  Backend* b = nullptr;
  OK(get_backend(kGpu, &b));
  const int64_t chunks_per_slot = (kPrompt * kRowBytes + int64_t(chunk) - 1) / int64_t(chunk);
  if (pool) OK(pool_fill(b, chunk, c.slots * chunks_per_slot * int64_t(chunk), &created));
  const double t0 = now_us();
  for (int s = 0; s < c.slots; ++s) OK(c.cache->reserve(s, kPrompt, nullptr));
  const double reserved = now_us() - t0;
  Positions pos{};
  for (int s = 0; s < c.slots; ++s) pos.row[s] = kPrompt - 1;
  write_rows<<<c.slots, 256, 0, c.stream>>>(c.cache->data(), pos, c.cache->shape().slot_bytes(), kRowBytes);
  spin_kernel<<<1, 1, 0, c.stream>>>(static_cast<long long>(50 * c.cycles_per_ms));  // a 50 ms prefill
  OK(c.cache->record_use(c.stream));
  CK(cudaStreamSynchronize(c.stream));
  const double first = now_us() - t0;
  std::printf("ttft %d slots x %lld-token prompts, %zu MiB chunks, %s: reservations %.1f ms (%.1f us a chunk), "
              "first token %.1f ms (prefill 50 ms)\n",
              c.slots, static_cast<long long>(kPrompt), chunk >> 20, pool ? "pool filled" : "no pool", reserved / 1e3,
              reserved / double(c.slots * chunks_per_slot), first / 1e3);
  reset_slots(c);
  OK(pool_trim(kGpu));
}

std::shared_ptr<SlotCache> make_cache(int slots, size_t chunk) {
  std::shared_ptr<SlotCache> cache;
  SlotCacheShape shape{slots, kMaxSeqLen, kRowBytes};
  shape.align_slots = true;
  const double t0 = now_us();
  OK(SlotCache::create(kGpu, shape, chunk, &cache));
  std::printf("(%d slots, %zu MiB chunks: %.0f GiB reserved in %.1f ms)\n", slots, chunk >> 20,
              cache->reserved_bytes() / double(1 << 30), (now_us() - t0) / 1e3);
  return cache;
}

// Command-line options (usage at the top of the file).
struct Options {
  bool cover = false, focus = false, pin = false;
  bool doorbell_only = false;  // --doorbell-only: with --focus, only the doorbell's rows
  bool plain_wait = false;     // --plain-wait: wait for the step in a loop of loads (no pause)
  int only_slots = 0;  // 0: 64 and 256
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cover") == 0) {
      o.cover = true;
    } else if (std::strcmp(argv[i], "--focus") == 0) {
      o.focus = true;
    } else if (std::strcmp(argv[i], "--pin") == 0) {
      o.pin = true;
    } else if (std::strcmp(argv[i], "--doorbell-only") == 0) {
      o.doorbell_only = true;
    } else if (std::strcmp(argv[i], "--plain-wait") == 0) {
      o.plain_wait = true;
    } else if (std::strcmp(argv[i], "--slots") == 0 && i + 1 < argc) {
      o.only_slots = std::atoi(argv[++i]);
    } else {
      std::printf("FAIL unknown argument %s (bench_inflight_step [--cover] [--focus] [--pin] [--slots N] "
                  "[--doorbell-only] [--plain-wait])\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

// --pin: the mapper thread (started here, so it inherits the mask) and the doorbells' launcher
// threads on CPUs 1.., this thread on CPU 0.
void pin_threads() {
  CPU_ZERO(&g_background);
  CPU_ZERO(&g_step);
  CPU_SET(0, &g_step);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 1; i < cpus; ++i) CPU_SET(i, &g_background);
  if (cpus < 2 || pthread_setaffinity_np(pthread_self(), sizeof(g_step), &g_step) != 0) {
    std::printf("FAIL --pin needs two CPUs and affinity rights\n");
    std::exit(1);
  }
  g_pinned = true;
  on_background_cpus([] { OK(wake_mapper()); });
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  g_plain_wait = opt.plain_wait;
  Backend* b = nullptr;
  OK(get_backend(kGpu, &b));
  OK(b->set_zero_granule(opt.cover ? size_t(64) << 20 : 0));
  if (opt.pin) pin_threads();
  int clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  std::printf("zero cover granule %zu MiB; SM clock %d MHz; mapper thread SCHED_BATCH once started; %s; doorbell wait: %s\n",
              b->zero_granule() >> 20, clock_khz / 1000,
              opt.pin ? "pinned: step thread on CPU 0, mapper on CPUs 1.." : "threads not pinned",
              opt.plain_wait ? "plain loads" : "pause loop");
  std::printf("| slots | mapping | pattern | crossings/step | steps timed | p50 us | p99 us | max us | each kind of call on the step path: p50/p99/max us |\n"
              "|---|---|---|---:|---:|---:|---:|---:|---|\n");
  for (int slots : {64, 256}) {
    if (opt.only_slots != 0 && slots != opt.only_slots) continue;
    Ctx c;
    c.slots = slots;
    c.cycles_per_ms = static_cast<long long>(clock_khz);
    c.cache = make_cache(slots, kChunk);
    CK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    const double step_ms = slots == 64 ? 8.0 : 16.0;  // about a Llama-3-8B decode step at that batch
    const std::vector<Mapping> modes = opt.focus && opt.doorbell_only ? std::vector<Mapping>{Mapping::kDoorbell}
                                       : opt.focus ? std::vector<Mapping>{Mapping::kGraph, Mapping::kDoorbell}
                                                 : std::vector<Mapping>{Mapping::kBefore, Mapping::kNextStep,
                                                                        Mapping::kChunkAhead, Mapping::kGraph,
                                                                        Mapping::kDoorbell};
    for (Mapping mode : modes) {
      // Steps per pattern: (a) (b) (c) (s). --focus: (a) and (c) only, 100 crossing steps in (c)
      // for the graph, 50 for the chunk-ahead comparison row.
      const bool graph = mode == Mapping::kGraph || mode == Mapping::kDoorbell;
      const int steps_a = opt.focus ? (graph ? 400 : 200) : 40, steps_b = opt.focus ? 0 : 64;
      const int steps_c = opt.focus ? (graph ? 1600 : 800) : 320, steps_s = opt.focus ? 0 : 30;
      const bool pooled = mode != Mapping::kBefore;
      OK(set_pool_limit(kGpu, pooled ? int64_t(96) << 30 : 0));
      OK(pool_trim(kGpu));
      if (pooled) {
        int64_t created = 0;  // the longest pattern's rows, plus two chunks a slot (the chunk ahead)
        const int64_t rows = kBaseLen + std::max<int64_t>(steps_s * 16, steps_c);
        const int64_t per_slot = rows * kRowBytes / int64_t(kChunk) + 2;
        OK(pool_fill(b, kChunk, int64_t(slots) * per_slot * int64_t(kChunk), &created));
      }
      run_pattern(c, mode, 'a', steps_a, step_ms);
      if (steps_b) run_pattern(c, mode, 'b', steps_b, step_ms);
      run_pattern(c, mode, 'c', steps_c, step_ms);
      if (steps_s) run_pattern(c, mode, 's', steps_s, step_ms);
    }
    OK(set_pool_limit(kGpu, 0));
    OK(pool_trim(kGpu));
    if (slots == 256 && !opt.focus) {
      ttft(c, false);
      ttft(c, true);
      c.cache = make_cache(slots, size_t(32) << 20);  // 2 chunks a prompt instead of 32
      ttft(c, false);
      ttft(c, true);
    }
    c.cache.reset();
    CK(cudaStreamDestroy(c.stream));
  }
  std::printf("bench done\n");
  return 0;
}

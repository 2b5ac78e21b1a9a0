// Host µs per inflight step (issue 30 point 5), for the H200: a Llama-3-8B-shaped token-row slot
// cache (32 layers x K,V x 8 kv heads x 128 x fp16 = 128 KiB a token row, 16 rows a 2 MiB chunk,
// max_seq_len 8192) with 64 and 256 slots. A step is what the scheduler does on the host: make the
// step's rows mapped, copy the step's positions to the device, launch the step (a kernel writing
// every slot's new row + a spin kernel standing for the model, `step_ms` long), record the cache's
// use; then (outside the timing) wait for the step, as sampling does. Three patterns:
//   (a) no slot crosses a chunk (rows written inside mapped chunks),
//   (b) the average rate: every slot grows one row a step, slots staggered (1/16 cross a step),
//   (c) every slot crosses a chunk in the same step (each grows 16 rows a step).
// Two ways to map: before = SlotCache::reserve per slot on the step path, no pool; after = the pool
// filled ahead and the next step's reservations queued on the background mapper right after the
// launch (the step path only checks its ticket). Every call on the step path is timed: the table
// gives p99 and max of each kind. Then time to first token: 256 prompts of 512 tokens arrive at
// once: reserve 256 slots x 512 rows, launch a prefill-sized step, wait; with and without the pool.
// Usage: bench_inflight_step [--no-cover] (default: the zero cover on at 64 MiB; --no-cover: off,
// the backend's default, reads of unmapped memory fault).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/apis.h"

using namespace pvt;

namespace {

const Device kGpu = Device::cuda(0);
constexpr int64_t kRowBytes = 131072, kMaxSeqLen = 8192, kBaseLen = 512;
constexpr size_t kChunk = size_t(2) << 20;

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::printf("FAIL %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__);   \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)
#define OK(x)                                                                          \
  do {                                                                                 \
    Status s_ = (x);                                                                   \
    if (!s_.ok()) {                                                                    \
      std::printf("FAIL %s: %s (line %d)\n", #x, s_.to_string().c_str(), __LINE__);   \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// One block per slot writes the row at pos[slot] (16-byte stores).
__global__ void write_rows(char* base, const int32_t* pos, int64_t slot_bytes, int64_t row_bytes) {
  uint4* row = reinterpret_cast<uint4*>(base + blockIdx.x * slot_bytes + int64_t(pos[blockIdx.x]) * row_bytes);
  for (int64_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x) row[i] = make_uint4(blockIdx.x, 1, 2, 3);
}

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

struct Timer {  // every call of each kind on the step path
  std::map<std::string, std::vector<double>> calls;
  template <class F>
  void time(const char* what, F fn) {
    const double t0 = now_us();
    fn();
    calls[what].push_back(now_us() - t0);
  }
  void print() const {  // "kind p99/max" per kind
    for (const auto& c : calls) {
      std::printf(" %s %.1f/%.1f;", c.first.c_str(), pct(c.second, 0.99), *std::max_element(c.second.begin(), c.second.end()));
    }
  }
};

struct Ctx {
  std::shared_ptr<SlotCache> cache;
  int slots = 0;
  long long cycles_per_ms = 0;
  cudaStream_t stream = nullptr;
  int32_t* h_pos = nullptr;
  int32_t* d_pos = nullptr;
};

void reset_slots(Ctx& c) {
  for (int s = 0; s < c.slots; ++s) OK(c.cache->release(s, c.stream));
  OK(c.cache->collect(true));
}

// One pattern: steps of `growth` rows per slot (0: (a), 1 staggered: (b), 16: (c)); returns p50/p99.
void run_pattern(Ctx& c, bool ahead, char pattern, int steps, double step_ms) {
  const int64_t growth = pattern == 'a' ? 0 : pattern == 'b' ? 1 : 16;
  std::vector<int64_t> len(c.slots), slots(c.slots);
  for (int s = 0; s < c.slots; ++s) {
    slots[s] = s;
    len[s] = kBaseLen + 1 + (pattern == 'b' ? s % 16 : 0);  // (a)/(c): every slot one row into a chunk
    OK(c.cache->reserve(s, len[s], nullptr));
  }
  Timer timer;
  std::vector<double> host;
  std::vector<int> crossings;
  AheadTicket ticket = 0;
  auto next_of = [&](const std::vector<int64_t>& l) {
    std::vector<int64_t> n(l);
    for (auto& x : n) x += growth;
    return n;
  };
  if (ahead) OK(map_ahead(c.cache, slots, next_of(len), &ticket));  // the first step's, before the loop
  for (int step = 0; step < steps; ++step) {
    const std::vector<int64_t> next = next_of(len);
    int crossed = 0;
    for (int s = 0; s < c.slots; ++s) crossed += (next[s] * kRowBytes + kChunk - 1) / kChunk != (len[s] * kRowBytes + kChunk - 1) / kChunk;
    const double t0 = now_us();
    if (ahead) {
      timer.time("wait for the ticket", [&] { OK(wait_ahead(ticket)); });
    } else {
      for (int s = 0; s < c.slots; ++s) timer.time("reserve (maps on the step)", [&] { OK(c.cache->reserve(s, next[s], nullptr)); });
    }
    for (int s = 0; s < c.slots; ++s) c.h_pos[s] = static_cast<int32_t>(next[s] - 1);
    timer.time("cudaMemcpyAsync positions", [&] {
      CK(cudaMemcpyAsync(c.d_pos, c.h_pos, c.slots * sizeof(int32_t), cudaMemcpyHostToDevice, c.stream));
    });
    timer.time("launch write_rows", [&] {
      write_rows<<<c.slots, 256, 0, c.stream>>>(c.cache->data(), c.d_pos, c.cache->shape().slot_bytes(), kRowBytes);
    });
    timer.time("launch model step", [&] { spin<<<1, 1, 0, c.stream>>>(static_cast<long long>(step_ms * c.cycles_per_ms)); });
    timer.time("record_use (cuEventRecord)", [&] { OK(c.cache->record_use(c.stream)); });
    if (ahead) timer.time("queue next step (map_ahead)", [&] { OK(map_ahead(c.cache, slots, next_of(next), &ticket)); });
    host.push_back(now_us() - t0);
    crossings.push_back(crossed);
    len = next;
    CK(cudaStreamSynchronize(c.stream));  // the step's tokens to the host (sampling): not host work
  }
  if (ahead) OK(wait_ahead(ticket));
  CK(cudaGetLastError());
  double mean_cross = 0;
  for (int x : crossings) mean_cross += x;
  std::printf("| %d | %s | (%c) | %.1f | %.1f | %.1f | %.1f |", c.slots, ahead ? "after" : "before", pattern,
              mean_cross / steps, pct(host, 0.5), pct(host, 0.99), *std::max_element(host.begin(), host.end()));
  timer.print();
  std::printf("\n");
  std::fflush(stdout);
  reset_slots(c);
}

void ttft(Ctx& c, bool pool) {
  constexpr int64_t kPrompt = 512;
  OK(set_pool_limit(kGpu, pool ? int64_t(64) << 30 : 0));
  int64_t created = 0;
  Backend* b = nullptr;
  OK(get_backend(kGpu, &b));
  if (pool) OK(pool_fill(b, kChunk, c.slots * (kPrompt * kRowBytes / int64_t(kChunk)) * int64_t(kChunk), &created));
  const double t0 = now_us();
  for (int s = 0; s < c.slots; ++s) OK(c.cache->reserve(s, kPrompt, nullptr));
  const double reserved = now_us() - t0;
  for (int s = 0; s < c.slots; ++s) c.h_pos[s] = kPrompt - 1;
  CK(cudaMemcpyAsync(c.d_pos, c.h_pos, c.slots * sizeof(int32_t), cudaMemcpyHostToDevice, c.stream));
  write_rows<<<c.slots, 256, 0, c.stream>>>(c.cache->data(), c.d_pos, c.cache->shape().slot_bytes(), kRowBytes);
  spin<<<1, 1, 0, c.stream>>>(static_cast<long long>(50 * c.cycles_per_ms));  // a 50 ms prefill
  OK(c.cache->record_use(c.stream));
  CK(cudaStreamSynchronize(c.stream));
  const double first = now_us() - t0;
  std::printf("ttft %d slots x %lld-token prompts, %s: reservations %.1f ms, first token %.1f ms (prefill 50 ms)\n",
              c.slots, static_cast<long long>(kPrompt), pool ? "pool filled" : "no pool", reserved / 1e3, first / 1e3);
  reset_slots(c);
  OK(pool_trim(kGpu));
}

}  // namespace

int main(int argc, char** argv) {
  const bool cover = !(argc > 1 && std::strcmp(argv[1], "--no-cover") == 0);
  Backend* b = nullptr;
  OK(get_backend(kGpu, &b));
  OK(b->set_zero_granule(cover ? size_t(64) << 20 : 0));
  int clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  std::printf("zero cover granule %zu MiB; SM clock %d MHz\n", b->zero_granule() >> 20, clock_khz / 1000);
  std::printf("| slots | mapping | pattern | crossings/step | p50 us | p99 us | max us | each kind of call on the step path: p99/max us |\n|---|---|---|---:|---:|---:|---:|---|\n");
  for (int slots : {64, 256}) {
    Ctx c;
    c.slots = slots;
    c.cycles_per_ms = static_cast<long long>(clock_khz);
    SlotCacheShape shape{slots, kMaxSeqLen, kRowBytes};
    shape.align_slots = true;
    const double t0 = now_us();
    OK(SlotCache::create(kGpu, shape, kChunk, &c.cache));
    std::printf("(%d slots: %.0f GiB reserved in %.1f ms)\n", slots, c.cache->reserved_bytes() / double(1 << 30),
                (now_us() - t0) / 1e3);
    CK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    CK(cudaMallocHost(&c.h_pos, slots * sizeof(int32_t)));
    CK(cudaMalloc(&c.d_pos, slots * sizeof(int32_t)));
    const double step_ms = slots == 64 ? 8.0 : 16.0;  // about a Llama-3-8B decode step at that batch
    const int steps_c = 60;
    for (bool ahead : {false, true}) {
      OK(set_pool_limit(kGpu, ahead ? int64_t(96) << 30 : 0));
      OK(pool_trim(kGpu));
      if (ahead) {
        int64_t created = 0;  // what (c) maps, plus one chunk a slot
        OK(pool_fill(b, kChunk, int64_t(slots) * (steps_c + 2) * int64_t(kChunk), &created));
      }
      run_pattern(c, ahead, 'a', 100, step_ms);
      run_pattern(c, ahead, 'b', 100, step_ms);
      run_pattern(c, ahead, 'c', steps_c, step_ms);
    }
    OK(set_pool_limit(kGpu, 0));
    if (slots == 256) {
      ttft(c, false);
      ttft(c, true);
    }
    CK(cudaFreeHost(c.h_pos));
    CK(cudaFree(c.d_pos));
    CK(cudaStreamDestroy(c.stream));
  }
  std::printf("bench done\n");
  return 0;
}

// Microbenchmark: one decode step of a [B, context, 32, 128] fp16 KV cache.
//   (a) append:  append_tokens_cuda writing one token at position `context` of a SeqMajorCache,
//                launched back to back; also the same 200 appends replayed from a CUDA graph (the
//                GPU-side cost, without the CPU launch path), and an empty kernel (the launch floor)
//   (b) concat:  what paddle.concat does each step: copy the old [B, context, H, D] cache and the
//                new token into a fresh [B, context+1, H, D] buffer (preallocated ping-pong buffers,
//                so allocation is not counted: a lower bound for concat)
//   (c) growth:  a fresh cache grown 0 -> N=context tokens one token at a time, reserve_tokens (maps
//                chunks as needed) + append each step, divided by N; versus the same loop with the
//                memory mapped beforehand; and the adapter's full step (begin_append + append +
//                remove_view of the previous length). The wall-clock difference is noisy, so the
//                cost of mapping one chunk is also timed directly and divided by tokens per chunk.
// Usage: bench_append OUT.json
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/apis.h"
#include "kernels/append_tokens.h"

using namespace pvt;

namespace {

constexpr int64_t kHeads = 32, kHeadDim = 128, kElem = 2;
const Device kGpu = Device::cuda(0);

#define BENCH_CHECK(call)                                                                  \
  do {                                                                                     \
    cudaError_t _e = (call);                                                               \
    if (_e != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s failed: %s at %s:%d\n", #call, cudaGetErrorString(_e),      \
                   __FILE__, __LINE__);                                                    \
      return false;                                                                        \
    }                                                                                      \
  } while (0)
#define BENCH_OK(expr)                                                                     \
  do {                                                                                     \
    Status _s = (expr);                                                                    \
    if (!_s.ok()) {                                                                        \
      std::fprintf(stderr, "%s failed: %s at %s:%d\n", #expr, _s.to_string().c_str(),      \
                   __FILE__, __LINE__);                                                    \
      return false;                                                                        \
    }                                                                                      \
  } while (0)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// paddle.concat([old, new], axis=1) for [B, S, H, D] tensors, in 16-byte units (H*D*2 = 8 KiB).
__global__ void concat_kernel(uint4* __restrict__ out, const uint4* __restrict__ old,
                              const uint4* __restrict__ tok, int64_t batch, int64_t ctx, int64_t row) {
  const int64_t n = batch * (ctx + 1) * row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / ((ctx + 1) * row);
    const int64_t rem = i - b * (ctx + 1) * row;
    const int64_t s = rem / row;
    const int64_t x = rem - s * row;
    out[i] = s < ctx ? old[(b * ctx + s) * row + x] : tok[b * row + x];
  }
}

__global__ void empty_kernel() {}

struct Row {
  int64_t context = 0, batch = 0;
  double cache_mib = 0;
  double append_us = 0, append_gbs = 0, append_graph_us = 0;
  double concat_us = 0, concat_gbs = 0;
  double grow_us = 0, premapped_us = 0, step_us = 0;
};

AppendParams one_token(const SeqMajorCache& cache, const void* src, int64_t batch, int64_t pos) {
  AppendParams p;
  p.dst = cache.data();
  p.src = src;
  p.batch = batch;
  p.tokens = 1;
  p.heads = kHeads;
  p.head_dim = kHeadDim;
  p.dst_pos = pos;
  p.src_stride[0] = kHeads * kHeadDim;
  p.src_stride[1] = kHeads * kHeadDim;
  p.src_stride[2] = kHeadDim;
  p.src_stride[3] = 1;
  p.elem_bytes = kElem;
  return p;
}

// Times `iters` back-to-back calls of `step` with CUDA events; returns the median µs per call.
template <typename F>
bool time_events(cudaStream_t stream, int iters, int reps, F step, double* us) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i)
    if (!step()) return false;  // warm-up
  std::vector<double> per;
  for (int r = 0; r < reps; ++r) {
    BENCH_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < iters; ++i)
      if (!step()) return false;
    BENCH_CHECK(cudaEventRecord(stop, stream));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    per.push_back(ms * 1000.0 / iters);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  *us = median(per);
  return true;
}

bool bench_append(Row* row, const void* tok, cudaStream_t stream) {
  const CacheShape shape{row->batch, kHeads, kHeadDim, kElem};
  std::shared_ptr<SeqMajorCache> cache;
  BENCH_OK(SeqMajorCache::create(kGpu, shape, CacheConfig{row->context + 1, 0}, &cache));
  BENCH_OK(cache->reserve_tokens(row->context + 1));
  const AppendParams p = one_token(*cache, tok, row->batch, row->context);
  auto step = [&] { return append_tokens_cuda(p, stream).ok(); };
  if (!time_events(stream, 200, 7, step, &row->append_us)) return false;
  row->append_gbs = 2.0 * shape.token_bytes() / (row->append_us * 1e3);  // read + write

  // The same 200 appends captured once and replayed: what the GPU itself spends per append.
  constexpr int kGraphSteps = 200;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kGraphSteps; ++i) BENCH_OK(append_tokens_cuda(p, stream));
  BENCH_CHECK(cudaStreamEndCapture(stream, &graph));
  BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  auto replay = [&] { return cudaGraphLaunch(exec, stream) == cudaSuccess; };
  double graph_us = 0;
  const bool ok = time_events(stream, 1, 7, replay, &graph_us);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  row->append_graph_us = graph_us / kGraphSteps;
  return ok;
}

bool bench_empty(cudaStream_t stream, double* us) {
  auto step = [&] {
    empty_kernel<<<1, 32, 0, stream>>>();
    return cudaGetLastError() == cudaSuccess;
  };
  return time_events(stream, 200, 7, step, us);
}

bool bench_concat(Row* row, const void* tok, cudaStream_t stream) {
  const int64_t tb = row->batch * kHeads * kHeadDim * kElem;
  const size_t bytes = size_t((row->context + 1) * tb);
  void* buf[2] = {nullptr, nullptr};
  BENCH_CHECK(cudaMalloc(&buf[0], bytes));
  BENCH_CHECK(cudaMalloc(&buf[1], bytes));
  BENCH_CHECK(cudaMemsetAsync(buf[0], 0, bytes, stream));
  const int64_t unit_row = kHeads * kHeadDim * kElem / 16;
  const int64_t units = row->batch * (row->context + 1) * unit_row;
  const int blocks = int(std::min<int64_t>((units + 255) / 256, 132 * 16));
  int flip = 0;
  auto step = [&] {
    concat_kernel<<<blocks, 256, 0, stream>>>(static_cast<uint4*>(buf[flip ^ 1]),
                                               static_cast<const uint4*>(buf[flip]),
                                               static_cast<const uint4*>(tok), row->batch,
                                               row->context, unit_row);
    flip ^= 1;
    return cudaGetLastError() == cudaSuccess;
  };
  const int iters = int(std::max<int64_t>(5, std::min<int64_t>(200, int64_t(2e8 / bytes))));
  const bool ok = time_events(stream, iters, 7, step, &row->concat_us);
  cudaFree(buf[0]);
  cudaFree(buf[1]);
  if (!ok) return false;
  const double moved = double(row->context * tb) + double(tb) + double(bytes);  // read old+new, write out
  row->concat_gbs = moved / (row->concat_us * 1e3);
  return true;
}

// Grows a fresh cache 0 -> N one token per step; wall clock per token.
// mode 0: reserve_tokens + append; 1: same, memory mapped first; 2: begin_append + append +
// record_use + remove_view(previous length), the adapter's whole step.
bool grow_once(const Row& row, int mode, const void* tok, cudaStream_t stream, double* us) {
  const CacheShape shape{row.batch, kHeads, kHeadDim, kElem};
  const int64_t n = row.context;
  std::shared_ptr<SeqMajorCache> cache;
  BENCH_OK(SeqMajorCache::create(kGpu, shape, CacheConfig{n, 0}, &cache));
  if (mode == 1) BENCH_OK(cache->reserve_tokens(n));
  BENCH_CHECK(cudaStreamSynchronize(stream));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t pos = 0; pos < n; ++pos) {
    if (mode == 2) {
      BENCH_OK(cache->begin_append(pos, 1));
    } else {
      BENCH_OK(cache->reserve_tokens(pos + 1));
    }
    BENCH_OK(append_tokens_cuda(one_token(*cache, tok, row.batch, pos), stream));
    if (mode == 2) BENCH_OK(cache->record_use(stream));
    if (mode == 2 && pos > 0) cache->remove_view(pos);
  }
  BENCH_CHECK(cudaStreamSynchronize(stream));
  const auto t1 = std::chrono::steady_clock::now();
  *us = std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
  if (mode == 2) cache->remove_view(n);
  return true;
}

// The three growth modes interleaved, 5 runs each, medians: drift hits all modes alike.
bool bench_growth(Row* row, const void* tok, cudaStream_t stream) {
  std::vector<double> runs[3];
  for (int rep = 0; rep < 5; ++rep)
    for (int mode = 0; mode < 3; ++mode) {
      double us = 0;
      if (!grow_once(*row, mode, tok, stream, &us)) return false;
      runs[mode].push_back(us);
    }
  row->grow_us = median(runs[0]);
  row->premapped_us = median(runs[1]);
  row->step_us = median(runs[2]);
  return true;
}

// Cost of one chunk's map (cuMemCreate + cuMemMap + cuMemSetAccess) and unmap (stream sync +
// cuMemUnmap + cuMemRelease) through Region, default chunk size; medians over 256 chunks.
bool bench_chunk_ops(double* map_us, double* unmap_us, size_t* chunk_bytes) {
  std::unique_ptr<Region> reg;
  BENCH_OK(Region::create(kGpu, 256 * kDefaultChunkBytes, kDefaultChunkBytes, &reg));
  const size_t c = reg->chunk_bytes();
  std::vector<double> maps, unmaps;
  for (size_t i = 0; i < reg->num_chunks(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    BENCH_OK(reg->map_range(i * c, c));
    maps.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  for (size_t i = 0; i < reg->num_chunks(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    BENCH_OK(reg->unmap_range(i * c, c));
    unmaps.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  *map_us = median(maps);
  *unmap_us = median(unmaps);
  *chunk_bytes = c;
  return true;
}

struct Global {
  double empty_us = 0, map_us = 0, unmap_us = 0;
  size_t chunk_bytes = 0;
};

bool write_json(const char* path, const std::vector<Row>& rows, const cudaDeviceProp& prop, const Global& g) {
  FILE* f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path);
    return false;
  }
  std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"heads\": %lld,\n  \"head_dim\": %lld,\n  \"dtype\": \"float16\",\n  \"empty_launch_us\": %.3f,\n  \"chunk_bytes\": %zu,\n  \"chunk_map_us\": %.2f,\n  \"chunk_unmap_us\": %.2f,\n  \"rows\": [\n",
               prop.name, (long long)kHeads, (long long)kHeadDim, g.empty_us, g.chunk_bytes, g.map_us, g.unmap_us);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f,
                 "    {\"context\": %lld, \"batch\": %lld, \"cache_mib\": %.1f, \"append_us\": %.3f, "
                 "\"append_gbs\": %.2f, \"append_graph_us\": %.3f, \"concat_us\": %.3f, \"concat_gbs\": %.1f, \"grow_us_per_token\": %.3f, "
                 "\"premapped_us_per_token\": %.3f, \"grow_minus_premapped_us_per_token\": %.3f, \"chunk_map_us_per_token\": %.3f, \"adapter_step_us_per_token\": %.3f}%s\n",
                 (long long)r.context, (long long)r.batch, r.cache_mib, r.append_us, r.append_gbs, r.append_graph_us,
                 r.concat_us, r.concat_gbs, r.grow_us, r.premapped_us, r.grow_us - r.premapped_us,
                 g.map_us * r.batch * kHeads * kHeadDim * kElem / g.chunk_bytes, r.step_us,
                 i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
  return true;
}

bool run(const char* json_path) {
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* tok = nullptr;  // one token for the largest batch
  BENCH_CHECK(cudaMalloc(&tok, 8 * kHeads * kHeadDim * kElem));
  BENCH_CHECK(cudaMemset(tok, 0x3c, 8 * kHeads * kHeadDim * kElem));
  BENCH_CHECK(cudaDeviceSynchronize());  // the bench stream is non-blocking: order the memset first
  Global g;
  if (!bench_empty(stream, &g.empty_us) || !bench_chunk_ops(&g.map_us, &g.unmap_us, &g.chunk_bytes)) return false;
  std::vector<Row> rows;
  for (int64_t context : {1024, 4096, 16384, 65536})
    for (int64_t batch : {1, 8}) {
      Row r;
      r.context = context;
      r.batch = batch;
      r.cache_mib = double(context * batch * kHeads * kHeadDim * kElem) / (1 << 20);
      if (!bench_append(&r, tok, stream) || !bench_concat(&r, tok, stream) ||
          !bench_growth(&r, tok, stream))
        return false;
      rows.push_back(r);
      std::fprintf(stderr, "done context=%lld batch=%lld\n", (long long)context, (long long)batch);
    }
  std::printf("device: %s (%d SMs); empty kernel launch, back to back: %.2f µs; one %zu MiB chunk: "
              "map %.1f µs, unmap %.1f µs\n\n", prop.name, prop.multiProcessorCount, g.empty_us,
              g.chunk_bytes >> 20, g.map_us, g.unmap_us);
  std::printf("| context | batch | KV MiB | append µs/step | append GB/s | append in graph µs/step | concat µs/step | concat GB/s | concat/append "
              "| grow µs/token | pre-mapped µs/token | grow − pre-mapped | chunk map µs/token | adapter step µs/token |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows)
    std::printf("| %lld | %lld | %.0f | %.2f | %.1f | %.2f | %.1f | %.0f | %.0fx | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                (long long)r.context, (long long)r.batch, r.cache_mib, r.append_us, r.append_gbs,
                r.append_graph_us, r.concat_us,
                r.concat_gbs, r.concat_us / r.append_us, r.grow_us, r.premapped_us, r.grow_us - r.premapped_us,
                g.map_us * r.batch * kHeads * kHeadDim * kElem / g.chunk_bytes, r.step_us);
  cudaFree(tok);
  cudaStreamDestroy(stream);
  const MemoryStats s = memory_stats(kGpu);
  std::printf("\nmapped after: %lld bytes, live regions %lld, peak mapped %.2f GiB\n", (long long)s.mapped_bytes,
              (long long)s.live_regions, s.peak_mapped_bytes / double(1 << 30));
  return write_json(json_path, rows, prop, g);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
    return 2;
  }
  return run(argv[1]) ? 0 : 1;
}

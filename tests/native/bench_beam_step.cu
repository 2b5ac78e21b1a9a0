// Beam search's cache reorder on the GPU (issue 31 point 6: bytes copied and µs per beam step), with
// a Llama-3-8B-shaped token-row slot cache (32 layers x K,V x 8 kv heads x 128 x fp16 = 128 KiB per
// token, 2 MiB chunks: 16 tokens a chunk). Paddle cannot run on the H200, so this replays what
// paddle_vtensor.beam_search did to its slots on the host (tests/gpu/beam_trace.py writes the trace:
// forwards appending rows to slots, and forks "dst takes src's first `tokens` rows, holding `common`
// of them already"), R times side by side (R batch rows of `beams` slots each).
//
// Each fork follows SlotForker.fork's policy (paddle_vtensor/generation/slot_fork.py) for a given
// copy_max_chunks: a divergent tail of at most that many chunks' bytes is copied (make_private of any
// shared chunk among those rows first, then one copy), a longer one remaps (release dst,
// share_prefix: whole chunks mapped, the partial chunk copied). Tails are copied by a kernel, as the
// framework's strided copy does (see copy_bytes). Against it, in the same process,
// PaddleNLP's reorder: every beam's whole dense cache index_selected every step (one
// cudaMemcpyAsync per beam here, the fewest calls that move those bytes).
//
// A forward's rows are written with values that depend on the row's identity (a token id the replay
// hands out), so after the replay every slot's and every dense beam's rows are checked against the
// ids the trace says it holds: a fork that copied or mapped the wrong rows fails.
//
// Per policy: bytes copied per step, host µs of the reorder (the calls a fork makes: make_private,
// reserve, the copy's launch, record_use, release, share_prefix, and shared_bytes before and after
// each copy as SlotForker does to count copy-on-write; not this program's bookkeeping) and
// µs from the first fork until its copies have finished, over the steps with a fork; PaddleNLP's bytes and device µs per step.
// Usage: bench_beam_step TRACE [--rows R] [--small] [--memcpy] (--small: 2 KiB rows, 64 KiB chunks,
// for compute-sanitizer; --memcpy: tails copied by cudaMemcpyAsync instead of a copy kernel). PASS/FAIL lines, "info ..." lines, "N passed, M failed".
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/apis.h"
#include "harness.h"

using namespace pvt;
using pvt_test::Report;

namespace {

const Device kGpu = Device::cuda(0);

// One line of the trace.
struct Op {
  bool fork = false;
  std::vector<std::pair<int64_t, int64_t>> feed;  // (slot, rows appended)
  int64_t src = 0, dst = 0, tokens = 0, common = 0;
};

struct Trace {
  std::vector<Op> ops;
  int64_t slots = 0, max_len = 0;
};

bool read_trace(const std::string& path, Trace* t) {
  std::ifstream in(path);
  std::string line;
  std::vector<int64_t> len;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string kind;
    if (!(s >> kind) || kind[0] == '#') continue;
    Op op;
    if (kind == "fork") {
      op.fork = true;
      if (!(s >> op.src >> op.dst >> op.tokens >> op.common)) return false;
    } else if (kind == "feed") {
      std::string item;
      while (s >> item) {
        const size_t colon = item.find(':');
        if (colon == std::string::npos) return false;
        op.feed.emplace_back(std::stoll(item.substr(0, colon)), std::stoll(item.substr(colon + 1)));
      }
    } else {
      return false;
    }
    for (int64_t slot : {op.src, op.dst}) t->slots = std::max(t->slots, slot + 1);
    for (auto& f : op.feed) t->slots = std::max(t->slots, f.first + 1);
    len.resize(t->slots, 0);
    if (op.fork) len[op.dst] = op.tokens;
    for (auto& f : op.feed) t->max_len = std::max(t->max_len, len[f.first] += f.second);
    t->ops.push_back(op);
  }
  return !t->ops.empty();
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

__device__ __host__ __half value(uint32_t id, int64_t e) {
  uint32_t h = id * 0x9E3779B1u ^ static_cast<uint32_t>(e) * 0xC2B2AE3Du;
  h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12;
  return __float2half(static_cast<float>(h & 0xFFFF) / 32768.f - 1.f);
}

// Rows [r0, r0 + n) of a slot get ids id0, id0 + 1, ...
__global__ void fill_rows(__half* base, int64_t r0, int64_t n, int64_t row_elems, uint32_t id0) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * row_elems; i += int64_t(gridDim.x) * blockDim.x)
    base[r0 * row_elems + i] = value(id0 + static_cast<uint32_t>(i / row_elems), i % row_elems);
}

struct Geometry {
  int64_t row_bytes, chunk_bytes, rows;  // rows: batch rows, each a copy of the trace's slots
  int64_t row_elems() const { return row_bytes / 2; }
};

// What the trace says each slot holds: the ids of its rows (shared by the slot cache and dense runs).
struct Contents {
  std::vector<std::vector<uint32_t>> ids;
  uint32_t next = 1;
};

// Checks the first and last 8 elements of every row of `rows` rows at `base` against `ids`.
bool rows_hold(const char* base, int64_t row_bytes, const std::vector<uint32_t>& ids) {
  if (ids.empty()) return true;
  const int64_t n = static_cast<int64_t>(ids.size()), w = 8;
  std::vector<__half> got(n * 2 * w);
  if (cudaMemcpy2D(got.data(), 2 * w * 2, base, row_bytes, w * 2, n, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy2D(got.data() + w, 2 * w * 2, base + row_bytes - w * 2, row_bytes, w * 2, n, cudaMemcpyDeviceToHost) !=
          cudaSuccess)
    return false;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t e = 0; e < 2 * w; ++e) {
      const int64_t elem = e < w ? e : row_bytes / 2 - 2 * w + e;
      if (__half2float(got[r * 2 * w + e]) != __half2float(value(ids[r], elem))) return false;
    }
  return true;
}

// The copy of a divergent tail by a kernel (16-byte words, grid-stride), as a framework's strided
// copy op does, or by cudaMemcpyAsync (--memcpy): the runtime's copy of VMM-mapped memory costs
// host time that grows with the mappings (measured here, issue 31 point 6).
__global__ void copy_words(uint4* dst, const uint4* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

bool g_memcpy = false;

bool copy_bytes(char* dst, const char* src, int64_t n, cudaStream_t st) {
  if (g_memcpy) return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, st) == cudaSuccess;
  const int64_t words = n / 16;  // rows are whole multiples of 16 bytes
  const int blocks = static_cast<int>(std::min<int64_t>(1024, (words + 255) / 256));
  copy_words<<<std::max(blocks, 1), 256, 0, st>>>(reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src), words);
  return cudaGetLastError() == cudaSuccess;
}

struct StepTimes {
  std::vector<double> host_us, done_us, bytes;  // per step with a fork (bytes: per every step)
  int64_t copies = 0, remaps = 0, cow_bytes = 0, mapped_chunks = 0;
  double us_private = 0, us_copy = 0, us_record = 0, us_remap = 0, us_account = 0;  // host time by call, whole replay
  size_t peak_mapped = 0, peak_shared = 0;
};

// The slot-cache replay under one copy_max_chunks.
bool replay_slots(Report& r, const Trace& t, const Geometry& g, int64_t copy_max_chunks, cudaStream_t st,
                  StepTimes* out) {
  const std::string name = "slots.cmc" + std::to_string(copy_max_chunks);
  const int64_t nslots = t.slots * g.rows;
  SlotCacheShape shape{nslots, t.max_len, g.row_bytes, /*align_slots=*/true};
  std::shared_ptr<SlotCache> c;
  if (!r.ok(SlotCache::create(kGpu, shape, g.chunk_bytes, &c), name + ".create")) return false;
  auto slot_base = [&](int64_t s) { return c->data() + s * c->shape().slot_bytes(); };
  Contents h;
  h.ids.resize(nslots);
  bool ok = true;
  double t0 = 0, host = 0;
  int64_t step_bytes = 0;
  bool forked = false;
  for (const Op& op : t.ops) {
    if (!op.fork) {
      if (forked) {  // the reorder before this forward is complete: its copies must have finished
        ok &= cudaStreamSynchronize(st) == cudaSuccess;
        out->host_us.push_back(host);
        out->done_us.push_back(now_us() - t0);
        out->peak_mapped = std::max(out->peak_mapped, c->mapped_bytes());
        out->peak_shared = std::max(out->peak_shared, c->shared_bytes());
      }
      if (!out->bytes.empty() || forked) out->bytes.push_back(static_cast<double>(step_bytes));
      forked = false;
      step_bytes = 0;
      for (int64_t b = 0; b < g.rows; ++b)
        for (auto& f : op.feed) {
          const int64_t s = b * t.slots + f.first, len = static_cast<int64_t>(h.ids[s].size());
          ok &= c->reserve(s, len + f.second, st).ok();
          fill_rows<<<256, 256, 0, st>>>(reinterpret_cast<__half*>(slot_base(s)), len, f.second, g.row_elems(), h.next);
          for (int64_t i = 0; i < f.second; ++i) h.ids[s].push_back(h.next++);
        }
      ok &= cudaStreamSynchronize(st) == cudaSuccess && c->record_use(st).ok();
      continue;
    }
    if (!forked) {
      forked = true;
      t0 = now_us();
      host = 0;
    }
    const double us_before = out->us_private + out->us_copy + out->us_record + out->us_remap + out->us_account;
    for (int64_t b = 0; b < g.rows; ++b) {
      const int64_t src = b * t.slots + op.src, dst = b * t.slots + op.dst;
      const int64_t have = static_cast<int64_t>(h.ids[dst].size()), tail = (op.tokens - op.common) * g.row_bytes;
      if (tail <= copy_max_chunks * g.chunk_bytes) {
        const double a0 = now_us();
        const size_t shared_before = c->shared_bytes();  // as SlotForker counts copy-on-write bytes
        const double p0 = now_us();
        out->us_account += p0 - a0;
        ok &= c->make_private(dst, op.common, op.tokens, st).ok() && c->reserve(dst, op.tokens, st).ok();
        const double p1 = now_us();
        ok &= copy_bytes(slot_base(dst) + op.common * g.row_bytes, slot_base(src) + op.common * g.row_bytes, tail, st);
        out->us_private += p1 - p0;
        out->us_copy += now_us() - p1;
        const double a1 = now_us();
        const int64_t cow = static_cast<int64_t>(shared_before - c->shared_bytes());
        out->us_account += now_us() - a1;
        out->copies++;
        out->cow_bytes += cow;
        step_bytes += tail + cow;
      } else {
        const double m0 = now_us();
        if (have) ok &= c->release(dst, st).ok();
        ok &= c->share_prefix(src, dst, op.tokens, st).ok();
        out->us_remap += now_us() - m0;
        out->remaps++;
        out->mapped_chunks += op.tokens * g.row_bytes / g.chunk_bytes;
        step_bytes += op.tokens * g.row_bytes % g.chunk_bytes;
      }
      const double r0 = now_us();
      ok &= c->record_use(st).ok();
      out->us_record += now_us() - r0;
      h.ids[dst].assign(h.ids[src].begin(), h.ids[src].begin() + op.tokens);
    }
    host += out->us_private + out->us_copy + out->us_record + out->us_remap + out->us_account - us_before;
  }
  ok &= cudaStreamSynchronize(st) == cudaSuccess;
  r.check(ok, name + ".replay");
  bool held = true;
  for (int64_t s = 0; s < nslots; ++s) held &= rows_hold(slot_base(s), g.row_bytes, h.ids[s]);
  r.check(held, name + ".every_slot_holds_its_beams_rows");
  for (int64_t s = 0; s < nslots; ++s) ok &= c->release(s, st).ok();
  return r.check(ok && c->collect(true).ok(), name + ".released") && held;
}

// PaddleNLP's reorder: dense caches [slot][max_len][row], every beam's rows index_selected into a
// second buffer every step (new[s] = old[parent of s]), then the forward appends.
bool replay_dense(Report& r, const Trace& t, const Geometry& g, cudaStream_t st, std::vector<double>* dev_us,
                  std::vector<double>* bytes) {
  const int64_t nslots = t.slots * g.rows, slot_bytes = t.max_len * g.row_bytes;
  char *a = nullptr, *b = nullptr;
  if (!r.check(cudaMalloc(&a, nslots * slot_bytes) == cudaSuccess && cudaMalloc(&b, nslots * slot_bytes) == cudaSuccess,
               "dense.alloc")) {
    cudaFree(a);
    return false;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  Contents h;
  h.ids.resize(nslots);
  std::vector<int64_t> parent(nslots);
  bool ok = true, first = true;
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const Op& op = t.ops[i];
    if (op.fork) continue;
    if (!first) {  // the reorder of every step: each slot's parent from this step's forks
      for (int64_t s = 0; s < nslots; ++s) parent[s] = s;
      std::vector<std::vector<uint32_t>> next = h.ids;
      for (size_t j = i; j-- > 0 && t.ops[j].fork;)
        for (int64_t k = 0; k < g.rows; ++k) parent[k * t.slots + t.ops[j].dst] = k * t.slots + t.ops[j].src;
      int64_t moved = 0;
      cudaEventRecord(e0, st);
      for (int64_t s = 0; s < nslots; ++s) {
        const int64_t n = static_cast<int64_t>(h.ids[parent[s]].size()) * g.row_bytes;
        if (n) ok &= cudaMemcpyAsync(b + s * slot_bytes, a + parent[s] * slot_bytes, n, cudaMemcpyDeviceToDevice, st) ==
                     cudaSuccess;
        next[s] = h.ids[parent[s]];
        moved += n;
      }
      cudaEventRecord(e1, st);
      float ms = 0;
      ok &= cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
      dev_us->push_back(1e3 * ms);
      bytes->push_back(static_cast<double>(moved));
      std::swap(a, b);
      h.ids.swap(next);
    }
    first = false;
    for (int64_t k = 0; k < g.rows; ++k)
      for (auto& f : op.feed) {
        const int64_t s = k * t.slots + f.first, len = static_cast<int64_t>(h.ids[s].size());
        fill_rows<<<256, 256, 0, st>>>(reinterpret_cast<__half*>(a + s * slot_bytes), len, f.second, g.row_elems(), h.next);
        for (int64_t j = 0; j < f.second; ++j) h.ids[s].push_back(h.next++);
      }
  }
  ok &= cudaStreamSynchronize(st) == cudaSuccess;
  r.check(ok, "dense.replay");
  bool held = true;
  for (int64_t s = 0; s < nslots; ++s) held &= rows_hold(a + s * slot_bytes, g.row_bytes, h.ids[s]);
  r.check(held, "dense.every_beam_holds_its_rows");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return ok && held;
}

void run(Report& r, const Trace& t, const Geometry& g, cudaStream_t st) {
  const double mib = 1048576.0;
  std::printf("info trace: %zu ops, %lld slots, longest %lld rows; rows %lld (slots %lld), row %lld B, chunk %lld B\n",
              t.ops.size(), static_cast<long long>(t.slots), static_cast<long long>(t.max_len),
              static_cast<long long>(g.rows), static_cast<long long>(t.slots * g.rows),
              static_cast<long long>(g.row_bytes), static_cast<long long>(g.chunk_bytes));
  std::vector<double> dense_us, dense_bytes;
  if (replay_dense(r, t, g, st, &dense_us, &dense_bytes))
    std::printf("info rows=%lld PaddleNLP index_select: %zu steps, bytes/step mean %.1f MiB max %.1f MiB; "
                "device us/step mean %.1f p50 %.1f max %.1f; dense cache %.1f MiB (x2 while reordering)\n",
                static_cast<long long>(g.rows), dense_us.size(), mean(dense_bytes) / mib, pct(dense_bytes, 1.0) / mib,
                mean(dense_us), pct(dense_us, 0.5), pct(dense_us, 1.0),
                t.slots * g.rows * t.max_len * g.row_bytes / mib);
  for (int64_t cmc : {int64_t{2}, int64_t{0}, int64_t{8}, int64_t{1} << 40}) {
    StepTimes s;
    if (!replay_slots(r, t, g, cmc, st, &s)) continue;
    double total = 0;
    for (double b : s.bytes) total += b;
    std::printf("info rows=%lld slots copy_max_chunks=%lld: %lld copies, %lld remaps (%lld chunks mapped), cow %lld B; "
                "bytes/step over %zu steps mean %.1f KiB max %.1f KiB; over the %zu steps with a fork: host us mean %.1f "
                "p50 %.1f p99 %.1f max %.1f, until copies done us mean %.1f p50 %.1f max %.1f; total us %.0f; "
                "peak mapped %.1f MiB shared %.1f MiB; host us by call: make_private+reserve %.0f, copy %.0f, "
                "record_use %.0f, release+share_prefix %.0f, shared_bytes twice per copy %.0f\n",
                static_cast<long long>(g.rows), static_cast<long long>(cmc), static_cast<long long>(s.copies),
                static_cast<long long>(s.remaps), static_cast<long long>(s.mapped_chunks),
                static_cast<long long>(s.cow_bytes), s.bytes.size(), total / std::max<size_t>(1, s.bytes.size()) / 1024,
                pct(s.bytes, 1.0) / 1024, s.host_us.size(), mean(s.host_us), pct(s.host_us, 0.5), pct(s.host_us, 0.99),
                pct(s.host_us, 1.0), mean(s.done_us), pct(s.done_us, 0.5), pct(s.done_us, 1.0),
                mean(s.done_us) * s.done_us.size(), s.peak_mapped / mib, s.peak_shared / mib, s.us_private, s.us_copy,
                s.us_record, s.us_remap, s.us_account);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Report r;
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_beam_step TRACE [--rows R] [--small] [--memcpy]\n");
    return 2;
  }
  bool small = false;
  int64_t rows = 1;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--small") == 0) small = true;
    else if (std::strcmp(argv[i], "--memcpy") == 0) g_memcpy = true;
    else if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) rows = std::atoll(argv[++i]);
  }
  Trace t;
  if (!r.check(read_trace(argv[1], &t), "trace.read")) return r.finish();
  cudaFree(nullptr);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  const Geometry big{131072, 2 << 20, rows}, tiny{2048, 64 << 10, 1};
  run(r, t, small ? tiny : big, st);
  if (!small && rows > 1) run(r, t, Geometry{131072, 2 << 20, 1}, st);
  cudaStreamDestroy(st);
  const MemoryStats m = memory_stats(kGpu);
  r.eq(m.mapped_bytes, 0, "end.mapped_bytes_zero");
  return r.finish();
}

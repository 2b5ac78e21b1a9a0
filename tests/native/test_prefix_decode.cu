// Native GPU test of a decode step over slots that share a prefix (issue 31 point 6), on a
// Llama-3-8B-shaped token-row slot cache (32 layers x K,V x 8 kv heads x 128 x fp16 = 128 KiB per
// token, 2 MiB chunks: 16 tokens a chunk). Two caches hold the same token contents in 64 slots:
// "unshared" writes every slot's rows itself; "shared" maps the first P rows of slots 1..31 from slot
// 0 (SlotCache::share_prefix) and writes only their own tails. Then:
//   - the memory of each against the formula: mapped bytes = whole chunks of each slot's own rows
//     (a shared chunk once), shared_bytes = the further mappings (31 x P rows);
//   - one decode step (32 layers of decode_attention_cuda over all 64 slots, one query each) on both:
//     outputs byte-identical (same kernels, same addresses, same bytes read), and the attention time
//     of each (median of interleaved steps; printed, not asserted);
//   - where the time of sharing goes: the driver calls for 2,048 chunks one by one (create, map, set
//     access, unmap, release), to set against test_slot_share_cuda --bench (share_prefix of 2,048
//     chunks) run next to it.
// Usage: test_prefix_decode_cuda [--small]. --small: 8 slots of a 2-layer cache, no driver timing
// (for compute-sanitizer). PASS/FAIL lines, "info ..." lines, "N passed, M failed".
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/apis.h"
#include "harness.h"
#include "kernels/decode_attention.h"

using namespace pvt;
using pvt_test::Report;

namespace {

const Device kGpu = Device::cuda(0);

struct Config {
  int64_t layers, kv_heads, q_heads, head_dim;
  int64_t slots, sharing;   // slots 0 .. sharing-1 share slot 0's first `prefix` rows
  int64_t prefix, max_tail;  // prefix: a whole number of chunks
  int reps;
  int64_t row_elems() const { return layers * 2 * kv_heads * head_dim; }
  int64_t row_bytes() const { return row_elems() * 2; }
  int64_t tail(int64_t slot) const { return 1 + (slot * 37) % max_tail; }  // own rows after the prefix
  int64_t len(int64_t slot) const { return prefix + tail(slot); }
};

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device memory freed with its owner (null when cudaMalloc failed).
struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevPtr = std::unique_ptr<void, CudaFree>;

DevPtr dev_alloc(size_t n) {
  void* p = nullptr;
  return DevPtr(cudaMalloc(&p, n ? n : 1) == cudaSuccess ? p : nullptr);
}

// Rows [r0, r1) of one slot: element e of row r is a hash of (seed, r, e) in [-1, 1). The value
// depends on the row's index, not its address, so two caches written with the same seeds hold the
// same tokens wherever their chunks are.
__global__ void fill_rows(__half* slot_base, int64_t r0, int64_t r1, int64_t row_elems, uint32_t seed) {
  const int64_t n = (r1 - r0) * row_elems;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = r0 + i / row_elems, e = i % row_elems;
    uint32_t h = seed * 0x9E3779B1u ^ static_cast<uint32_t>(r) * 0x85EBCA77u ^ static_cast<uint32_t>(e) * 0xC2B2AE3Du;
    h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12;
    slot_base[r * row_elems + e] = __float2half(static_cast<float>(h & 0xFFFF) / 32768.f - 1.f);
  }
}

bool fill(const SlotCache& c, const Config& g, int64_t slot, int64_t r0, int64_t r1, uint32_t seed) {
  if (r1 <= r0) return true;
  auto* base = reinterpret_cast<__half*>(c.data() + slot * c.shape().slot_bytes());
  fill_rows<<<1024, 256>>>(base, r0, r1, g.row_elems(), seed);
  return cudaGetLastError() == cudaSuccess;
}

int64_t chunks_of(int64_t rows, int64_t row_bytes, int64_t cb) { return (rows * row_bytes + cb - 1) / cb; }

// The two caches with the same token contents: slot 0 and slots >= sharing have their own rows;
// slots 1..sharing-1 hold slot 0's first `prefix` rows (seed 0) then their own tail (seed = slot).
bool build(Report& r, const Config& g, bool shared, std::shared_ptr<SlotCache>* out) {
  const std::string name = shared ? "shared" : "unshared";
  SlotCacheShape shape{g.slots, g.prefix + g.max_tail, g.row_bytes(), /*align_slots=*/true};
  std::shared_ptr<SlotCache> c;
  if (!r.ok(SlotCache::create(kGpu, shape, 2 << 20, &c), name + ".create")) return false;
  for (int64_t s = 0; s < g.slots; ++s) {
    const bool alias = shared && s > 0 && s < g.sharing;
    if (alias && !r.ok(c->share_prefix(0, s, g.prefix, nullptr), name + ".share_prefix")) return false;
    if (!r.ok(c->reserve(s, g.len(s), nullptr), name + ".reserve")) return false;
    const uint32_t prefix_seed = s < g.sharing ? 0u : static_cast<uint32_t>(1000 + s);
    if (!alias && !r.check(fill(*c, g, s, 0, g.prefix, prefix_seed), name + ".fill_prefix")) return false;
    if (!r.check(fill(*c, g, s, g.prefix, g.len(s), static_cast<uint32_t>(s + 1)), name + ".fill_tail")) return false;
  }
  *out = c;
  return r.check(cudaDeviceSynchronize() == cudaSuccess, name + ".filled");
}

// One decode step: every layer's attention over all slots (one query per slot); returns the ms of
// `reps` steps (cuda events) and leaves the outputs in `out` ([layers][slots][Hq][D] fp16).
struct Step {
  const Config& g;
  DevPtr q, out, lens, ids, ws;
  size_t ws_bytes = 0;
  DecodeAttentionParams base;

  explicit Step(const Config& cfg)
      : g(cfg), q(dev_alloc(cfg.slots * cfg.q_heads * cfg.head_dim * 2)),
        out(dev_alloc(cfg.layers * cfg.slots * cfg.q_heads * cfg.head_dim * 2)), lens(dev_alloc(cfg.slots * 4)),
        ids(dev_alloc(cfg.slots * 4)) {
    std::vector<int32_t> l(g.slots), id(g.slots);
    for (int64_t s = 0; s < g.slots; ++s) {
      l[s] = static_cast<int32_t>(g.len(s) - 1);  // lengths before the step; its row is the last one
      id[s] = static_cast<int32_t>(s);
    }
    cudaMemcpy(lens.get(), l.data(), l.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(ids.get(), id.data(), id.size() * 4, cudaMemcpyHostToDevice);
    fill_rows<<<256, 256>>>(static_cast<__half*>(q.get()), 0, g.slots, g.q_heads * g.head_dim, 77u);
    base.batch = g.slots;
    base.q_len = 1;
    base.q_heads = g.q_heads;
    base.kv_heads = g.kv_heads;
    base.head_dim = g.head_dim;
    base.kv_len = g.prefix + g.max_tail;
    base.dtype = ScalarType::kFloat16;
    base.scale = 1.f / std::sqrt(static_cast<float>(g.head_dim));
    base.q = q.get();
    const int64_t qs[4] = {g.q_heads * g.head_dim, g.q_heads * g.head_dim, g.head_dim, 1};
    std::copy(qs, qs + 4, base.q_stride);
    std::copy(qs, qs + 4, base.out_stride);
    base.kv_batch_index = static_cast<int32_t*>(ids.get());
    base.cache_seqlens = static_cast<int32_t*>(lens.get());
    ws_bytes = decode_attention_cuda_workspace_bytes(base);
    ws = dev_alloc(ws_bytes);
  }

  Status run(const SlotCache& c) {
    const int64_t tok = g.row_elems(), slot = c.shape().slot_bytes() / 2;
    for (int64_t l = 0; l < g.layers; ++l) {
      DecodeAttentionParams p = base;
      p.k = reinterpret_cast<const __half*>(c.data()) + l * 2 * g.kv_heads * g.head_dim;
      p.v = static_cast<const __half*>(p.k) + g.kv_heads * g.head_dim;
      const int64_t ks[4] = {tok, slot, g.head_dim, 1};
      std::copy(ks, ks + 4, p.k_stride);
      std::copy(ks, ks + 4, p.v_stride);
      p.out = static_cast<__half*>(out.get()) + l * g.slots * g.q_heads * g.head_dim;
      p.workspace = ws_bytes ? ws.get() : nullptr;
      p.workspace_bytes = ws_bytes;
      PVT_RETURN_IF_ERROR(decode_attention_cuda(p, nullptr));
    }
    return Status::Ok();
  }
};

void check_memory(Report& r, const Config& g, const SlotCache& shared, const SlotCache& unshared) {
  const int64_t cb = 2 << 20, row = g.row_bytes();
  int64_t own = 0, all = 0;
  for (int64_t s = 0; s < g.slots; ++s) {
    const bool alias = s > 0 && s < g.sharing;
    own += chunks_of(alias ? g.tail(s) : g.len(s), row, cb) * cb;
    all += chunks_of(g.len(s), row, cb) * cb;
  }
  r.eq(static_cast<int64_t>(shared.mapped_bytes()), own, "memory.shared_mapped_is_unique_chunks");
  r.eq(static_cast<int64_t>(shared.shared_bytes()), (g.sharing - 1) * g.prefix * row, "memory.shared_bytes_are_aliases");
  r.eq(static_cast<int64_t>(unshared.mapped_bytes()), all, "memory.unshared_mapped");
  r.eq(static_cast<int64_t>(unshared.shared_bytes()), 0, "memory.unshared_shares_nothing");
  int64_t unique_tokens = 0;
  for (int64_t s = 0; s < g.slots; ++s) unique_tokens += (s > 0 && s < g.sharing) ? g.tail(s) : g.len(s);
  std::printf("info memory: unshared %.1f MiB, shared %.1f MiB (+ %.1f MiB of aliases), unique tokens %.1f MiB + one "
              "chunk per slot %.1f MiB: shared / that = %.3f\n", all / 1048576.0, own / 1048576.0,
              shared.shared_bytes() / 1048576.0, unique_tokens * row / 1048576.0, g.slots * cb / 1048576.0,
              double(own) / double(unique_tokens * row + g.slots * cb));
}

void decode_step(Report& r, const Config& g) {
  std::shared_ptr<SlotCache> shared, unshared;
  if (!build(r, g, false, &unshared) || !build(r, g, true, &shared)) return;
  check_memory(r, g, *shared, *unshared);
  Step step(g);
  const size_t out_bytes = g.layers * g.slots * g.q_heads * g.head_dim * 2;
  std::vector<uint8_t> out_shared(out_bytes), out_unshared(out_bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> ms[2];
  for (int i = 0; i < g.reps + 2; ++i) {
    for (int k = 0; k < 2; ++k) {  // interleaved: unshared, shared
      const SlotCache& c = k ? *shared : *unshared;
      cudaEventRecord(e0);
      if (!r.ok(step.run(c), k ? "step.shared_launch" : "step.unshared_launch")) return;
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float t = 0.f;
      cudaEventElapsedTime(&t, e0, e1);
      if (i >= 2) ms[k].push_back(t);  // two warm-up steps
      if (i == 0) cudaMemcpy((k ? out_shared : out_unshared).data(), step.out.get(), out_bytes, cudaMemcpyDeviceToHost);
    }
  }
  r.check(cudaDeviceSynchronize() == cudaSuccess, "step.sync", cudaGetErrorString(cudaGetLastError()));
  r.check(out_shared == out_unshared, "step.outputs_byte_identical");
  size_t nonzero = 0;
  for (size_t i = 0; i < out_bytes; ++i) nonzero += out_shared[i] != 0;
  r.check(nonzero > out_bytes / 4, "step.outputs_not_trivial");
  const double a = median(ms[0]) * 1e3, b = median(ms[1]) * 1e3;
  std::printf("info decode step (%lld layers x %lld slots, %lld sharing a %lld-token prefix; median of %d): "
              "unshared %.1f us, shared %.1f us (shared / unshared %.3f)\n", static_cast<long long>(g.layers),
              static_cast<long long>(g.slots), static_cast<long long>(g.sharing), static_cast<long long>(g.prefix),
              g.reps, a, b, b / a);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

// The driver calls a share makes, one by one for `chunks` 2 MiB chunks: where the per-chunk time goes.
void driver_breakdown(Report& r, int chunks) {
  const size_t cb = 2 << 20;
  CUdeviceptr va = 0;
  if (!r.check(cuMemAddressReserve(&va, chunks * cb, 0, 0, 0) == CUDA_SUCCESS, "driver.reserve")) return;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<CUmemGenericAllocationHandle> h(chunks);
  double t[5];
  bool ok = true;
  double t0 = now_us();
  for (int i = 0; i < chunks; ++i) ok &= cuMemCreate(&h[i], cb, &prop, 0) == CUDA_SUCCESS;
  t[0] = now_us() - t0;
  t0 = now_us();
  for (int i = 0; i < chunks; ++i) ok &= cuMemMap(va + i * cb, cb, 0, h[i], 0) == CUDA_SUCCESS;
  t[1] = now_us() - t0;
  t0 = now_us();
  for (int i = 0; i < chunks; ++i) ok &= cuMemSetAccess(va + i * cb, cb, &access, 1) == CUDA_SUCCESS;
  t[2] = now_us() - t0;
  t0 = now_us();
  for (int i = 0; i < chunks; ++i) ok &= cuMemUnmap(va + i * cb, cb) == CUDA_SUCCESS;
  t[3] = now_us() - t0;
  t0 = now_us();
  for (int i = 0; i < chunks; ++i) ok &= cuMemRelease(h[i]) == CUDA_SUCCESS;
  t[4] = now_us() - t0;
  ok &= cuMemAddressFree(va, chunks * cb) == CUDA_SUCCESS;
  r.check(ok, "driver.calls");
  std::printf("info driver per 2 MiB chunk (%d chunks): create %.2f us, map %.2f us, set access %.2f us, unmap %.2f us, "
              "release %.2f us\n", chunks, t[0] / chunks, t[1] / chunks, t[2] / chunks, t[3] / chunks, t[4] / chunks);
}

}  // namespace

int main(int argc, char** argv) {
  Report r;
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  cudaFree(nullptr);  // the primary context, current for the driver calls too
  // 4,096-token prefix = 256 chunks of 128 KiB rows; --small: 2-layer rows of 2 KiB, 2 chunks.
  const Config big{32, 8, 32, 128, 64, 32, 4096, 512, 10};
  const Config tiny{2, 2, 4, 128, 8, 4, 2048, 100, 1};
  decode_step(r, small ? tiny : big);
  if (!small) driver_breakdown(r, 2048);
  const MemoryStats s = memory_stats(kGpu);
  r.eq(s.mapped_bytes, 0, "end.mapped_bytes_zero");
  r.eq(s.shared_bytes, 0, "end.shared_bytes_zero");
  return r.finish();
}

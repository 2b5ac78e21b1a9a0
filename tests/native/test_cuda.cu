// Native GPU test: the CUDA backend behind Region and SeqMajorCache on Device::cuda(0), and
// append_tokens_cuda checked byte for byte against a host reference. Covers 1 and T tokens,
// fp16/bf16/fp32-sized elements, odd shapes, strided sources, truncate + re-append, a cache past
// 4 GiB, the past-reservation error, a real out-of-memory, unmap waiting for queued kernels on every
// stream that used the cache (a read on a second stream included, observed at the backend: no unmap
// is issued while that read may still run), and a fork() child that gets an error instead of a hang.
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/apis.h"
#include "harness.h"
#include "kernels/append_tokens.h"
#include "reference.h"
#include "unmap_observer_cuda.h"

using namespace pvt;
using pvt_test::Report;
using pvt_test::Source;
using pvt_test::UnmapObserver;

namespace {

const Device kGpu = Device::cuda(0);
constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kGiB = size_t(1) << 30;

bool cuda_ok(Report& r, cudaError_t e, const std::string& name) {
  if (e == cudaSuccess) return true;
  return r.check(false, name, std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e));
}

// A source uploaded to the GPU, same physical layout as on the host.
struct GpuSource {
  Source host;
  void* dev = nullptr;
  explicit GpuSource(Source s) : host(std::move(s)) {
    // cudaMemcpy from pageable memory may return before the DMA lands, and the appends run on a
    // non-blocking stream that does not wait for it: synchronise the device before any use.
    if (cudaMalloc(&dev, host.bytes.size()) != cudaSuccess ||
        cudaMemcpy(dev, host.bytes.data(), host.bytes.size(), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      if (dev) cudaFree(dev);
      dev = nullptr;
    }
  }
  ~GpuSource() { if (dev) cudaFree(dev); }
  GpuSource(const GpuSource&) = delete;
  GpuSource& operator=(const GpuSource&) = delete;
  const void* data() const { return static_cast<const char*>(dev) + host.offset_elems * host.elem_bytes; }
};

AppendParams params_for(const SeqMajorCache& cache, const GpuSource& src, int64_t pos) {
  AppendParams p;
  p.dst = cache.data();
  p.src = src.data();
  p.batch = src.host.dims[0];
  p.tokens = src.host.dims[1];
  p.heads = src.host.dims[2];
  p.head_dim = src.host.dims[3];
  p.dst_pos = pos;
  for (int i = 0; i < 4; ++i) p.src_stride[i] = src.host.stride[i];
  p.elem_bytes = src.host.elem_bytes;
  return p;
}

// What the adapter does for one append: claim [pos, pos+T) (mapping as needed), queue the copy,
// mirror it in `ref` (if given), and drop the previous view `prev_len` (the old tensor dies).
Status append(SeqMajorCache& cache, const GpuSource& src, int64_t pos, cudaStream_t stream,
              std::vector<uint8_t>* ref, int64_t prev_len) {
  if (src.dev == nullptr) return Status(Code::kOutOfMemory, "source upload failed");
  PVT_RETURN_IF_ERROR(cache.begin_append(pos, src.host.dims[1]));
  Status s = append_tokens_cuda(params_for(cache, src, pos), stream);
  if (s.ok()) s = cache.record_use(stream);  // what the adapter's launch_append does
  if (!s.ok()) {
    cache.remove_view(pos + src.host.dims[1]);
    return s;
  }
  if (ref) pvt_test::reference_append(ref, src.host, pos);
  if (prev_len > 0) cache.remove_view(prev_len);
  return Status::Ok();
}

// Downloads tokens [from, to) and compares them with `ref` (a mirror of the whole cache, or of
// just those tokens when ref_from == from).
bool verify(Report& r, const SeqMajorCache& cache, const std::vector<uint8_t>& ref, int64_t ref_from,
            int64_t from, int64_t to, cudaStream_t stream, const std::string& name) {
  if (!cuda_ok(r, cudaStreamSynchronize(stream), name)) return false;
  const int64_t tb = cache.shape().token_bytes();
  std::vector<uint8_t> got(static_cast<size_t>((to - from) * tb));
  if (!cuda_ok(r, cudaMemcpy(got.data(), cache.data() + from * tb, got.size(), cudaMemcpyDeviceToHost), name))
    return false;
  const int64_t at = pvt_test::first_diff(got.data(), ref.data() + (from - ref_from) * tb, got.size());
  return r.check(at < 0, name, "tokens [" + std::to_string(from) + ", " + std::to_string(to) +
                                   "): first difference at byte " + std::to_string(at));
}

// Runs before any runtime call: the backend must bring up the primary context itself, and the
// runtime must then see the same memory.
void test_backend(Report& r) {
  Backend* a = nullptr;
  Backend* b = nullptr;
  if (!r.ok(get_backend(kGpu, &a), "backend.get_cuda0")) return;
  r.ok(get_backend(kGpu, &b), "backend.get_cuda0_again");
  r.check(a == b, "backend.one_per_device");
  r.check(a->granularity() >= 4096 && a->granularity() % 4096 == 0, "backend.granularity",
          std::to_string(a->granularity()));
  std::printf("info granularity %zu bytes\n", a->granularity());
  r.code(get_backend(Device::cuda(4096), &b), Code::kInvalidArgument, "backend.bad_ordinal");

  std::unique_ptr<Region> reg;
  if (!r.ok(Region::create(kGpu, 64 * kMiB, 0, &reg), "region.create_before_runtime")) return;
  r.eq(reg->chunk_bytes(), a->granularity(), "region.default_chunk_is_granularity");
  const size_t c = reg->chunk_bytes();
  if (!r.ok(reg->map_range(2 * c, 3 * c), "region.map_middle_before_runtime")) return;
  r.check(reg->chunk_mapped(2) && reg->chunk_mapped(4) && !reg->chunk_mapped(1) && !reg->chunk_mapped(5),
          "region.map_middle_exact_chunks");
  // The runtime (primary context) reads and writes what the driver mapped.
  char* p = reg->base() + 2 * c;
  std::vector<uint8_t> back(3 * c);
  if (cuda_ok(r, cudaMemset(p, 0x3c, 3 * c), "region.runtime_memset") &&
      cuda_ok(r, cudaMemcpy(back.data(), p, 3 * c, cudaMemcpyDeviceToHost), "region.runtime_memcpy")) {
    r.check(back[0] == 0x3c && back[3 * c - 1] == 0x3c, "region.runtime_sees_mapping");
  }
  r.ok(reg->unmap_range(3 * c, c), "region.unmap_hole");
  r.check(!reg->chunk_mapped(3) && reg->mapped_bytes() == 2 * c, "region.unmap_hole_exact");
  r.code(reg->map_range(c / 2, c), Code::kInvalidArgument, "region.misaligned");
  r.code(reg->map_range(reg->reserved_bytes(), c), Code::kOutOfRange, "region.past_reservation");
  reg.reset();
  r.eq(memory_stats(kGpu).mapped_bytes, 0, "region.destroyed_unmaps");
}

struct Shape { int64_t heads, head_dim; };
struct Dtype { const char* name; int64_t bytes; };

void test_append_matrix(Report& r, std::mt19937& rng, cudaStream_t stream) {
  const Shape shapes[] = {{32, 128}, {3, 40}, {5, 64}, {3, 7}};
  const Dtype dtypes[] = {{"fp16", 2}, {"bf16", 2}, {"fp32", 4}};
  for (const Shape& sh : shapes)
    for (int64_t batch : {1, 8})
      for (const Dtype& dt : dtypes) {
        const std::string name = "append.B" + std::to_string(batch) + "_H" + std::to_string(sh.heads) +
                                 "_D" + std::to_string(sh.head_dim) + "_" + dt.name;
        std::shared_ptr<SeqMajorCache> cache;
        const CacheShape cs{batch, sh.heads, sh.head_dim, dt.bytes};
        if (!r.ok(SeqMajorCache::create(kGpu, cs, CacheConfig{64, 0}, &cache), name + ".create")) continue;
        std::vector<uint8_t> ref(static_cast<size_t>(64 * cs.token_bytes()));
        const int64_t T = 17;
        GpuSource prefill(pvt_test::make_source(batch, T, sh.heads, sh.head_dim, dt.bytes,
                                                pvt_test::kContiguous, 0, 0, rng));
        GpuSource one(pvt_test::make_source(batch, 1, sh.heads, sh.head_dim, dt.bytes,
                                            pvt_test::kContiguous, 0, 0, rng));
        GpuSource chunk(pvt_test::make_source(batch, T, sh.heads, sh.head_dim, dt.bytes,
                                              pvt_test::kContiguous, 0, 0, rng));
        Status s = append(*cache, prefill, 0, stream, &ref, 0);
        if (s.ok()) s = append(*cache, one, T, stream, &ref, T);
        if (s.ok()) s = append(*cache, chunk, T + 1, stream, &ref, T + 1);
        if (!r.ok(s, name)) continue;
        verify(r, *cache, ref, 0, 0, 2 * T + 1, stream, name);
        cache->remove_view(2 * T + 1);
      }
}

void test_strided(Report& r, std::mt19937& rng, cudaStream_t stream) {
  struct Layout { const char* name; std::array<int, 4> perm; int64_t pad, offset; };
  const Layout layouts[] = {
      {"heads_major", pvt_test::kHeadsMajor, 0, 0},   // [B,H,T,D] transposed view: 16-byte path
      {"dim_strided", pvt_test::kDimStrided, 0, 0},   // head_dim stride H: element path
      {"seq_major", pvt_test::kSeqMajor, 0, 0},
      {"padded_rows", pvt_test::kContiguous, 8, 0},   // row pitch D+8
      {"misaligned", pvt_test::kContiguous, 1, 1},    // odd pitch and pointer: element path
  };
  const struct { int64_t b, h, d, eb; const char* name; } cases[] = {
      {8, 32, 128, 2, "B8_H32_D128_fp16"}, {3, 3, 40, 4, "B3_H3_D40_fp32"}, {2, 5, 64, 2, "B2_H5_D64_bf16"}};
  for (const auto& c : cases) {
    std::shared_ptr<SeqMajorCache> cache;
    const CacheShape cs{c.b, c.h, c.d, c.eb};
    if (!r.ok(SeqMajorCache::create(kGpu, cs, CacheConfig{128, 0}, &cache), std::string("strided.create_") + c.name))
      continue;
    std::vector<uint8_t> ref(static_cast<size_t>(128 * cs.token_bytes()));
    int64_t pos = 0;
    for (const Layout& l : layouts) {
      for (int64_t T : {1, 9}) {
        const std::string name = std::string("strided.") + c.name + "_" + l.name + "_T" + std::to_string(T);
        GpuSource src(pvt_test::make_source(c.b, T, c.h, c.d, c.eb, l.perm, l.pad, l.offset, rng));
        if (!r.ok(append(*cache, src, pos, stream, &ref, pos), name)) break;
        pos += T;
        verify(r, *cache, ref, 0, 0, pos, stream, name);  // the whole prefix: earlier tokens intact
      }
    }
    cache->remove_view(pos);
  }
}

void test_truncate(Report& r, std::mt19937& rng) {
  // 64 KiB a token and 2 MiB chunks: 32 tokens a chunk, so truncation visibly releases chunks.
  const CacheShape cs{8, 32, 128, 2};
  std::shared_ptr<SeqMajorCache> cache;
  if (!r.ok(SeqMajorCache::create(kGpu, cs, CacheConfig{1024, 2 * kMiB}, &cache), "truncate.create")) return;
  std::vector<uint8_t> ref(static_cast<size_t>(1024 * cs.token_bytes()));
  GpuSource first(pvt_test::make_source(8, 100, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  cudaStream_t legacy = nullptr;  // the legacy default stream, as a framework without streams uses
  if (!r.ok(append(*cache, first, 0, legacy, &ref, 0), "truncate.append_100")) return;
  r.eq(cache->mapped_bytes(), 8 * kMiB, "truncate.mapped_100_tokens");
  r.ok(cache->add_view(40), "truncate.add_view");  // the truncated tensor
  cache->remove_view(100);  // the long one dies
  r.eq(cache->longest_view(), 40, "truncate.longest_40");
  r.eq(cache->mapped_bytes(), 4 * kMiB, "truncate.releases_chunks_past_40");
  r.check(cache->write_allowed(40) && !cache->write_allowed(39), "truncate.write_allowed_40");
  GpuSource again(pvt_test::make_source(8, 30, 32, 128, 2, pvt_test::kHeadsMajor, 0, 0, rng));
  if (!r.ok(append(*cache, again, 40, legacy, &ref, 40), "truncate.reappend_30")) return;
  r.eq(cache->mapped_bytes(), 6 * kMiB, "truncate.mapped_70_tokens");
  verify(r, *cache, ref, 0, 0, 70, legacy, "truncate.content_70");
  cache->remove_view(70);
  r.eq(cache->mapped_bytes(), 0, "truncate.last_view_releases_all");
}

void test_large(Report& r, std::mt19937& rng, cudaStream_t stream) {
  // B=8, H=32, D=128, fp16: 64 KiB a token; 70000 tokens reserve ~4.3 GiB.
  const CacheShape cs{8, 32, 128, 2};
  const int64_t tb = cs.token_bytes();
  std::shared_ptr<SeqMajorCache> cache;
  if (!r.ok(SeqMajorCache::create(kGpu, cs, CacheConfig{70000, 0}, &cache), "large.create")) return;
  struct Write { int64_t pos, tokens; std::array<int, 4> perm; };
  // Sparse writes, each checked; the last two sit past 4 GiB and past 2^31 elements, the very last
  // through the element path (strided head_dim) so its 64-bit index math is exercised.
  const Write writes[] = {{0, 64, pvt_test::kContiguous},      {16384, 64, pvt_test::kContiguous},
                          {32768, 64, pvt_test::kHeadsMajor},  {49152, 64, pvt_test::kContiguous},
                          {65472, 64, pvt_test::kContiguous},  {65536, 1, pvt_test::kContiguous},
                          {69000, 64, pvt_test::kDimStrided}};
  int64_t prev = 0;
  for (const Write& w : writes) {
    const std::string name = "large.append_at_" + std::to_string(w.pos);
    GpuSource src(pvt_test::make_source(8, w.tokens, 32, 128, 2, w.perm, 0, 0, rng));
    std::vector<uint8_t> ref(static_cast<size_t>(w.tokens * tb));
    if (!r.check(src.dev != nullptr, name, "source upload failed")) return;
    Status s = cache->begin_append(w.pos, w.tokens);
    if (s.ok()) s = append_tokens_cuda(params_for(*cache, src, w.pos), stream);
    if (!r.ok(s, name)) return;
    if (prev) cache->remove_view(prev);
    prev = w.pos + w.tokens;
    pvt_test::reference_append(&ref, src.host, 0);
    verify(r, *cache, ref, w.pos, w.pos, w.pos + w.tokens, stream, name);
  }
  const size_t chunk = cache->chunk_bytes();
  const size_t want = (size_t(69064 * tb) + chunk - 1) / chunk * chunk;
  r.eq(cache->mapped_bytes(), want, "large.mapped_past_4GiB");
  r.check(cache->mapped_bytes() > 4 * kGiB, "large.over_4GiB", std::to_string(cache->mapped_bytes()));
  std::printf("info large cache mapped %.2f GiB\n", cache->mapped_bytes() / double(kGiB));
  cache->remove_view(prev);
}

void test_past_reservation(Report& r, std::mt19937& rng, cudaStream_t stream) {
  const CacheShape cs{1, 32, 128, 2};  // 8 KiB a token: 256 tokens fill one 2 MiB chunk
  std::shared_ptr<SeqMajorCache> cache;
  if (!r.ok(SeqMajorCache::create(kGpu, cs, CacheConfig{256, 2 * kMiB}, &cache), "range.create")) return;
  r.eq(cache->capacity_tokens(), 256, "range.capacity");
  std::vector<uint8_t> ref(static_cast<size_t>(256 * cs.token_bytes()));
  GpuSource fill(pvt_test::make_source(1, 250, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  if (!r.ok(append(*cache, fill, 0, stream, &ref, 0), "range.append_250")) return;
  GpuSource ten(pvt_test::make_source(1, 10, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  r.code(append(*cache, ten, 250, stream, &ref, 0), Code::kOutOfRange, "range.append_past_reservation");
  r.code(cache->begin_append(256, 1), Code::kOutOfRange, "range.append_at_capacity");
  r.check(cache->longest_view() == 250 && cache->live_views() == 1 && cache->mapped_bytes() == 2 * kMiB,
          "range.bookkeeping_unchanged");
  verify(r, *cache, ref, 0, 0, 250, stream, "range.content_unchanged");
  GpuSource six(pvt_test::make_source(1, 6, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  r.ok(append(*cache, six, 250, stream, &ref, 250), "range.append_up_to_capacity");
  verify(r, *cache, ref, 0, 0, 256, stream, "range.content_full");
  cache->remove_view(256);
}

void test_oom(Report& r, std::mt19937& rng, cudaStream_t stream) {
  // A working cache (and its sources) set up before the GPU fills.
  const CacheShape cs{1, 32, 128, 2};
  std::shared_ptr<SeqMajorCache> cache;
  if (!r.ok(SeqMajorCache::create(kGpu, cs, CacheConfig{4096, 2 * kMiB}, &cache), "oom.cache_create")) return;
  std::vector<uint8_t> ref(static_cast<size_t>(4096 * cs.token_bytes()));
  GpuSource a(pvt_test::make_source(1, 16, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  GpuSource b(pvt_test::make_source(1, 1, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  GpuSource c(pvt_test::make_source(1, 512, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  if (!r.ok(append(*cache, a, 0, stream, &ref, 0), "oom.cache_prefill")) return;
  cuda_ok(r, cudaStreamSynchronize(stream), "oom.sync");

  std::unique_ptr<Region> big;
  if (!r.ok(Region::create(kGpu, 200 * kGiB, kGiB, &big), "oom.reserve_200GiB")) return;
  const int64_t base = memory_stats(kGpu).mapped_bytes;
  Status s;
  size_t n = 0;
  while (n < big->num_chunks() && (s = big->map_range(n * kGiB, kGiB)).ok()) ++n;
  std::printf("info mapped %zu GiB before: %s\n", n, s.to_string().c_str());
  r.code(s, Code::kOutOfMemory, "oom.driver_out_of_memory");
  r.check(n >= 64, "oom.mapped_many_GiB_first", std::to_string(n));
  r.eq(big->mapped_bytes(), n * kGiB, "oom.failed_map_left_nothing");
  r.eq(memory_stats(kGpu).mapped_bytes, base + int64_t(n * kGiB), "oom.stats_match");

  // The cache still works inside memory it already has.
  if (r.ok(append(*cache, b, 16, stream, &ref, 16), "oom.cache_append_while_full"))
    verify(r, *cache, ref, 0, 0, 17, stream, "oom.cache_content_while_full");

  // Release half: mapped bytes drop, and the cache can grow again.
  r.ok(big->unmap_range(0, (n / 2) * kGiB), "oom.release_half");
  r.eq(memory_stats(kGpu).mapped_bytes, base + int64_t((n - n / 2) * kGiB), "oom.stats_after_release");
  if (r.ok(append(*cache, c, 17, stream, &ref, 17), "oom.cache_grows_after_release"))
    verify(r, *cache, ref, 0, 0, 17 + 512, stream, "oom.cache_content_after_release");
  big.reset();
  r.eq(memory_stats(kGpu).mapped_bytes, int64_t(cache->mapped_bytes()), "oom.region_gone");
  cache->remove_view(17 + 512);
}

// Unmapping must wait for kernels already queued on the stream that touch the memory: release a
// cache while a slow (element-path) copy into it is still queued, then look for a fault.
void test_unmap_waits(Report& r, std::mt19937& rng, cudaStream_t stream) {
  const CacheShape cs{8, 32, 128, 2};
  std::shared_ptr<SeqMajorCache> cache;
  if (!r.ok(SeqMajorCache::create(kGpu, cs, CacheConfig{2048, 0}, &cache), "unmap_waits.create")) return;
  GpuSource src(pvt_test::make_source(8, 512, 32, 128, 2, pvt_test::kDimStrided, 0, 0, rng));
  int64_t prev = 0;
  for (int64_t pos = 0; pos < 2048; pos += 512) {
    if (!r.ok(append(*cache, src, pos, stream, nullptr, prev), "unmap_waits.queue")) return;
    prev = pos + 512;
  }
  cache->remove_view(prev);  // unmaps everything right after queuing ~128 MiB of strided copies
  r.eq(cache->mapped_bytes(), 0, "unmap_waits.released");
  if (cuda_ok(r, cudaDeviceSynchronize(), "unmap_waits.no_fault")) r.check(true, "unmap_waits.no_fault");
}

using pvt_test::spin_kernel;

// Release must wait for every stream that used the cache, not only the last one that appended:
// stream B reads the cache (the append kernel copying it out, as copy-on-write and the attention op
// read it) behind a ~0.3 s spin; stream A then appends last; the cache's last view dies at once.
// The release must block until B's read has run (its event is complete when remove_view returns),
// the read must see the right bytes, and nothing may fault.
void test_release_waits_for_a_reader_on_another_stream(Report& r, std::mt19937& rng, cudaStream_t a) {
  const CacheShape cs{8, 32, 128, 2};  // 64 KiB a token
  const int64_t n = 256;               // 16 MiB
  std::shared_ptr<SeqMajorCache> cache;
  if (!r.ok(SeqMajorCache::create(kGpu, cs, CacheConfig{1024, 0}, &cache), "two_streams.create")) return;
  cudaStream_t b = nullptr;
  if (!cuda_ok(r, cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "two_streams.stream_b")) return;
  std::vector<uint8_t> ref(static_cast<size_t>(n * cs.token_bytes()));
  GpuSource src(pvt_test::make_source(8, n, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  if (!r.ok(append(*cache, src, 0, a, &ref, 0), "two_streams.write_on_a")) return;
  if (!cuda_ok(r, cudaStreamSynchronize(a), "two_streams.sync_a")) return;

  // Reader on B: spin, then copy the cache (seq-major [n, B, H, D]) out as [B, n, H, D].
  void* out = nullptr;
  if (!cuda_ok(r, cudaMalloc(&out, ref.size()), "two_streams.out")) return;
  cudaEvent_t read_done = nullptr;
  cudaEventCreateWithFlags(&read_done, cudaEventDisableTiming);
  spin_kernel<<<1, 1, 0, b>>>(600000000LL);  // ~0.3 s at 2 GHz
  AppendParams rd;
  rd.dst = out; rd.src = cache->data();
  rd.batch = 8; rd.tokens = n; rd.heads = 32; rd.head_dim = 128; rd.dst_pos = 0; rd.elem_bytes = 2;
  const int64_t seq_major[4] = {32 * 128, 8 * 32 * 128, 128, 1};  // (b, t, h, d) strides of [t, b, h, d]
  std::copy(seq_major, seq_major + 4, rd.src_stride);
  // dst of the append kernel is seq-major too: out holds [n, B, H, D], the same bytes as `ref`.
  if (!r.ok(append_tokens_cuda(rd, b), "two_streams.read_on_b")) return;
  r.ok(cache->record_use(b), "two_streams.reader_records_use");  // what the attention op does
  cudaEventRecord(read_done, b);

  // A appends last, then every view dies: the release runs now, on the host.
  GpuSource one(pvt_test::make_source(8, 1, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  if (!r.ok(append(*cache, one, n, a, nullptr, n), "two_streams.append_on_a_last")) return;
  cache->remove_view(n + 1);
  r.eq(cache->mapped_bytes(), 0, "two_streams.released");
  const cudaError_t q = cudaEventQuery(read_done);
  r.check(q == cudaSuccess, "two_streams.release_waited_for_reader",
          std::string("the read on stream B was still queued when the release returned: ") + cudaGetErrorName(q));
  if (cuda_ok(r, cudaStreamSynchronize(b), "two_streams.no_fault")) {
    std::vector<uint8_t> got(ref.size());
    if (cuda_ok(r, cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost), "two_streams.download")) {
      const int64_t at = pvt_test::first_diff(got.data(), ref.data(), got.size());
      r.check(at < 0, "two_streams.reader_saw_the_cache", "first difference at byte " + std::to_string(at));
    }
  }
  cudaEventDestroy(read_done);
  cudaFree(out);
  cudaStreamDestroy(b);
}

// Stream A writes a region, stream B reads it behind a ~0.3 s spin, A writes again (the last user);
// then the host releases the region. Every unmap must come after B's read has finished.
void test_unmap_never_overtakes_a_reader(Report& r, cudaStream_t a) {
  Backend* real = nullptr;
  if (!r.ok(get_backend(kGpu, &real), "unmap_order.backend")) return;
  UnmapObserver obs(real);
  std::unique_ptr<Region> region;
  if (!r.ok(Region::create_on(&obs, 64 * kMiB, 0, &region), "unmap_order.create")) return;
  const size_t bytes = region->round_up(4 * kMiB);
  if (!r.ok(region->map_range(0, bytes), "unmap_order.map")) return;
  cudaStream_t b = nullptr;
  if (!cuda_ok(r, cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "unmap_order.stream_b")) return;
  void* out = nullptr;
  cudaEvent_t read_done = nullptr;
  if (!cuda_ok(r, cudaMalloc(&out, bytes), "unmap_order.out") ||
      !cuda_ok(r, cudaEventCreateWithFlags(&read_done, cudaEventDisableTiming), "unmap_order.event"))
    return;
  cudaMemsetAsync(region->base(), 0x5a, bytes, a);
  r.ok(region->record_use(a), "unmap_order.writer_records_use");
  cuda_ok(r, cudaStreamSynchronize(a), "unmap_order.sync_a");
  spin_kernel<<<1, 1, 0, b>>>(600000000LL);
  cudaMemcpyAsync(out, region->base(), bytes, cudaMemcpyDeviceToDevice, b);
  r.ok(region->record_use(b), "unmap_order.reader_records_use");
  cudaEventRecord(read_done, b);
  obs.watch = read_done;
  cudaMemsetAsync(region->base(), 0x5a, bytes, a);  // same bytes: A is now the most recent user
  r.ok(region->record_use(a), "unmap_order.writer_records_use_again");
  r.eq(region->streams_in_use(), 2, "unmap_order.two_streams_remembered");
  r.ok(region->unmap_range(0, bytes), "unmap_order.release");
  // The release deferred its unmaps (issue 30 point 3); collect(true) blocks until they are done.
  r.ok(region->collect(true), "unmap_order.collect");
  r.check(obs.unmaps > 0, "unmap_order.unmapped", "the release issued no unmap");
  r.eq(obs.unmaps_while_reading, 0, "unmap_order.no_unmap_while_the_reader_may_run");
  if (cuda_ok(r, cudaStreamSynchronize(b), "unmap_order.reader_finished")) {
    std::vector<uint8_t> got(bytes);
    if (cuda_ok(r, cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost), "unmap_order.download")) {
      r.check(std::all_of(got.begin(), got.end(), [](uint8_t x) { return x == 0x5a; }),
              "unmap_order.reader_saw_the_bytes");
    }
  }
  region.reset();
  cudaEventDestroy(read_done);
  cudaFree(out);
  cudaStreamDestroy(b);
}

// After fork() in a process that used CUDA, the child's CUDA calls fail with a clear error instead
// of hanging; the parent is unaffected. A child that hangs is killed by its alarm and reported.
void test_fork_child_gets_an_error(Report& r, std::mt19937& rng, cudaStream_t stream) {
  const CacheShape cs{1, 32, 128, 2};
  std::shared_ptr<SeqMajorCache> cache;
  if (!r.ok(SeqMajorCache::create(kGpu, cs, CacheConfig{1024, 0}, &cache), "fork.create")) return;
  GpuSource src(pvt_test::make_source(1, 300, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  if (!r.ok(append(*cache, src, 0, stream, nullptr, 0), "fork.append_before")) return;
  cuda_ok(r, cudaStreamSynchronize(stream), "fork.sync");
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(30);
    int bad = 0;
    const Status usable = check_device_usable(kGpu);
    if (usable.code() != Code::kUnsupported || usable.message().find("fork") == std::string::npos) bad |= 1;
    std::unique_ptr<Region> reg;
    const Status created = Region::create(kGpu, 64 * kMiB, 0, &reg);
    if (created.code() != Code::kUnsupported || created.message().find("fork") == std::string::npos) bad |= 2;
    if (cache->begin_append(300, 300).code() != Code::kUnsupported) bad |= 4;  // needs a new chunk
    cache->remove_view(300);  // release in the child: an error inside, never a hang
    if (!check_device_usable(Device::host()).ok()) bad |= 8;
    std::printf("info fork child: %s | %s\n", usable.to_string().c_str(), created.to_string().c_str());
    std::fflush(stdout);
    _exit(bad);
  }
  int status = 0;
  if (!r.check(pid > 0 && waitpid(pid, &status, 0) == pid, "fork.child_ran")) return;
  if (WIFSIGNALED(status)) {
    r.check(false, "fork.child_did_not_hang", std::string("child killed by signal ") + strsignal(WTERMSIG(status)));
    return;
  }
  r.check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork.child_gets_clear_errors",
          "child exit bits " + std::to_string(WEXITSTATUS(status)) +
              " (1 check_device_usable, 2 Region::create, 4 begin_append, 8 host)");
  // The parent still works, and its cache is intact.
  r.ok(check_device_usable(kGpu), "fork.parent_still_usable");
  GpuSource more(pvt_test::make_source(1, 300, 32, 128, 2, pvt_test::kContiguous, 0, 0, rng));
  r.ok(append(*cache, more, 300, stream, nullptr, 300), "fork.parent_appends_after");
  cuda_ok(r, cudaStreamSynchronize(stream), "fork.parent_sync");
  cache->remove_view(600);
}

void test_kernel_errors(Report& r) {
  AppendParams p;
  int64_t dummy = 0;
  p.dst = &dummy; p.src = &dummy; p.batch = p.tokens = p.heads = p.head_dim = 1; p.elem_bytes = 8;
  const Status s = append_tokens_cuda(p, nullptr);
  r.code(s, Code::kInvalidArgument, "kernel.elem_bytes_8_rejected");
  r.check(s.message().find('8') != std::string::npos, "kernel.error_names_size", s.message());
}

}  // namespace

int main() {
  Report r;
  test_backend(r);  // first: before the runtime has touched the device
  cudaDeviceProp prop;
  if (!cuda_ok(r, cudaGetDeviceProperties(&prop, 0), "runtime.device")) return r.finish();
  std::printf("info device %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
              prop.totalGlobalMem / double(kGiB));
  cudaStream_t stream = nullptr;
  if (!cuda_ok(r, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "runtime.stream")) return r.finish();
  std::mt19937 rng(2024);
  test_append_matrix(r, rng, stream);
  test_strided(r, rng, stream);
  test_truncate(r, rng);
  test_large(r, rng, stream);
  test_past_reservation(r, rng, stream);
  test_oom(r, rng, stream);
  test_kernel_errors(r);
  test_unmap_waits(r, rng, stream);
  test_fork_child_gets_an_error(r, rng, stream);
  test_release_waits_for_a_reader_on_another_stream(r, rng, stream);
  test_unmap_never_overtakes_a_reader(r, stream);
  cudaStreamDestroy(stream);
  const MemoryStats s = memory_stats(kGpu);
  r.eq(s.mapped_bytes, 0, "end.mapped_bytes_zero");
  r.eq(s.live_regions, 0, "end.live_regions_zero");
  r.eq(s.reserved_bytes, 0, "end.reserved_bytes_zero");
  r.eq(s.live_vtensors, 0, "end.live_vtensors_zero");
  r.eq(s.map_calls, s.unmap_calls, "end.every_map_unmapped");
  std::printf("info peak mapped %.2f GiB, %lld maps\n", s.peak_mapped_bytes / double(kGiB),
              static_cast<long long>(s.map_calls));
  return r.finish();
}

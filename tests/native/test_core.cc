// Native test of the framework-free core on the host backend (what CI runs):
// Backend primitives, Region chunk bookkeeping and the mapped limit, SeqMajorCache views and
// write rules, and append_tokens_cpu content against an independent reference.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/apis.h"
#include "alloc_failure_injection.h"
#include "harness.h"
#include "kernels/append_tokens.h"
#include "reference.h"

using namespace pvt;
using pvt_test::Report;


namespace {

const Device kHost = Device::host();

void test_backend(Report& r) {
  Backend* be = nullptr;
  if (!r.ok(get_backend(kHost, &be), "backend.get_host")) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  r.eq(be->granularity(), page, "backend.granularity_is_page");
  void* base = nullptr;
  if (!r.ok(be->reserve(4 * page, &base), "backend.reserve")) return;
  char* p = static_cast<char*>(base) + page;
  PhysHandle h = 0;
  if (r.ok(be->create_chunk(page, &h), "backend.create") && r.ok(be->map_chunk(p, page, h), "backend.map")) {
    std::memset(p, 0x5a, page);
    r.check(p[0] == 0x5a && p[page - 1] == 0x5a, "backend.mapped_memory_writable");
    r.ok(be->unmap_chunk(p, page), "backend.unmap");
    r.ok(be->release_chunk(h, page), "backend.release");
    // A new chunk at the same place gives fresh (zeroed) pages: the old contents really went away.
    if (r.ok(be->create_chunk(page, &h), "backend.recreate") && r.ok(be->map_chunk(p, page, h), "backend.remap")) {
      r.check(p[0] == 0 && p[page - 1] == 0, "backend.remap_is_fresh", "old bytes survived unmap");
      r.ok(be->unmap_chunk(p, page), "backend.unmap_again");
      r.ok(be->release_chunk(h, page), "backend.release_again");
    }
  }
  r.ok(be->free_reservation(base, 4 * page), "backend.free_reservation");
#ifndef PADDLE_VTENSOR_WITH_CUDA
  r.code(get_backend(Device::cuda(0), &be), Code::kUnsupported, "backend.cuda_unsupported_without_cuda");
#endif
}

void test_region(Report& r) {
  const size_t c = 64 << 10;
  const MemoryStats before = memory_stats(kHost);
  std::unique_ptr<Region> reg;
  // Sizes round up: the chunk to the page size, the reservation to whole chunks.
  if (!r.ok(Region::create(kHost, 10 * c + 1, c - 100, &reg), "region.create")) return;
  r.eq(reg->chunk_bytes(), c, "region.chunk_rounded_to_granularity");
  r.eq(reg->num_chunks(), 11, "region.reservation_rounded_to_chunks");
  r.eq(memory_stats(kHost).live_regions, before.live_regions + 1, "region.stats_live_regions");
  r.eq(memory_stats(kHost).reserved_bytes, before.reserved_bytes + int64_t(11 * c),
       "region.stats_reserved_bytes");
  r.code(Region::create(kHost, 0, c, &reg), Code::kInvalidArgument, "region.zero_size_rejected");

  // An arbitrary range in the middle, then an overlapping one: only the new chunks are mapped.
  if (!r.ok(reg->map_range(3 * c, 2 * c), "region.map_middle")) return;
  r.check(reg->chunk_mapped(3) && reg->chunk_mapped(4) && !reg->chunk_mapped(2) && !reg->chunk_mapped(5),
          "region.map_middle_exact_chunks");
  r.check(reg->is_mapped(3 * c, 2 * c) && !reg->is_mapped(2 * c, c + 1) && !reg->is_mapped(4 * c, c + 1),
          "region.is_mapped");
  std::memset(reg->base() + 3 * c, 0x11, 2 * c);
  const int64_t maps0 = memory_stats(kHost).map_calls;
  r.ok(reg->map_range(2 * c, 4 * c), "region.map_overlapping");
  r.eq(memory_stats(kHost).map_calls - maps0, 2, "region.map_overlapping_maps_only_new");
  r.eq(reg->mapped_bytes(), 4 * c, "region.mapped_bytes");
  r.check(reg->base()[3 * c] == 0x11 && reg->base()[5 * c - 1] == 0x11, "region.remap_keeps_contents");

  // Release a hole in the middle; its neighbours keep their contents.
  r.ok(reg->unmap_range(4 * c, c), "region.unmap_middle");
  r.check(!reg->chunk_mapped(4) && reg->chunk_mapped(3) && reg->chunk_mapped(5), "region.unmap_exact_chunk");
  r.check(reg->base()[3 * c] == 0x11 && reg->base()[4 * c - 1] == 0x11, "region.unmap_neighbour_intact");
  r.ok(reg->unmap_range(0, 11 * c), "region.unmap_all_including_unmapped");
  r.eq(reg->mapped_bytes(), 0, "region.all_released");

  // Malformed ranges change nothing.
  r.code(reg->map_range(1, c), Code::kInvalidArgument, "region.misaligned_offset");
  r.code(reg->map_range(0, c + 1), Code::kInvalidArgument, "region.misaligned_size");
  r.code(reg->map_range(10 * c, 2 * c), Code::kOutOfRange, "region.past_reservation");
  r.code(reg->ensure_mapped(11 * c + 1), Code::kOutOfRange, "region.ensure_mapped_past_reservation");
  r.eq(reg->mapped_bytes(), 0, "region.errors_map_nothing");

  // Host kernels are synchronous: recording a stream's use keeps nothing to wait for.
  r.ok(reg->record_use(nullptr), "region.host_record_use");
  r.eq(reg->streams_in_use(), 0, "region.host_keeps_no_events");

  // Growing tail helpers.
  r.ok(reg->ensure_mapped(2 * c + 1), "region.ensure_mapped");
  r.eq(reg->mapped_bytes(), 3 * c, "region.ensure_mapped_rounds_up");
  r.ok(reg->release_from(c - 1), "region.release_from");
  r.eq(reg->mapped_bytes(), c, "region.release_from_keeps_partial_chunk");

  reg.reset();
  const MemoryStats after = memory_stats(kHost);
  r.eq(after.mapped_bytes, before.mapped_bytes, "region.destructor_unmaps");
  r.eq(after.live_regions, before.live_regions, "region.destructor_frees");
}

void test_mapped_limit(Report& r) {
  const size_t c = 64 << 10;
  std::unique_ptr<Region> reg;
  if (!r.ok(Region::create(kHost, 8 * c, c, &reg), "limit.create")) return;
  const int64_t base = memory_stats(kHost).mapped_bytes;
  set_mapped_limit(kHost, base + int64_t(2 * c));
  r.eq(memory_stats(kHost).mapped_limit, base + int64_t(2 * c), "limit.reported");
  // All or nothing: 4 chunks would pass the limit, so none stays mapped.
  r.code(reg->map_range(c, 4 * c), Code::kOutOfMemory, "limit.over_limit_is_oom");
  r.eq(reg->mapped_bytes(), 0, "limit.over_limit_maps_nothing");
  r.eq(memory_stats(kHost).mapped_bytes, base, "limit.over_limit_stats_unchanged");
  r.ok(reg->map_range(c, 2 * c), "limit.up_to_limit_ok");
  r.code(reg->map_range(0, c), Code::kOutOfMemory, "limit.one_more_chunk_is_oom");
  r.ok(reg->map_range(c, 2 * c), "limit.remapping_mapped_is_free");
  set_mapped_limit(kHost, 0);
  r.ok(reg->map_range(0, 8 * c), "limit.removed");
  r.eq(reg->mapped_bytes(), 8 * c, "limit.removed_maps_all");
}

// Appends `src` at `pos` with append_tokens_cpu and mirrors it into `ref`.
Status cpu_append(SeqMajorCache& cache, const pvt_test::Source& src, int64_t pos,
                  std::vector<uint8_t>* ref) {
  AppendParams p;
  p.dst = cache.data();
  p.src = src.data();
  p.batch = src.dims[0];
  p.tokens = src.dims[1];
  p.heads = src.dims[2];
  p.head_dim = src.dims[3];
  p.dst_pos = pos;
  for (int i = 0; i < 4; ++i) p.src_stride[i] = src.stride[i];
  p.elem_bytes = src.elem_bytes;
  PVT_RETURN_IF_ERROR(append_tokens_cpu(p));
  pvt_test::reference_append(ref, src, pos);
  return Status::Ok();
}

bool same_prefix(const SeqMajorCache& cache, const std::vector<uint8_t>& ref, int64_t tokens,
                 std::string* why) {
  const size_t n = static_cast<size_t>(tokens * cache.shape().token_bytes());
  const int64_t at = pvt_test::first_diff(reinterpret_cast<const uint8_t*>(cache.data()), ref.data(), n);
  if (at >= 0) *why = "first difference at byte " + std::to_string(at) + " of " + std::to_string(n);
  return at < 0;
}

void test_cache(Report& r) {
  std::mt19937 rng(7);
  const CacheShape shape{2, 3, 5, 2};  // 60 bytes a token: tokens straddle chunk boundaries
  const int64_t tb = shape.token_bytes();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto round = [&](int64_t tokens) { return (tokens * tb + page - 1) / page * page; };

  std::shared_ptr<SeqMajorCache> cache;
  r.code(SeqMajorCache::create(kHost, CacheShape{2, 3, 5, 3}, CacheConfig{100, page}, &cache),
         Code::kInvalidArgument, "cache.bad_elem_bytes");
  r.code(SeqMajorCache::create(kHost, CacheShape{0, 3, 5, 2}, CacheConfig{100, page}, &cache),
         Code::kInvalidArgument, "cache.bad_batch");
  r.code(SeqMajorCache::create(kHost, shape, CacheConfig{0, page}, &cache), Code::kInvalidArgument,
         "cache.bad_capacity");
  if (!r.ok(SeqMajorCache::create(kHost, shape, CacheConfig{1000, page}, &cache), "cache.create")) return;
  r.check(cache->capacity_tokens() >= 1000 && cache->capacity_tokens() * tb <= int64_t(cache->reserved_bytes()),
          "cache.capacity_fills_reservation", std::to_string(cache->capacity_tokens()));
  r.check(SeqMajorCache::find(cache->data() + 100) == cache, "cache.find_inside");
  r.check(SeqMajorCache::find(&rng) == nullptr, "cache.find_outside");
  std::vector<uint8_t> ref(cache->reserved_bytes());
  std::string why;

  // Prefill 10 tokens, then decode one token at a time; each step drops the previous view.
  auto prefill = pvt_test::make_source(2, 10, 3, 5, 2, pvt_test::kContiguous, 0, 0, rng);
  if (!r.ok(cache->begin_append(0, 10), "cache.begin_prefill")) return;
  r.ok(cpu_append(*cache, prefill, 0, &ref), "cache.cpu_prefill");
  r.eq(cache->longest_view(), 10, "cache.longest_after_prefill");
  r.eq(cache->live_views(), 1, "cache.views_after_prefill");
  r.eq(cache->mapped_bytes(), round(10), "cache.mapped_after_prefill");
  r.check(cache->write_allowed(10) && !cache->write_allowed(9), "cache.write_allowed_at_end_only");
  r.code(cache->begin_append(5, 1), Code::kConflict, "cache.write_into_live_view_conflicts");
  r.eq(cache->live_views(), 1, "cache.conflict_changes_nothing");
  for (int64_t pos = 10; pos < 110; ++pos) {
    auto tok = pvt_test::make_source(2, 1, 3, 5, 2, pvt_test::kHeadsMajor, 0, 0, rng);
    Status s = cache->begin_append(pos, 1);
    if (s.ok()) s = cpu_append(*cache, tok, pos, &ref);
    if (!s.ok()) { r.ok(s, "cache.decode_steps"); return; }
    cache->remove_view(pos);
  }
  r.check(true, "cache.decode_steps");
  r.eq(cache->longest_view(), 110, "cache.longest_after_decode");
  r.eq(cache->live_views(), 1, "cache.one_view_after_decode");
  r.eq(cache->mapped_bytes(), round(110), "cache.mapped_after_decode");
  r.check(same_prefix(*cache, ref, 110, &why), "cache.content_after_decode", why);

  // Truncate to 50: a new view of 50, the 110 view dies, memory past token 50 goes back.
  r.ok(cache->add_view(50), "cache.truncate_add_view");
  cache->remove_view(110);
  r.eq(cache->longest_view(), 50, "cache.truncate_longest");
  r.eq(cache->mapped_bytes(), round(50), "cache.truncate_releases_tail");
  r.check(cache->write_allowed(50) && !cache->write_allowed(49), "cache.truncate_write_allowed");
  auto more = pvt_test::make_source(2, 7, 3, 5, 2, pvt_test::kDimStrided, 1, 1, rng);
  if (r.ok(cache->begin_append(50, 7), "cache.reappend_after_truncate")) {
    r.ok(cpu_append(*cache, more, 50, &ref), "cache.cpu_reappend");
    r.check(same_prefix(*cache, ref, 57, &why), "cache.content_after_reappend", why);
  }
  cache->remove_view(50);
  cache->remove_view(12345);  // unbalanced: ignored, never unmaps on a guess
  r.eq(cache->live_views(), 1, "cache.unbalanced_remove_ignored");

  // Past the reservation: OutOfRange and nothing changes.
  const int64_t cap = cache->capacity_tokens();
  const size_t mapped = cache->mapped_bytes();
  r.code(cache->begin_append(cap, 1), Code::kOutOfRange, "cache.append_past_capacity");
  r.code(cache->begin_append(cap - 3, 5), Code::kOutOfRange, "cache.append_straddling_capacity");
  r.code(cache->reserve_tokens(cap + 1), Code::kOutOfRange, "cache.reserve_past_capacity");
  r.check(cache->longest_view() == 57 && cache->live_views() == 1 && cache->mapped_bytes() == mapped,
          "cache.out_of_range_changes_nothing");
  r.code(cache->begin_append(-1, 1), Code::kInvalidArgument, "cache.negative_pos");
  r.code(cache->begin_append(57, 0), Code::kInvalidArgument, "cache.zero_tokens");
  r.check(same_prefix(*cache, ref, 57, &why), "cache.content_after_errors", why);

  // Under the mapped limit an append fails whole and the cache stays usable.
  set_mapped_limit(kHost, memory_stats(kHost).mapped_bytes);
  r.code(cache->begin_append(57, 200), Code::kOutOfMemory, "cache.append_over_limit");
  r.check(cache->longest_view() == 57 && cache->mapped_bytes() == mapped, "cache.over_limit_changes_nothing");
  set_mapped_limit(kHost, 0);
  r.ok(cache->reserve_tokens(cap), "cache.reserve_full_capacity");
  r.eq(cache->mapped_bytes(), cache->reserved_bytes(), "cache.full_capacity_mapped");
  cache->remove_view(57);
  r.eq(cache->mapped_bytes(), 0, "cache.last_view_gone_releases_all");
}

void test_cpu_kernel(Report& r) {
  std::mt19937 rng(11);
  struct Case { int64_t b, t, h, d, eb; std::array<int, 4> perm; int64_t pad, off; const char* name; };
  const Case cases[] = {
      {1, 1, 32, 128, 2, pvt_test::kContiguous, 0, 0, "fp16_b1_t1"},
      {8, 5, 32, 128, 2, pvt_test::kHeadsMajor, 0, 0, "fp16_b8_t5_heads_major"},
      {3, 4, 3, 40, 4, pvt_test::kDimStrided, 0, 0, "fp32_dim_strided"},
      {2, 3, 3, 7, 2, pvt_test::kSeqMajor, 3, 1, "fp16_seq_major_padded_offset"},
  };
  for (const Case& k : cases) {
    const std::string name = std::string("cpu_kernel.") + k.name;
    const int64_t pos = 3;
    std::vector<uint8_t> got(static_cast<size_t>((pos + k.t) * k.b * k.h * k.d * k.eb), 0xee);
    std::vector<uint8_t> want = got;
    auto src = pvt_test::make_source(k.b, k.t, k.h, k.d, k.eb, k.perm, k.pad, k.off, rng);
    AppendParams p;
    p.dst = got.data(); p.src = src.data();
    p.batch = k.b; p.tokens = k.t; p.heads = k.h; p.head_dim = k.d; p.dst_pos = pos;
    for (int i = 0; i < 4; ++i) p.src_stride[i] = src.stride[i];
    p.elem_bytes = k.eb;
    if (!r.ok(append_tokens_cpu(p), name)) continue;
    pvt_test::reference_append(&want, src, pos);
    const int64_t at = pvt_test::first_diff(got.data(), want.data(), got.size());
    r.check(at < 0, name + "_content", "first difference at byte " + std::to_string(at));
  }
  AppendParams ok;
  int x = 0;
  ok.dst = &x; ok.src = &x; ok.batch = ok.tokens = ok.heads = ok.head_dim = 1; ok.elem_bytes = 2;
  r.ok(check_append_params(ok), "check_params.minimal_ok");
  AppendParams bad = ok; bad.dst = nullptr;
  r.code(check_append_params(bad), Code::kInvalidArgument, "check_params.null_dst");
  bad = ok; bad.src = nullptr;
  r.code(check_append_params(bad), Code::kInvalidArgument, "check_params.null_src");
  bad = ok; bad.elem_bytes = 8;
  r.code(append_tokens_cpu(bad), Code::kInvalidArgument, "check_params.elem_bytes_8");
  bad = ok; bad.tokens = 0;
  r.code(check_append_params(bad), Code::kInvalidArgument, "check_params.zero_tokens");
  bad = ok; bad.dst_pos = -1;
  r.code(check_append_params(bad), Code::kInvalidArgument, "check_params.negative_pos");
}

// Resident set size of this process in bytes (/proc/self/statm, second field, in pages).
int64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f == nullptr || std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
  if (f) std::fclose(f);
  return int64_t(resident) * sysconf(_SC_PAGESIZE);
}

// Bookkeeping grows with what is mapped, not with what is reserved: a 16 TiB reservation of one-page
// chunks (4 billion chunks) costs almost no host memory, maps anywhere in it, and never aborts.
void test_huge_reservations(Report& r) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const int64_t rss0 = rss_bytes();
  {
    std::unique_ptr<Region> reg;
    if (!r.ok(Region::create(kHost, size_t(1) << 44, 1, &reg), "huge.region_16TiB_page_chunks")) return;
    r.eq(reg->num_chunks(), (size_t(1) << 44) / page, "huge.region_num_chunks");
    const size_t far = reg->reserved_bytes() - page;  // the very last chunk
    r.ok(reg->map_range(0, 2 * page), "huge.map_first");
    r.ok(reg->map_range(far, page), "huge.map_last");
    r.ok(reg->map_range(size_t(1) << 43, page), "huge.map_middle");
    reg->base()[far] = 7;
    reg->base()[size_t(1) << 43] = 8;
    r.check(reg->is_mapped(0, 2 * page) && reg->is_mapped(far, page) && !reg->is_mapped(page, 2 * page),
            "huge.is_mapped");
    r.eq(reg->mapped_bytes(), 4 * page, "huge.mapped_bytes");
    r.ok(reg->release_from(page), "huge.release_from_across_16TiB");  // O(mapped), not O(reserved)
    r.eq(reg->mapped_bytes(), page, "huge.release_from_left_first");
    const int64_t grew = rss_bytes() - rss0;
    std::printf("info 16 TiB region, 1-page chunks: RSS grew by %lld bytes\n", static_cast<long long>(grew));
    r.check(grew < (int64_t(4) << 20), "huge.region_rss_small", std::to_string(grew) + " bytes");
  }
  {
    // The case: from_dense(zeros([4, 1, 8, 128]), max_seq_len=10**9, chunk_bytes=1) on fp32.
    std::shared_ptr<SeqMajorCache> cache;
    const CacheShape shape{4, 8, 128, 4};  // 16 KiB a token: 10^9 tokens reserve ~14.6 TiB
    if (!r.ok(SeqMajorCache::create(kHost, shape, CacheConfig{1000000000, 1}, &cache), "huge.cache_1e9_tokens"))
      return;
    r.eq(cache->capacity_tokens(), 1000000000, "huge.cache_capacity");
    if (r.ok(cache->begin_append(0, 1), "huge.cache_append_one")) {
      std::memset(cache->data(), 1, shape.token_bytes());
      r.ok(cache->begin_append(1, 3), "huge.cache_append_three");
      cache->remove_view(1);
      cache->remove_view(4);
    }
    r.eq(cache->mapped_bytes(), 0, "huge.cache_released");
    r.code(cache->begin_append(1000000000, 1), Code::kOutOfRange, "huge.cache_past_capacity");
    const int64_t grew = rss_bytes() - rss0;
    std::printf("info 1e9-token cache, 1-page chunks: RSS grew by %lld bytes\n", static_cast<long long>(grew));
    r.check(grew < (int64_t(4) << 20), "huge.cache_rss_small", std::to_string(grew) + " bytes");
  }
  // Past what the address space holds: errors, not aborts.
  std::unique_ptr<Region> reg;
  r.code(Region::create(kHost, size_t(1) << 50, 1, &reg), Code::kOutOfMemory, "huge.past_address_space_is_oom");
  r.code(Region::create(kHost, SIZE_MAX - 5, 1, &reg), Code::kInvalidArgument, "huge.size_max_overflows");
  r.code(Region::create(kHost, 1 << 20, SIZE_MAX - 5, &reg), Code::kInvalidArgument, "huge.chunk_overflows");
  std::shared_ptr<SeqMajorCache> cache;
  r.code(SeqMajorCache::create(kHost, CacheShape{4, 8, 128, 4}, CacheConfig{(int64_t(1) << 62) + 1, 1}, &cache),
         Code::kInvalidArgument, "huge.capacity_times_token_overflows");
  r.code(SeqMajorCache::create(kHost, CacheShape{int64_t(1) << 40, int64_t(1) << 20, 1 << 10, 4},
                               CacheConfig{1, 1}, &cache),
         Code::kInvalidArgument, "huge.token_size_overflows");
}

// Every host allocation inside a core call may fail: the call returns kOutOfMemory and leaves
// everything as it was, or succeeds. Fails the 0th, 1st, ... allocation until the call gets through.
void test_allocation_failures(Report& r) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const CacheShape shape{1, 2, 256, 4};  // 2 KiB a token: 2 tokens a page
  int failures_seen = 0;
  bool all_clean = true;
  std::string why;
  auto note = [&](bool clean, const std::string& what) {
    if (!clean && all_clean) why = what;
    all_clean = all_clean && clean;
  };
  // SeqMajorCache::create
  for (long n = 0; n < 100; ++n) {
    std::shared_ptr<SeqMajorCache> cache;
    const MemoryStats before = memory_stats(kHost);
    g_fail_after = n;
    const Status s = SeqMajorCache::create(kHost, shape, CacheConfig{1 << 20, page}, &cache);
    g_fail_after = -1;
    if (s.ok()) break;
    ++failures_seen;
    const MemoryStats after = memory_stats(kHost);
    note(s.code() == Code::kOutOfMemory && !cache && after.live_regions == before.live_regions &&
             after.reserved_bytes == before.reserved_bytes,
         "create, allocation " + std::to_string(n) + ": " + s.to_string());
  }
  std::shared_ptr<SeqMajorCache> cache;
  if (!r.ok(SeqMajorCache::create(kHost, shape, CacheConfig{1 << 20, page}, &cache), "alloc_fail.create")) return;
  if (!r.ok(cache->begin_append(0, 3), "alloc_fail.prefill")) return;
  // begin_append that maps new chunks (and a view length not seen before)
  for (int64_t pos = 3, step = 0; step < 6; ++step) {
    const int64_t count = 1 + step * 5;  // 1..26 tokens: 1..13 new chunks
    for (long n = 0; n < 200; ++n) {
      const size_t mapped = cache->mapped_bytes();
      const int64_t views = cache->live_views(), longest = cache->longest_view();
      g_fail_after = n;
      const Status s = cache->begin_append(pos, count);
      g_fail_after = -1;
      if (s.ok()) break;
      ++failures_seen;
      note(s.code() == Code::kOutOfMemory && cache->mapped_bytes() == mapped && cache->live_views() == views &&
               cache->longest_view() == longest,
           "begin_append(" + std::to_string(pos) + ", " + std::to_string(count) + "), allocation " +
               std::to_string(n) + ": " + s.to_string());
    }
    cache->remove_view(pos);
    pos += count;
  }
  // add_view of a new length
  for (long n = 0; n < 100; ++n) {
    const int64_t views = cache->live_views();
    g_fail_after = n;
    const Status s = cache->add_view(2);
    g_fail_after = -1;
    if (s.ok()) break;
    ++failures_seen;
    note(s.code() == Code::kOutOfMemory && cache->live_views() == views, "add_view: " + s.to_string());
  }
  cache->remove_view(2);
  cache->remove_view(cache->longest_view());
  r.eq(cache->mapped_bytes(), 0, "alloc_fail.all_released");
  std::printf("info %d injected allocation failures, each an error\n", failures_seen);
  r.check(failures_seen >= 10, "alloc_fail.failures_were_injected", std::to_string(failures_seen));
  r.check(all_clean, "alloc_fail.each_is_oom_and_changes_nothing", why);
}

}  // namespace

int main() {
  Report r;
  test_backend(r);
  test_region(r);
  test_mapped_limit(r);
  test_cache(r);
  test_cpu_kernel(r);
  test_huge_reservations(r);
  test_allocation_failures(r);
  const MemoryStats s = memory_stats(kHost);
  r.eq(s.mapped_bytes, 0, "end.mapped_bytes_zero");
  r.eq(s.reserved_bytes, 0, "end.reserved_bytes_zero");
  r.eq(s.live_regions, 0, "end.live_regions_zero");
  r.eq(s.live_vtensors, 0, "end.live_vtensors_zero");
  r.eq(s.map_calls, s.unmap_calls, "end.every_map_unmapped");
  return r.finish();
}

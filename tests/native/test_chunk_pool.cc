// Native test of the chunk pool (issue 30 point 1, chunk_pool.h) on the host backend, through a
// FailingBackend that counts creates and releases: a chunk unmapped and mapped again is not created
// again; the pool's bound trims; the mapped limit counts pooled bytes and trims the pool rather
// than refuse; a full device (kOutOfMemory from create) trims and retries once; fill creates ahead;
// a pooled chunk keeps its bytes. Expected counts are worked out by hand from the calls made.
#include <cstdio>
#include <memory>

#include "phys_chunks_checks.h"

using namespace pvt;
using phys_test::FailingBackend;
using pvt_test::Report;

namespace {

const Device kHost = Device::host();
constexpr size_t kChunk = 64 << 10;
constexpr int64_t kCb = kChunk;

int64_t pooled() { return memory_stats(kHost).pooled_bytes; }
int64_t mapped() { return memory_stats(kHost).mapped_bytes; }

std::unique_ptr<Region> region(Report& r, Backend* be, size_t chunk, const char* name) {
  std::unique_ptr<Region> out;
  r.ok(Region::create_on(be, 16 * chunk, chunk, &out), name);
  return out;
}

void test_reuse(Report& r, FailingBackend& be) {
  r.ok(set_pool_limit(kHost, 4 * kCb), "reuse.set_limit");
  auto a = region(r, &be, kChunk, "reuse.create");
  if (!a) return;
  const long c0 = be.creates, rel0 = be.releases;
  r.ok(a->map_range(0, 3 * kChunk), "reuse.map3");
  r.eq(be.creates - c0, 3, "reuse.first_map_creates");
  r.ok(a->unmap_range(0, 3 * kChunk), "reuse.unmap3");
  r.eq(be.releases - rel0, 0, "reuse.unmap_releases_nothing");
  r.eq(pooled(), 3 * kCb, "reuse.pooled_bytes");
  r.eq(mapped(), 0, "reuse.pooled_is_not_mapped");
  r.ok(a->map_range(4 * kChunk, 3 * kChunk), "reuse.map3_again");
  r.eq(be.creates - c0, 3, "reuse.second_map_creates_nothing");
  r.eq(pooled(), 0, "reuse.pool_emptied");
  r.eq(mapped(), 3 * kCb, "reuse.mapped_again");
  // A region of another chunk size has its own pool: nothing of size kChunk fits it.
  auto b = region(r, &be, 2 * kChunk, "reuse.create_other_size");
  r.ok(a->unmap_range(4 * kChunk, 3 * kChunk), "reuse.unmap_again");
  r.ok(b->map_range(0, 2 * kChunk), "reuse.map_other_size");
  r.eq(be.creates - c0, 4, "reuse.other_size_creates");
  r.ok(b->unmap_range(0, 2 * kChunk), "reuse.unmap_other_size");
  r.eq(pooled(), 3 * kCb, "reuse.bound_keeps_what_fits");  // 3 small + the big one would be 5 > 4
  r.eq(be.releases - rel0, 1, "reuse.over_bound_released");
  r.ok(pool_trim(kHost), "reuse.trim");
  r.eq(pooled(), 0, "reuse.trimmed");
  r.eq(be.releases - rel0, 4, "reuse.trim_released_every_chunk");
}

void test_bound(Report& r, FailingBackend& be) {
  r.ok(set_pool_limit(kHost, 2 * kCb), "bound.set_limit");
  auto a = region(r, &be, kChunk, "bound.create");
  if (!a) return;
  const long rel0 = be.releases;
  r.ok(a->map_range(0, 4 * kChunk), "bound.map4");
  r.ok(a->unmap_range(0, 4 * kChunk), "bound.unmap4");
  r.eq(pooled(), 2 * kCb, "bound.pool_holds_its_bound");
  r.eq(be.releases - rel0, 2, "bound.rest_released");
  r.ok(set_pool_limit(kHost, kCb), "bound.lower");
  r.eq(pooled(), kCb, "bound.lowering_trims");
  r.eq(be.releases - rel0, 3, "bound.lowering_released");
  r.code(set_pool_limit(kHost, -1), Code::kInvalidArgument, "bound.negative_refused");
  r.eq(pool_limit(kHost), kCb, "bound.refusal_changes_nothing");
  r.ok(set_pool_limit(kHost, 0), "bound.zero");
  r.eq(pooled(), 0, "bound.zero_empties");
}

void test_mapped_limit(Report& r, FailingBackend& be) {
  r.ok(set_pool_limit(kHost, 8 * kCb), "limit.pool");
  auto a = region(r, &be, kChunk, "limit.create_a");
  auto b = region(r, &be, 2 * kChunk, "limit.create_b");
  if (!a || !b) return;
  r.ok(a->map_range(0, 4 * kChunk), "limit.map4");
  r.ok(a->unmap_range(0, 4 * kChunk), "limit.unmap4");
  set_mapped_limit(kHost, 4 * kCb);
  // From the pool: the physical memory held does not change, the limit is not in the way.
  const long c0 = be.creates, rel0 = be.releases;
  r.ok(a->map_range(0, kChunk), "limit.map_from_pool");
  r.eq(be.creates - c0, 0, "limit.from_pool_no_create");
  // 1 mapped + 3 pooled + 2 new = 6 > 4: the pool is trimmed instead of refusing.
  r.ok(b->map_range(0, 2 * kChunk), "limit.create_trims_pool");
  r.eq(pooled(), 0, "limit.pool_trimmed");
  r.eq(be.releases - rel0, 3, "limit.trim_released");
  r.eq(mapped(), 3 * kCb, "limit.mapped");
  // Without pooled bytes to give back, the limit refuses as before.
  r.code(b->map_range(2 * kChunk, 2 * kChunk), Code::kOutOfMemory, "limit.still_refuses");
  // fill stops at the limit: 3 mapped, room for 1 more.
  int64_t created = 0;
  r.ok(pool_fill(&be, kChunk, 8 * kCb, &created), "limit.fill");
  r.eq(created, 1, "limit.fill_stops_at_limit");
  r.eq(pooled(), kCb, "limit.fill_pooled");
  set_mapped_limit(kHost, 0);
  r.ok(a->unmap_range(0, kChunk), "limit.unmap_a");
  r.ok(b->unmap_range(0, 2 * kChunk), "limit.unmap_b");
  r.ok(set_pool_limit(kHost, 0), "limit.pool_off");
}

void test_oom_retry(Report& r, FailingBackend& be) {
  r.ok(set_pool_limit(kHost, 8 * kCb), "oom.pool");
  auto a = region(r, &be, kChunk, "oom.create_a");
  auto b = region(r, &be, 2 * kChunk, "oom.create_b");
  if (!a || !b) return;
  r.ok(a->map_range(0, 2 * kChunk), "oom.map2");
  r.ok(a->unmap_range(0, 2 * kChunk), "oom.unmap2");
  be.oom_create_after = 0;  // the next create finds the device full
  r.ok(b->map_range(0, 2 * kChunk), "oom.retried_after_trim");
  r.eq(pooled(), 0, "oom.pool_trimmed");
  r.ok(b->unmap_range(0, 2 * kChunk), "oom.unmap_b");
  r.ok(pool_trim(kHost), "oom.trim");
  be.oom_create_after = 0;  // nothing pooled: the failure is the caller's
  r.code(a->map_range(0, kChunk), Code::kOutOfMemory, "oom.no_pool_fails");
  r.eq(mapped(), 0, "oom.failure_maps_nothing");
  r.ok(set_pool_limit(kHost, 0), "oom.pool_off");
}

void test_fill_and_contents(Report& r, FailingBackend& be) {
  int64_t created = 0;
  r.ok(pool_fill(&be, kChunk, 2 * kCb, &created), "fill.no_pool");
  r.eq(created, 0, "fill.bound_zero_creates_nothing");
  r.ok(set_pool_limit(kHost, 3 * kCb), "fill.pool");
  r.code(pool_fill(&be, kChunk + 1, kCb, &created), Code::kInvalidArgument, "fill.bad_chunk_refused");
  r.ok(pool_fill(&be, kChunk, 8 * kCb, &created), "fill.to_bound");
  r.eq(created, 3, "fill.created_to_bound");
  auto a = region(r, &be, kChunk, "fill.create");
  if (!a) return;
  const long c0 = be.creates;
  r.ok(a->map_range(0, 3 * kChunk), "fill.map3");
  r.eq(be.creates - c0, 0, "fill.map_creates_nothing");
  // A pooled chunk keeps its bytes (chunk_pool.h): write, unmap, map elsewhere, read them back.
  const auto bytes = phys_test::pattern(kChunk, 7);
  for (size_t c = 0; c < 3; ++c) phys_test::HostMem::write(a->base() + c * kChunk, bytes);
  r.ok(a->unmap_range(0, 3 * kChunk), "fill.unmap3");
  r.ok(a->map_range(8 * kChunk, kChunk), "fill.map_one");
  std::string why;
  r.check(phys_test::holds<phys_test::HostMem>(a->base() + 8 * kChunk, bytes, &why),
          "fill.pooled_chunk_keeps_its_bytes", why);
  r.ok(a->unmap_range(8 * kChunk, kChunk), "fill.unmap_one");
  r.ok(set_pool_limit(kHost, 0), "fill.pool_off");
}

}  // namespace

int main() {
  Report r;
  Backend* host = nullptr;
  if (!r.ok(get_backend(kHost, &host), "get_backend")) return r.finish();
  {
    FailingBackend be(host);
    test_reuse(r, be);
    test_bound(r, be);
    test_mapped_limit(r, be);
    test_oom_retry(r, be);
    test_fill_and_contents(r, be);
    r.ok(pool_trim(kHost), "end.trim");  // before the backend goes (chunk_pool.h)
    r.eq(be.creates, be.releases, "end.every_created_chunk_released");
  }
  phys_test::check_end(r, kHost);
  return r.finish();
}

// Native test of releases that never block the host (issue 30 point 3): a backend whose events
// complete only when the test says so (or when someone blocks on them, which the test counts) shows
// that unmap_range / SlotCache::release return without waiting and without unmapping, the chunks
// count as unmapped in the bookkeeping at once, collect() unmaps them once their events are done,
// a map over a pending chunk waits for that chunk only, and destruction retires everything.
// Also times release on the host (no events: nothing deferred) and with events pending.
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "phys_chunks_checks.h"

using namespace pvt;
using pvt_test::Report;

namespace {

const Device kHost = Device::host();
constexpr size_t kChunk = 64 << 10;
constexpr int64_t kCb = kChunk;

// The host backend with CUDA-like events: record_event makes (or re-arms) an event that is not
// done until finish(stream) or a wait_event on it (a wait is what a release must not do: counted).
class EventBackend final : public Backend {
 public:
  explicit EventBackend(Backend* real) : real_(real) {}
  Device device() const override { return real_->device(); }
  size_t granularity() const override { return real_->granularity(); }
  Status reserve(size_t bytes, void** base) override { return real_->reserve(bytes, base); }
  Status free_reservation(void* base, size_t bytes) override { return real_->free_reservation(base, bytes); }
  Status create_chunk(size_t bytes, PhysHandle* h) override { return real_->create_chunk(bytes, h); }
  Status map_chunk(void* addr, size_t bytes, PhysHandle h) override {
    ++maps;
    return real_->map_chunk(addr, bytes, h);
  }
  Status unmap_chunk(void* addr, size_t bytes) override {
    ++unmaps;
    return real_->unmap_chunk(addr, bytes);
  }
  Status release_chunk(PhysHandle h, size_t bytes) override { return real_->release_chunk(h, bytes); }
  Status copy(void* dst, const void* src, size_t bytes, void* stream) override {
    return real_->copy(dst, src, bytes, stream);
  }
  Status record_event(void* stream, EventHandle* e) override {
    if (*e == 0) *e = ++next_;
    done_[*e] = false;
    stream_of_[*e] = stream;
    return Status::Ok();
  }
  Status wait_event(EventHandle e) override {
    if (!done_[e]) ++waits;
    done_[e] = true;
    return Status::Ok();
  }
  Status event_done(EventHandle e, bool* done) override {
    *done = done_[e];
    return Status::Ok();
  }
  void destroy_event(EventHandle e) override { done_.erase(e); }
  // The work queued on `stream` has finished.
  void finish(void* stream) {
    for (auto& [e, s] : stream_of_) {
      if (s == stream) done_[e] = true;
    }
  }

  long maps = 0, unmaps = 0, waits = 0;

 private:
  Backend* real_;
  EventHandle next_ = 0;
  std::map<EventHandle, bool> done_;
  std::map<EventHandle, void*> stream_of_;
};

void* const kS1 = reinterpret_cast<void*>(0x1);
void* const kS2 = reinterpret_cast<void*>(0x2);

int64_t mapped() { return memory_stats(kHost).mapped_bytes; }

void test_region(Report& r, EventBackend& be) {
  std::unique_ptr<Region> region;
  if (!r.ok(Region::create_on(&be, 16 * kChunk, kChunk, &region), "region.create")) return;
  r.ok(region->map_range(0, 2 * kChunk), "region.map2");
  r.ok(region->record_use(kS1), "region.use_s1");
  const long u0 = be.unmaps;
  r.ok(region->unmap_range(0, 2 * kChunk), "region.release_returns");
  r.eq(be.waits, 0, "region.release_never_waits");
  r.eq(be.unmaps - u0, 0, "region.release_defers_the_unmap");
  r.check(!region->chunk_mapped(0) && !region->is_mapped(0, kChunk), "region.bookkeeping_unmapped_at_once");
  r.eq(region->pending_chunks(), 2, "region.two_pending");
  r.eq(mapped(), 2 * kCb, "region.pending_memory_still_counted");
  r.ok(region->collect(false), "region.collect_early");
  r.eq(region->pending_chunks(), 2, "region.collect_early_keeps_them");
  be.finish(kS1);
  r.ok(region->collect(false), "region.collect");
  r.eq(region->pending_chunks(), 0, "region.collect_retires");
  r.eq(be.unmaps - u0, 2, "region.collect_unmaps");
  r.eq(mapped(), 0, "region.collect_frees");
  r.eq(be.waits, 0, "region.collect_never_waits");

  // A map over a pending chunk waits for it; a map elsewhere does not.
  r.ok(region->map_range(0, 2 * kChunk), "remap.map2");
  r.ok(region->record_use(kS1), "remap.use");
  r.ok(region->unmap_range(0, kChunk), "remap.release_first");
  r.ok(region->unmap_range(kChunk, kChunk), "remap.release_second");
  r.eq(region->pending_chunks(), 2, "remap.pending");
  r.ok(region->map_range(8 * kChunk, kChunk), "remap.map_elsewhere");
  r.eq(be.waits, 0, "remap.map_elsewhere_never_waits");
  r.eq(region->pending_chunks(), 2, "remap.elsewhere_leaves_pending");
  r.ok(region->map_range(0, kChunk), "remap.map_over_pending");
  r.eq(be.waits, 1, "remap.map_over_pending_waits_once");
  r.check(region->chunk_mapped(0), "remap.mapped_again");
  // The second entry shares the event: it is done now and the map's collect retired it too.
  r.eq(region->pending_chunks(), 0, "remap.all_retired");
  r.ok(region->unmap_range(0, 16 * kChunk), "remap.unmap_all");
  be.finish(kS1);

  // Two streams: the unmap waits for both.
  r.ok(region->map_range(0, kChunk), "two.map");
  r.ok(region->record_use(kS1), "two.use_s1");
  r.ok(region->record_use(kS2), "two.use_s2");
  be.finish(kS1);
  r.ok(region->unmap_range(0, kChunk), "two.release");
  r.eq(region->pending_chunks(), 1, "two.pending_while_s2_runs");
  be.finish(kS2);
  r.ok(region->collect(false), "two.collect");
  r.eq(region->pending_chunks(), 0, "two.retired_after_both");

  // Destruction with pending entries waits for them and unmaps everything.
  r.ok(region->map_range(0, 3 * kChunk), "destroy.map");
  r.ok(region->record_use(kS1), "destroy.use");
  r.ok(region->unmap_range(0, 2 * kChunk), "destroy.release_some");
  r.eq(region->pending_chunks(), 2, "destroy.pending");
  const long w0 = be.waits;
  region.reset();
  r.check(be.waits > w0, "destroy.waited", "the destructor did not wait for the pending events");
  r.eq(mapped(), 0, "destroy.nothing_mapped");
  r.eq(be.maps, be.unmaps, "destroy.every_map_unmapped");
}

SlotCacheShape shape() {
  SlotCacheShape s;
  s.num_slots = 4;
  s.max_seq_len = 128;
  s.row_bytes = 1024;  // a slot: 128 KiB, two chunks
  s.align_slots = true;
  return s;
}

void test_slots(Report& r, EventBackend& be) {
  std::shared_ptr<SlotCache> cache;
  if (!r.ok(SlotCache::create_on(&be, shape(), kChunk, &cache), "slots.create")) return;
  r.ok(cache->reserve(0, 128, nullptr), "slots.reserve");
  r.ok(cache->record_use(kS1), "slots.use");
  const long w0 = be.waits, u0 = be.unmaps;
  r.ok(cache->release(0, kS2), "slots.release_returns");
  r.eq(be.waits - w0, 0, "slots.release_never_waits");
  r.eq(be.unmaps - u0, 0, "slots.release_defers");
  r.eq(cache->mapped_tokens(0), 0, "slots.mapped_tokens_zero_at_once");
  r.eq(cache->pending_chunks(), 2, "slots.pending");
  // The same slot again: waits for its own pending chunks (the only wait), then maps.
  r.ok(cache->reserve(0, 64, nullptr), "slots.rereserve");
  r.check(be.waits - w0 >= 1, "slots.rereserve_waited");
  r.eq(cache->mapped_tokens(0), 64, "slots.rereserved");
  r.eq(cache->pending_chunks(), 0, "slots.rereserve_retired");
  r.eq(mapped(), kCb, "slots.one_chunk_mapped");
  r.ok(cache->reserve(1, 128, nullptr), "slots.reserve_other");
  r.ok(cache->record_use(kS1), "slots.use_again");
  r.ok(cache->release(1, nullptr), "slots.release_other");
  r.eq(cache->pending_chunks(), 2, "slots.pending_again");
  size_t pending = 0;
  r.ok(SlotCache::collect_all(kHost, false, &pending), "slots.collect_all_early");
  r.eq(pending, 2, "slots.collect_all_counts_pending");
  be.finish(kS1);
  r.ok(SlotCache::collect_all(kHost, false, &pending), "slots.collect_all_one_stream_done");
  r.eq(pending, 2, "slots.release_stream_still_runs");  // release(1, nullptr) recorded that stream too
  be.finish(nullptr);
  r.ok(SlotCache::collect_all(kHost, false, &pending), "slots.collect_all");
  r.eq(pending, 0, "slots.collect_all_retires");
  r.eq(mapped(), kCb, "slots.collect_all_frees");
  r.ok(cache->reserve(2, 128, nullptr), "slots.reserve_third");
  r.ok(cache->record_use(kS1), "slots.use_third");
  r.ok(cache->release(2, nullptr), "slots.release_third");
  r.eq(cache->pending_chunks(), 2, "slots.pending_at_destroy");
  cache.reset();
  r.eq(mapped(), 0, "slots.destroy_retires");
  r.eq(be.maps, be.unmaps, "slots.every_map_unmapped");
}

// µs per release of a two-chunk slot: reserve untimed, release timed.
double release_us(Report& r, Backend* be, bool events_pending, int rounds) {
  std::shared_ptr<SlotCache> cache;
  if (!r.ok(SlotCache::create_on(be, shape(), kChunk, &cache), "time.create")) return 0;
  double total = 0;
  for (int i = 0; i < rounds; ++i) {
    (void)cache->reserve(i % 4, 128, nullptr);
    if (events_pending) (void)cache->record_use(kS1);
    const auto t0 = std::chrono::steady_clock::now();
    (void)cache->release(i % 4, nullptr);
    total += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (events_pending) static_cast<EventBackend*>(be)->finish(kS1);
  }
  return total / rounds;
}

}  // namespace

int main() {
  Report r;
  Backend* host = nullptr;
  if (!r.ok(get_backend(kHost, &host), "get_backend")) return r.finish();
  {
    EventBackend be(host);
    test_region(r, be);
    test_slots(r, be);
    std::printf("info release_slot (2 chunks of 64 KiB), host: %.2f us; events pending (deferred): %.2f us\n",
                release_us(r, host, false, 2000), release_us(r, &be, true, 2000));
  }
  phys_test::check_end(r, kHost);
  return r.finish();
}

// Shared by the native tests of physical chunks and aliasing (host: test_phys_chunks.cc, CUDA:
// test_phys_chunks.cu). Each check writes a known pattern through one address and reads it back
// through another; `Mem` moves bytes between the host and the device memory under test:
//   static bool write(void* dst, const std::vector<uint8_t>& bytes);
//   static bool read(const void* src, size_t n, std::vector<uint8_t>* out);
// Expected contents are kept in host vectors (the reference), never read back from the region.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/apis.h"
#include "harness.h"

namespace phys_test {

using pvt::Backend;
using pvt::Code;
using pvt::MemoryStats;
using pvt::Region;
using pvt::Status;
using pvt_test::Report;

// Mem for host memory (test_phys_chunks.cc, test_slot_share.cc).
struct HostMem {
  static bool write(void* dst, const std::vector<uint8_t>& bytes) {
    std::memcpy(dst, bytes.data(), bytes.size());
    return true;
  }
  static bool read(const void* src, size_t n, std::vector<uint8_t>* out) {
    out->assign(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + n);
    return true;
  }
};

// `n` bytes of a pattern that differs with `seed` and along the range (no two chunks alike).
inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// Does [p, p+want.size()) hold `want`? Fills `why` with the first difference.
template <typename Mem>
bool holds(const void* p, const std::vector<uint8_t>& want, std::string* why) {
  std::vector<uint8_t> got;
  if (!Mem::read(p, want.size(), &got)) {
    *why = "reading the memory failed";
    return false;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      *why = "first difference at byte " + std::to_string(i) + " of " + std::to_string(want.size());
      return false;
    }
  }
  return true;
}

// What a failed call must leave alone: which chunks of a region are mapped (and to which physical
// chunk), and the device's counters.
struct Snapshot {
  std::vector<std::pair<size_t, const pvt::PhysChunk*>> chunks;
  std::vector<int> mappings;
  int64_t mapped = 0, shared = 0, maps = 0, unmaps = 0;

  Snapshot(const Region& a, const Region& b) {
    for (const Region* r : {&a, &b}) {
      for (size_t c = 0; c < r->num_chunks(); ++c) {
        const pvt::PhysChunk* p = r->phys_chunk(c);
        chunks.emplace_back(c, p);
        mappings.push_back(p ? p->mappings.load() : 0);
      }
    }
    const MemoryStats s = pvt::memory_stats(a.device());
    mapped = s.mapped_bytes;
    shared = s.shared_bytes;
    maps = s.map_calls;
    unmaps = s.unmap_calls;
  }
  bool operator==(const Snapshot& o) const {
    return chunks == o.chunks && mappings == o.mappings && mapped == o.mapped && shared == o.shared &&
           maps - unmaps == o.maps - o.unmaps;
  }
};

// A backend that forwards to `real` and fails on purpose: the map_chunk (create_chunk) that takes
// fail_map_after (fail_create_after, fail_copy_after) from 0 to -1 returns kDriver, as a driver failure would;
// the create_chunk that takes oom_create_after from 0 to -1 returns kOutOfMemory, as a full GPU would.
class FailingBackend final : public Backend {
 public:
  explicit FailingBackend(Backend* real) : real_(real) {}
  pvt::Device device() const override { return real_->device(); }
  size_t granularity() const override { return real_->granularity(); }
  Status reserve(size_t bytes, void** base) override { return real_->reserve(bytes, base); }
  Status free_reservation(void* base, size_t bytes) override { return real_->free_reservation(base, bytes); }
  Status create_chunk(size_t bytes, pvt::PhysHandle* h) override {
    if (fail_create_after >= 0 && fail_create_after-- == 0) return Status(Code::kDriver, "injected create failure");
    if (oom_create_after >= 0 && oom_create_after-- == 0) return Status(Code::kOutOfMemory, "injected full device");
    ++creates;
    return real_->create_chunk(bytes, h);
  }
  Status map_chunk(void* addr, size_t bytes, pvt::PhysHandle h) override {
    if (fail_map_after >= 0 && fail_map_after-- == 0) return Status(Code::kDriver, "injected map failure");
    ++maps;
    return real_->map_chunk(addr, bytes, h);
  }
  Status unmap_chunk(void* addr, size_t bytes) override {
    ++unmaps;
    return real_->unmap_chunk(addr, bytes);
  }
  Status release_chunk(pvt::PhysHandle h, size_t bytes) override {
    ++releases;
    return real_->release_chunk(h, bytes);
  }
  Status copy(void* dst, const void* src, size_t bytes, void* stream) override {
    if (fail_copy_after >= 0 && fail_copy_after-- == 0) return Status(Code::kDriver, "injected copy failure");
    return real_->copy(dst, src, bytes, stream);
  }
  Status record_event(void* stream, pvt::EventHandle* e) override { return real_->record_event(stream, e); }
  Status wait_event(pvt::EventHandle e) override { return real_->wait_event(e); }
  Status event_done(pvt::EventHandle e, bool* done) override { return real_->event_done(e, done); }
  void destroy_event(pvt::EventHandle e) override { real_->destroy_event(e); }

  long fail_map_after = -1, fail_create_after = -1, fail_copy_after = -1, oom_create_after = -1;
  long creates = 0, maps = 0, unmaps = 0, releases = 0;

 private:
  Backend* real_;
};

// Aliasing at the backend level: one handle mapped at two addresses of one reservation.
template <typename Mem>
void check_backend_alias(Report& r, Backend* be, size_t cb) {
  void* base = nullptr;
  if (!r.ok(be->reserve(4 * cb, &base), "backend_alias.reserve")) return;
  char* a = static_cast<char*>(base);
  char* b = a + 2 * cb;
  pvt::PhysHandle h = 0;
  std::string why;
  if (r.ok(be->create_chunk(cb, &h), "backend_alias.create") && r.ok(be->map_chunk(a, cb, h), "backend_alias.map_a") &&
      r.ok(be->map_chunk(b, cb, h), "backend_alias.map_b")) {
    const auto p1 = pattern(cb, 1), p2 = pattern(cb, 2);
    r.check(Mem::write(a, p1) && holds<Mem>(b, p1, &why), "backend_alias.write_a_read_b", why);
    r.check(Mem::write(b, p2) && holds<Mem>(a, p2, &why), "backend_alias.write_b_read_a", why);
    r.ok(be->unmap_chunk(a, cb), "backend_alias.unmap_a");
    r.check(holds<Mem>(b, p2, &why), "backend_alias.b_reads_after_a_unmapped", why);
    // The unmapped place is reserved again: another chunk maps there, apart from the first.
    pvt::PhysHandle fresh = 0;
    if (r.ok(be->create_chunk(cb, &fresh), "backend_alias.create_fresh") &&
        r.ok(be->map_chunk(a, cb, fresh), "backend_alias.remap_a_fresh")) {
      const auto p3 = pattern(cb, 3);
      r.check(Mem::write(a, p3) && holds<Mem>(b, p2, &why) && holds<Mem>(a, p3, &why),
              "backend_alias.new_chunk_apart_from_alias", why);
      r.ok(be->unmap_chunk(a, cb), "backend_alias.unmap_fresh");
      r.ok(be->release_chunk(fresh, cb), "backend_alias.release_fresh");
    }
    r.ok(be->unmap_chunk(b, cb), "backend_alias.unmap_b");
    r.ok(be->release_chunk(h, cb), "backend_alias.release");
  }
  r.ok(be->free_reservation(base, 4 * cb), "backend_alias.free_reservation");
}

// Two regions: B maps A's chunks 1..2; writes through either are seen through the other; unmapping
// A leaves B's data; the physical chunks are counted once and released with the last mapping.
template <typename Mem>
void check_region_alias(Report& r, pvt::Device dev, size_t cb) {
  const MemoryStats s0 = pvt::memory_stats(dev);
  std::unique_ptr<Region> a, b;
  if (!r.ok(Region::create(dev, 4 * cb, cb, &a), "alias.create_a") ||
      !r.ok(Region::create(dev, 6 * cb, cb, &b), "alias.create_b") || !r.ok(a->map_range(0, 3 * cb), "alias.map_a"))
    return;
  const auto pa = pattern(3 * cb, 10);
  if (!r.check(Mem::write(a->base(), pa), "alias.write_a")) return;
  if (!r.ok(b->alias_range(*a, cb, 3 * cb, 2 * cb), "alias.alias_a1_into_b3")) return;
  MemoryStats s = pvt::memory_stats(dev);
  r.eq(s.mapped_bytes - s0.mapped_bytes, 3 * cb, "alias.mapped_bytes_counts_physical_once");
  r.eq(s.shared_bytes - s0.shared_bytes, 2 * cb, "alias.shared_bytes_counts_the_alias");
  r.eq(s.map_calls - s0.map_calls, 5, "alias.map_calls_count_mappings");
  r.eq(b->mapped_bytes(), 2 * cb, "alias.region_mapped_bytes_counts_its_mappings");
  r.check(b->phys_chunk(3) == a->phys_chunk(1) && b->phys_chunk(4) == a->phys_chunk(2) &&
              a->phys_chunk(1)->mappings == 2 && a->phys_chunk(0)->mappings == 1,
          "alias.same_physical_chunks");
  std::string why;
  const std::vector<uint8_t> a_tail(pa.begin() + cb, pa.end());
  r.check(holds<Mem>(b->base() + 3 * cb, a_tail, &why), "alias.b_reads_what_a_wrote", why);
  const auto pb = pattern(cb, 11);
  r.check(Mem::write(b->base() + 4 * cb, pb) && holds<Mem>(a->base() + 2 * cb, pb, &why),
          "alias.a_reads_what_b_wrote", why);
  const std::vector<uint8_t> want_b3(pa.begin() + cb, pa.begin() + 2 * cb);

  // Unmap all of A: its unshared chunk 0 goes, the shared ones stay for B.
  r.ok(a->unmap_range(0, 4 * cb), "alias.unmap_a");
  s = pvt::memory_stats(dev);
  r.eq(s.mapped_bytes - s0.mapped_bytes, 2 * cb, "alias.unmap_a_keeps_shared_physical");
  r.eq(s.shared_bytes - s0.shared_bytes, 0, "alias.unmap_a_no_longer_shared");
  r.check(b->phys_chunk(3)->mappings == 1, "alias.refcount_dropped");
  r.check(holds<Mem>(b->base() + 3 * cb, want_b3, &why) && holds<Mem>(b->base() + 4 * cb, pb, &why),
          "alias.b_reads_after_a_unmapped", why);
  // A maps fresh memory where it was: B's chunks are not handed out again while B maps them.
  if (r.ok(a->map_range(0, 3 * cb), "alias.a_maps_again")) {
    r.check(a->phys_chunk(1) != b->phys_chunk(3) && a->phys_chunk(2) != b->phys_chunk(4), "alias.a_gets_new_chunks");
    r.check(Mem::write(a->base(), pattern(3 * cb, 12)) && holds<Mem>(b->base() + 3 * cb, want_b3, &why) &&
                holds<Mem>(b->base() + 4 * cb, pb, &why),
            "alias.b_untouched_by_new_a", why);
  }
  b.reset();
  a.reset();
  s = pvt::memory_stats(dev);
  r.eq(s.mapped_bytes, s0.mapped_bytes, "alias.all_released");
  r.eq(s.shared_bytes, s0.shared_bytes, "alias.no_shared_left");
}

// Release order: A -> B -> C, each aliasing the previous; destroying them in any order keeps the
// data until the last mapping goes, and the memory is counted once throughout.
template <typename Mem>
void check_release_order(Report& r, pvt::Device dev, size_t cb) {
  const int orders[3][3] = {{0, 1, 2}, {1, 0, 2}, {2, 1, 0}};
  for (const auto& order : orders) {
    const std::string name = "release_order." + std::to_string(order[0]) + std::to_string(order[1]) +
                             std::to_string(order[2]);
    const MemoryStats s0 = pvt::memory_stats(dev);
    std::unique_ptr<Region> reg[3];
    bool ok = true;
    for (auto& g : reg) ok = ok && Region::create(dev, 2 * cb, cb, &g).ok();
    ok = ok && reg[0]->map_range(0, 2 * cb).ok();
    const auto p = pattern(2 * cb, 20 + order[0]);
    ok = ok && Mem::write(reg[0]->base(), p) && reg[1]->alias_range(*reg[0], 0, 0, 2 * cb).ok() &&
         reg[2]->alias_range(*reg[1], 0, 0, 2 * cb).ok();
    if (!r.check(ok, name + "_setup")) continue;
    MemoryStats s = pvt::memory_stats(dev);
    bool counted = s.mapped_bytes - s0.mapped_bytes == int64_t(2 * cb) && s.shared_bytes - s0.shared_bytes == int64_t(4 * cb);
    bool readable = true;
    std::string why;
    for (int k = 0; k < 2; ++k) {
      reg[order[k]].reset();
      for (const auto& g : reg) readable = readable && (!g || holds<Mem>(g->base(), p, &why));
      s = pvt::memory_stats(dev);
      counted = counted && s.mapped_bytes - s0.mapped_bytes == int64_t(2 * cb) &&
                s.shared_bytes - s0.shared_bytes == int64_t((1 - k) * 2 * cb);
    }
    r.check(readable, name + "_survivors_read_the_data", why);
    r.check(counted, name + "_counted_once_until_last", "mapped " + std::to_string(s.mapped_bytes - s0.mapped_bytes) +
                                                            ", shared " + std::to_string(s.shared_bytes - s0.shared_bytes));
    reg[order[2]].reset();
    s = pvt::memory_stats(dev);
    r.check(s.mapped_bytes == s0.mapped_bytes && s.shared_bytes == s0.shared_bytes, name + "_last_releases");
  }
}

// Two ranges of one reservation: [4c, 6c) sees [0, 2c).
template <typename Mem>
void check_same_region(Report& r, pvt::Device dev, size_t cb) {
  const MemoryStats s0 = pvt::memory_stats(dev);
  std::unique_ptr<Region> g;
  if (!r.ok(Region::create(dev, 8 * cb, cb, &g), "same_region.create") || !r.ok(g->map_range(0, 2 * cb), "same_region.map"))
    return;
  if (!r.ok(g->alias_range(*g, 0, 4 * cb, 2 * cb), "same_region.alias")) return;
  std::string why;
  const auto p = pattern(2 * cb, 30);
  r.check(Mem::write(g->base() + 4 * cb, p) && holds<Mem>(g->base(), p, &why), "same_region.write_high_read_low", why);
  r.eq(pvt::memory_stats(dev).mapped_bytes - s0.mapped_bytes, 2 * cb, "same_region.physical_once");
  r.eq(pvt::memory_stats(dev).shared_bytes - s0.shared_bytes, 2 * cb, "same_region.shared");
  r.check(g->is_mapped(0, 2 * cb) && !g->is_mapped(2 * cb, cb) && g->is_mapped(4 * cb, 2 * cb), "same_region.is_mapped");
  r.ok(g->unmap_range(0, 2 * cb), "same_region.unmap_low");
  r.check(holds<Mem>(g->base() + 4 * cb, p, &why), "same_region.high_reads_after_low_unmapped", why);
  r.eq(pvt::memory_stats(dev).shared_bytes - s0.shared_bytes, 0, "same_region.unshared");
  g.reset();
  r.eq(pvt::memory_stats(dev).mapped_bytes, s0.mapped_bytes, "same_region.released");
}

// Every malformed request fails with its code and changes nothing.
template <typename Mem>
void check_refusals(Report& r, pvt::Device dev, Backend* real, size_t cb) {
  std::unique_ptr<Region> a, b, wide, other;
  FailingBackend wrapper(real);  // same device, another backend object
  if (!r.ok(Region::create(dev, 4 * cb, cb, &a), "refuse.create_a") || !r.ok(Region::create(dev, 4 * cb, cb, &b), "refuse.create_b") ||
      !r.ok(Region::create(dev, 4 * cb, 2 * cb, &wide), "refuse.create_wide") ||
      !r.ok(Region::create_on(&wrapper, 4 * cb, cb, &other), "refuse.create_other_backend"))
    return;
  if (!r.ok(a->map_range(0, 2 * cb), "refuse.map_a") || !r.ok(b->map_range(3 * cb, cb), "refuse.map_b3") ||
      !r.ok(wide->map_range(0, 4 * cb), "refuse.map_wide") || !r.ok(other->map_range(0, 2 * cb), "refuse.map_other"))
    return;
  const Snapshot before(*a, *b);
  struct Case { const char* name; Region* dst; const Region* src; size_t so, dof, n; Code code; };
  const Case cases[] = {
      {"unaligned_src_offset", b.get(), a.get(), 1, 0, cb, Code::kInvalidArgument},
      {"unaligned_dst_offset", b.get(), a.get(), 0, cb / 2, cb, Code::kInvalidArgument},
      {"unaligned_size", b.get(), a.get(), 0, 0, cb + 4096, Code::kInvalidArgument},
      {"src_partly_unmapped", b.get(), a.get(), cb, 0, 2 * cb, Code::kInvalidArgument},
      {"src_unmapped", b.get(), a.get(), 3 * cb, 0, cb, Code::kInvalidArgument},
      {"dst_partly_mapped", b.get(), a.get(), 0, 2 * cb, 2 * cb, Code::kInvalidArgument},
      {"overlap_in_one_region", a.get(), a.get(), 0, cb, 2 * cb, Code::kInvalidArgument},
      {"onto_itself", a.get(), a.get(), 0, 0, cb, Code::kInvalidArgument},
      {"different_chunk_size", b.get(), wide.get(), 0, 0, 2 * cb, Code::kInvalidArgument},
      {"chunk_size_other_way", wide.get(), a.get(), 0, 0, 2 * cb, Code::kInvalidArgument},
      {"different_backend", b.get(), other.get(), 0, 0, cb, Code::kInvalidArgument},
      {"different_backend_other_way", other.get(), a.get(), 0, 2 * cb, cb, Code::kInvalidArgument},
      {"src_past_reservation", b.get(), a.get(), 3 * cb, 0, 2 * cb, Code::kOutOfRange},
      {"dst_past_reservation", b.get(), a.get(), 0, 3 * cb, 2 * cb, Code::kOutOfRange},
  };
  for (const Case& k : cases) {
    const std::string name = std::string("refuse.") + k.name;
    const Snapshot others(*wide, *other);
    r.code(k.dst->alias_range(*k.src, k.so, k.dof, k.n), k.code, name);
    r.check(Snapshot(*a, *b) == before && Snapshot(*wide, *other) == others, name + "_changes_nothing");
  }
  r.ok(b->alias_range(*a, 0, 0, 0), "refuse.empty_range_is_a_no_op");
  r.check(Snapshot(*a, *b) == before, "refuse.empty_range_changes_nothing");
}

// Injected failures of the backend in the middle of an alias (and of a map_range): the call fails
// with the injected error and both regions are exactly as before, contents included.
template <typename Mem>
void check_injected_failures(Report& r, Backend* real, size_t cb) {
  FailingBackend be(real);
  std::unique_ptr<Region> a, b;
  if (!r.ok(Region::create_on(&be, 6 * cb, cb, &a), "inject.create_a") ||
      !r.ok(Region::create_on(&be, 6 * cb, cb, &b), "inject.create_b") || !r.ok(a->map_range(0, 4 * cb), "inject.map_a") ||
      !r.ok(b->map_range(5 * cb, cb), "inject.map_b5"))
    return;
  const auto pa = pattern(4 * cb, 40), pb = pattern(cb, 41);
  if (!r.check(Mem::write(a->base(), pa) && Mem::write(b->base() + 5 * cb, pb), "inject.write")) return;
  std::string why;
  bool all_clean = true;
  int failures = 0;
  for (long k = 0; k < 4; ++k) {
    const Snapshot before(*a, *b);
    const long unmaps = be.unmaps, releases = be.releases;
    be.fail_map_after = k;
    const Status s = b->alias_range(*a, 0, cb, 4 * cb);  // fails at the (k+1)-th chunk of four
    be.fail_map_after = -1;
    ++failures;
    const bool clean = s.code() == Code::kDriver && Snapshot(*a, *b) == before && be.unmaps - unmaps == k &&
                       be.releases == releases && holds<Mem>(a->base(), pa, &why) &&
                       holds<Mem>(b->base() + 5 * cb, pb, &why);
    if (!clean && all_clean) why = "failure at chunk " + std::to_string(k) + ": " + s.to_string() + " " + why;
    all_clean = all_clean && clean;
  }
  r.check(all_clean, "inject.alias_failure_changes_nothing", why);
  all_clean = true;
  // Map failures and create failures in the middle of a map_range.
  for (int create = 0; create < 2; ++create) {
    for (long k = 0; k < 3; ++k) {
      const Snapshot before(*a, *b);
      (create ? be.fail_create_after : be.fail_map_after) = k;
      const Status s = b->map_range(0, 3 * cb);
      be.fail_map_after = be.fail_create_after = -1;
      ++failures;
      const bool clean = s.code() == Code::kDriver && Snapshot(*a, *b) == before;
      if (!clean && all_clean) why = std::string(create ? "create" : "map") + " failure " + std::to_string(k) + ": " + s.to_string();
      all_clean = all_clean && clean;
    }
  }
  r.check(all_clean, "inject.map_range_failure_changes_nothing", why);
  r.eq(failures, 10, "inject.failures_were_injected");
  // And with no failure the same alias goes through and reads right.
  if (r.ok(b->alias_range(*a, 0, cb, 4 * cb), "inject.alias_after_failures"))
    r.check(holds<Mem>(b->base() + cb, pa, &why), "inject.alias_reads_after_failures", why);
}

// The mapped limit is on physical memory: at the limit an alias still maps, a new chunk does not.
template <typename Mem>
void check_limit(Report& r, pvt::Device dev, size_t cb) {
  std::unique_ptr<Region> a, b;
  if (!r.ok(Region::create(dev, 2 * cb, cb, &a), "limit.create_a") || !r.ok(Region::create(dev, 4 * cb, cb, &b), "limit.create_b") ||
      !r.ok(a->map_range(0, 2 * cb), "limit.map_a"))
    return;
  pvt::set_mapped_limit(dev, pvt::memory_stats(dev).mapped_bytes);
  r.ok(b->alias_range(*a, 0, 0, 2 * cb), "limit.alias_at_limit_costs_nothing");
  r.code(b->map_range(2 * cb, cb), Code::kOutOfMemory, "limit.new_chunk_at_limit_refused");
  pvt::set_mapped_limit(dev, 0);
}

// After every check: nothing mapped, shared or reserved any more, every mapping undone.
inline void check_end(Report& r, pvt::Device dev) {
  const MemoryStats s = pvt::memory_stats(dev);
  r.eq(s.mapped_bytes, 0, "end.mapped_bytes_zero");
  r.eq(s.shared_bytes, 0, "end.shared_bytes_zero");
  r.eq(s.pooled_bytes, 0, "end.pooled_bytes_zero");
  r.eq(s.live_regions, 0, "end.live_regions_zero");
  r.eq(s.map_calls, s.unmap_calls, "end.every_mapping_unmapped");
}

template <typename Mem>
void run_all(Report& r, pvt::Device dev, size_t cb) {
  Backend* be = nullptr;
  if (!r.ok(pvt::get_backend(dev, &be), "get_backend")) return;
  check_backend_alias<Mem>(r, be, cb);
  check_region_alias<Mem>(r, dev, cb);
  check_release_order<Mem>(r, dev, cb);
  check_same_region<Mem>(r, dev, cb);
  check_refusals<Mem>(r, dev, be, cb);
  check_injected_failures<Mem>(r, be, cb);
  check_limit<Mem>(r, dev, cb);
}

}  // namespace phys_test

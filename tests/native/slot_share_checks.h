// Shared by the native tests of prefix sharing between slots (host: test_slot_share.cc, CUDA:
// test_slot_share.cu): SlotCache::share_prefix / make_private / release on a cache with
// chunk-aligned slots. Every expected content is a host vector (the reference), kept apart from the
// cache; `Mem` moves bytes as in phys_chunks_checks.h. Rows are 192 bytes, so a chunk (a power of
// two) never holds a whole number of rows and a prefix always ends inside a chunk.
#pragma once

#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "phys_chunks_checks.h"

namespace share_test {

using phys_test::FailingBackend;
using phys_test::holds;
using phys_test::pattern;
using pvt::Backend;
using pvt::Code;
using pvt::SlotCache;
using pvt::SlotCacheShape;
using pvt_test::Report;

constexpr int64_t kRow = 192;

// A cache of 4 aligned slots of about 6 chunks each, and the host mirror of every slot's rows.
template <typename Mem>
struct Fixture {
  std::shared_ptr<SlotCache> cache;
  size_t cb = 0;
  int64_t max_rows = 0;
  std::vector<std::vector<uint8_t>> want;  // want[slot]: the slot's rows [0, max_rows) as they should read

  bool make(Report& r, Backend* be, size_t chunk, bool aligned, const std::string& name) {
    cb = chunk;
    max_rows = static_cast<int64_t>(6 * chunk) / kRow;
    SlotCacheShape shape{4, max_rows, kRow, aligned};
    if (!r.ok(SlotCache::create_on(be, shape, chunk, &cache), name + ".create")) return false;
    want.assign(4, std::vector<uint8_t>(static_cast<size_t>(max_rows * kRow), 0));
    return true;
  }
  char* row(int64_t slot, int64_t t) const {
    return cache->data() + (slot * cache->shape().slot_rows + t) * kRow;
  }
  // Writes rows [from, to) of `slot` with a pattern and records it in the mirror.
  bool fill(int64_t slot, int64_t from, int64_t to, uint32_t seed) {
    const auto p = pattern(static_cast<size_t>((to - from) * kRow), seed);
    std::memcpy(want[slot].data() + from * kRow, p.data(), p.size());
    return Mem::write(row(slot, from), p);
  }
  // Do the first `tokens` rows of `slot` read as the mirror says?
  bool reads(int64_t slot, int64_t tokens, std::string* why) const {
    const std::vector<uint8_t> w(want[slot].begin(), want[slot].begin() + tokens * kRow);
    return holds<Mem>(row(slot, 0), w, why);
  }
  size_t chunks_of(int64_t tokens) const { return (static_cast<size_t>(tokens * kRow) + cb - 1) / cb; }
};

// Everything a refused call must leave alone.
struct State {
  std::vector<int32_t> tokens;
  size_t mapped = 0, shared = 0;
  int64_t dev_mapped = 0, dev_shared = 0;
  explicit State(const SlotCache& c) : tokens(c.mapped_tokens_all(nullptr)) {
    mapped = c.mapped_bytes();
    shared = c.shared_bytes();
    const pvt::MemoryStats s = pvt::memory_stats(c.device());
    dev_mapped = s.mapped_bytes;
    dev_shared = s.shared_bytes;
  }
  bool operator==(const State& o) const {
    return tokens == o.tokens && mapped == o.mapped && shared == o.shared && dev_mapped == o.dev_mapped &&
           dev_shared == o.dev_shared;
  }
};

template <typename Mem>
void check_layout(Report& r, Backend* be, size_t cb) {
  Fixture<Mem> f;
  if (!f.make(r, be, cb, true, "share_layout")) return;
  const SlotCacheShape& s = f.cache->shape();
  r.check(s.slot_rows >= s.max_seq_len, "share_layout.slot_rows_cover_max_seq_len");
  r.eq(static_cast<size_t>(s.slot_bytes()) % cb, 0, "share_layout.every_slot_starts_on_a_chunk");
  // Padding below lcm(chunk, row) bytes: the fewest whole rows that end on a chunk boundary.
  const size_t lcm = cb / std::gcd(cb, static_cast<size_t>(kRow)) * kRow;
  r.check(static_cast<size_t>(s.slot_bytes()) < static_cast<size_t>(s.max_seq_len * kRow) + lcm,
          "share_layout.padding_under_one_row_chunk_lcm");
  r.eq(f.cache->reserved_bytes(), static_cast<size_t>(4 * s.slot_bytes()), "share_layout.reserved");
  r.ok(f.cache->reserve(1, 1, nullptr), "share_layout.reserve_one_row");
  r.eq(f.cache->mapped_bytes(), cb, "share_layout.one_row_maps_one_chunk");
  r.code(f.cache->reserve(1, s.max_seq_len + 1, nullptr), Code::kOutOfRange, "share_layout.past_max_seq_len");
  r.ok(f.cache->release(1, nullptr), "share_layout.release");
}

// Share, read, append to both, roll one back (copy-on-write), release in `src_first` order.
template <typename Mem>
void check_share(Report& r, Backend* be, size_t cb, bool src_first) {
  const std::string n = src_first ? "share_src_first" : "share_dst_first";
  Fixture<Mem> f;
  if (!f.make(r, be, cb, true, n)) return;
  SlotCache& c = *f.cache;
  const pvt::MemoryStats before = pvt::memory_stats(c.device());
  const int64_t T = static_cast<int64_t>(2 * cb + cb / 3) / kRow;  // two whole chunks and a part
  const int64_t src = 0, dst = 2;
  if (!r.ok(c.reserve(src, T + 5, nullptr), n + ".reserve_src") || !r.check(f.fill(src, 0, T + 5, 1), n + ".fill"))
    return;
  if (!r.ok(c.share_prefix(src, dst, T, nullptr), n + ".share")) return;
  f.want[dst] = f.want[src];
  std::string why;
  r.eq(c.mapped_tokens(dst), T, n + ".dst_mapped_tokens");
  // first_shared_row: chunks 0 and 1 are shared; row `edge` holds chunk 1's last byte (and chunk 2's first).
  const int64_t edge = static_cast<int64_t>(2 * cb - 1) / kRow, edge0 = static_cast<int64_t>(cb - 1) / kRow;
  for (const int64_t s : {src, dst}) {
    const std::string q = n + ".first_shared_row_" + (s == src ? "src" : "dst");
    r.eq(c.first_shared_row(s, 0, T), 0, q + "_from_0");
    r.eq(c.first_shared_row(s, 5, T), 5, q + "_from_5");
    r.eq(c.first_shared_row(s, edge, T), edge, q + "_row_straddling_into_own_chunk");
    r.eq(c.first_shared_row(s, edge + 1, T + 5), -1, q + "_own_chunk");
    r.eq(c.first_shared_row(s, 5, 5), -1, q + "_empty_range");
  }
  r.eq(c.first_shared_row(1, 0, T), -1, n + ".first_shared_row_unmapped_slot");
  r.eq(c.first_shared_row(9, 0, T), -1, n + ".first_shared_row_bad_slot");
  r.check(f.reads(dst, T, &why), n + ".dst_reads_src_prefix", why);
  // Physical memory: src's 3 chunks once, plus dst's copied chunk; the 2 aliases are shared bytes.
  r.eq(c.mapped_bytes(), 4 * cb, n + ".mapped_counts_shared_chunks_once");
  r.eq(c.shared_bytes(), 2 * cb, n + ".shared_bytes_are_the_aliases");
  const pvt::MemoryStats mid = pvt::memory_stats(c.device());
  r.eq(mid.mapped_bytes - before.mapped_bytes, static_cast<int64_t>(4 * cb), n + ".device_mapped");
  r.eq(mid.shared_bytes - before.shared_bytes, static_cast<int64_t>(2 * cb), n + ".device_shared");
  // Zero copy: a write through src's first row is read through dst's (then put back).
  const auto probe = pattern(kRow, 99);
  const std::vector<uint8_t> row0(f.want[src].begin(), f.want[src].begin() + kRow);
  r.check(Mem::write(f.row(src, 0), probe) && holds<Mem>(f.row(dst, 0), probe, &why), n + ".alias_not_copy", why);
  Mem::write(f.row(src, 0), row0);
  // Appending: dst past T (its own copied chunk, then new ones), src past T (its own chunk).
  if (!r.ok(c.reserve(dst, T + 2 * static_cast<int64_t>(cb) / kRow, nullptr), n + ".reserve_dst_more")) return;
  f.fill(dst, T, T + 2 * static_cast<int64_t>(cb) / kRow, 2);
  f.fill(src, T, T + 5, 3);
  r.check(f.reads(src, T + 5, &why), n + ".src_unchanged_by_dst_append", why);
  r.check(f.reads(dst, T + 2 * static_cast<int64_t>(cb) / kRow, &why), n + ".dst_unchanged_by_src_append", why);
  // Roll src back into its second (shared) chunk and write there: copy-on-write of that chunk only.
  const int64_t back = static_cast<int64_t>(cb + cb / 2) / kRow;
  const size_t shared_before = c.shared_bytes(), mapped_before = c.mapped_bytes();
  r.ok(c.make_private(src, back, back + 4, nullptr), n + ".make_private");
  r.eq(c.shared_bytes(), shared_before - cb, n + ".cow_one_chunk_less_shared");
  r.eq(c.first_shared_row(src, edge0, T), edge0, n + ".first_shared_row_chunk_0_still_shared");
  r.eq(c.first_shared_row(src, edge0 + 1, T), -1, n + ".first_shared_row_chunk_1_private");
  r.eq(c.first_shared_row(dst, edge0 + 1, T), -1, n + ".first_shared_row_chunk_1_private_in_dst_too");
  r.eq(c.mapped_bytes(), mapped_before + cb, n + ".cow_one_chunk_more_mapped");
  r.check(f.reads(src, T + 5, &why), n + ".cow_copy_holds_the_bytes", why);
  f.fill(src, back, back + 4, 4);
  r.check(f.reads(dst, T, &why), n + ".dst_unchanged_by_src_rollback_write", why);
  r.check(f.reads(src, T + 5, &why), n + ".src_reads_its_rollback_write", why);
  r.ok(c.make_private(src, back, back + 4, nullptr), n + ".make_private_again_is_a_no_op");
  r.eq(c.shared_bytes(), shared_before - cb, n + ".no_op_keeps_sharing");
  // Release either first: the other reads on, and everything goes with the second.
  const int64_t first = src_first ? src : dst, second = src_first ? dst : src;
  const int64_t second_len = c.mapped_tokens(second);
  r.ok(c.release(first, nullptr), n + ".release_first");
  r.eq(c.shared_bytes(), 0, n + ".nothing_shared_after_one_release");
  r.eq(c.first_shared_row(second, 0, second_len), -1, n + ".first_shared_row_none_after_one_release");
  r.check(f.reads(second, second_len, &why), n + ".other_slot_intact", why);
  r.ok(c.release(second, nullptr), n + ".release_second");
  r.eq(c.mapped_bytes(), 0, n + ".all_released");
  const pvt::MemoryStats after = pvt::memory_stats(c.device());
  r.eq(after.mapped_bytes, before.mapped_bytes, n + ".device_mapped_back");
  r.eq(after.shared_bytes, before.shared_bytes, n + ".device_shared_back");
}

// A prefix that ends on a chunk boundary is mapped whole: nothing copied, nothing new created.
// 3 chunks hold exactly cb / 64 rows of 192 (= 3 * 64) bytes.
template <typename Mem>
void check_share_whole_chunks(Report& r, Backend* be, size_t cb) {
  Fixture<Mem> f;
  if (!f.make(r, be, cb, true, "share_whole")) return;
  SlotCache& c = *f.cache;
  const int64_t T = static_cast<int64_t>(cb) / 64;
  r.ok(c.reserve(1, T, nullptr), "share_whole.reserve");
  f.fill(1, 0, T, 7);
  r.ok(c.share_prefix(1, 3, T, nullptr), "share_whole.share");
  f.want[3] = f.want[1];
  std::string why;
  r.eq(c.mapped_bytes(), 3 * cb, "share_whole.no_chunk_created");
  r.eq(c.shared_bytes(), 3 * cb, "share_whole.every_chunk_shared");
  r.check(f.reads(3, T, &why), "share_whole.dst_reads", why);
  // dst appends into a new chunk, never into src's.
  r.ok(c.reserve(3, T + 1, nullptr), "share_whole.dst_append_reserve");
  r.eq(c.shared_bytes(), 3 * cb, "share_whole.append_maps_a_new_chunk");
  r.eq(c.mapped_bytes(), 4 * cb, "share_whole.append_chunk_counted");
  r.ok(c.release(1, nullptr), "share_whole.release_src");
  r.check(f.reads(3, T, &why), "share_whole.dst_after_src_release", why);
  r.ok(c.release(3, nullptr), "share_whole.release_dst");
}

// Bad requests change nothing (bookkeeping, stats, both slots' bytes).
template <typename Mem>
void check_refusals(Report& r, Backend* be, size_t cb) {
  Fixture<Mem> f;
  if (!f.make(r, be, cb, true, "share_refuse")) return;
  SlotCache& c = *f.cache;
  const int64_t T = static_cast<int64_t>(cb + cb / 2) / kRow;
  r.ok(c.reserve(0, T, nullptr), "share_refuse.reserve_src");
  f.fill(0, 0, T, 11);
  r.ok(c.reserve(3, 5, nullptr), "share_refuse.reserve_busy_dst");
  f.fill(3, 0, 5, 12);
  r.ok(c.reserve(2, 3, nullptr), "share_refuse.reserve_released");
  r.ok(c.release(2, nullptr), "share_refuse.release");
  const State s0(c);
  std::string why;
  auto same = [&](const std::string& name) {
    r.check(State(c) == s0, name + ".state_unchanged");
    r.check(f.reads(0, T, &why), name + ".src_bytes_unchanged", why);
    r.check(f.reads(3, 5, &why), name + ".dst_bytes_unchanged", why);
  };
  struct Bad {
    int64_t src, dst, tokens;
    const char* name;
  };
  const Bad bad[] = {{1, 2, 1, "share_refuse.empty_src"},        {2, 1, 1, "share_refuse.released_src"},
                     {0, 1, T + 1, "share_refuse.past_src_rows"}, {0, 0, 1, "share_refuse.itself"},
                     {0, 1, 0, "share_refuse.zero_tokens"},       {0, 1, -3, "share_refuse.negative_tokens"},
                     {0, 4, 1, "share_refuse.dst_out_of_range"},  {-1, 1, 1, "share_refuse.src_out_of_range"},
                     {0, 3, 2, "share_refuse.dst_holds_rows"}};
  for (const Bad& b : bad) {
    r.code(c.share_prefix(b.src, b.dst, b.tokens, nullptr), Code::kInvalidArgument, b.name);
    same(b.name);
  }
  r.code(c.make_private(9, 0, 1, nullptr), Code::kInvalidArgument, "share_refuse.make_private_bad_slot");
  r.code(c.make_private(0, -1, 1, nullptr), Code::kInvalidArgument, "share_refuse.make_private_negative_from");
  same("share_refuse.make_private");
  // A cache created without aligned slots cannot share.
  Fixture<Mem> u;
  if (!u.make(r, be, cb, false, "share_refuse.unaligned")) return;
  r.eq(u.cache->shape().slot_rows, u.cache->shape().max_seq_len, "share_refuse.unaligned_rows_unpadded");
  r.ok(u.cache->reserve(0, 10, nullptr), "share_refuse.unaligned_reserve");
  const State su(*u.cache);
  r.code(u.cache->share_prefix(0, 1, 5, nullptr), Code::kInvalidArgument, "share_refuse.unaligned_cache");
  r.check(State(*u.cache) == su, "share_refuse.unaligned_unchanged");
}

// Injected driver failures mid-share and mid-copy-on-write leave both slots as they were.
template <typename Mem>
void check_failures(Report& r, Backend* real, size_t cb) {
  FailingBackend be(real);
  Fixture<Mem> f;
  if (!f.make(r, &be, cb, true, "share_fail")) return;
  SlotCache& c = *f.cache;
  const int64_t T = static_cast<int64_t>(2 * cb + cb / 3) / kRow;
  r.ok(c.reserve(0, T, nullptr), "share_fail.reserve");
  f.fill(0, 0, T, 21);
  const State s0(c);
  std::string why;
  struct Inject {
    long* knob;
    long after;
    const char* name;
  };
  const Inject mid_share[] = {{&be.fail_map_after, 1, "share_fail.second_alias_map"},
                              {&be.fail_map_after, 2, "share_fail.copy_chunk_map"},
                              {&be.fail_create_after, 0, "share_fail.copy_chunk_create"},
                              {&be.fail_copy_after, 0, "share_fail.copy"}};
  for (const Inject& in : mid_share) {
    *in.knob = in.after;
    r.code(c.share_prefix(0, 1, T, nullptr), Code::kDriver, in.name);
    *in.knob = -1;
    r.check(State(c) == s0, std::string(in.name) + ".state_unchanged");
    r.check(f.reads(0, T, &why), std::string(in.name) + ".src_intact", why);
  }
  if (!r.ok(c.share_prefix(0, 1, T, nullptr), "share_fail.share_after_failures")) return;
  f.want[1] = f.want[0];
  const State s1(c);
  const Inject mid_cow[] = {{&be.fail_create_after, 0, "share_fail.cow_create"},
                            {&be.fail_map_after, 0, "share_fail.cow_scratch_map"},
                            {&be.fail_copy_after, 0, "share_fail.cow_copy"},
                            {&be.fail_map_after, 1, "share_fail.cow_swap_map"}};
  for (const Inject& in : mid_cow) {
    *in.knob = in.after;
    r.code(c.make_private(1, 0, 1, nullptr), Code::kDriver, in.name);
    *in.knob = -1;
    r.check(State(c) == s1, std::string(in.name) + ".state_unchanged");
    r.check(f.reads(0, T, &why) && f.reads(1, T, &why), std::string(in.name) + ".both_slots_intact", why);
  }
  r.ok(c.make_private(1, 0, 1, nullptr), "share_fail.cow_after_failures");
  r.eq(c.shared_bytes(), s1.shared - cb, "share_fail.cow_unshared_one_chunk");
  r.check(f.reads(1, T, &why), "share_fail.cow_copy_reads", why);
  f.cache.reset();
}

// unreserve: back to the rows held before, nothing else touched; a shared chunk stays for the other slot.
template <typename Mem>
void check_unreserve(Report& r, Backend* be, size_t cb) {
  Fixture<Mem> f;
  if (!f.make(r, be, cb, true, "unreserve")) return;
  SlotCache& c = *f.cache;
  const int64_t small = 5, big = static_cast<int64_t>(3 * cb) / kRow;
  std::string why;
  if (!r.ok(c.reserve(1, small, nullptr), "unreserve.reserve_small") || !r.check(f.fill(1, 0, small, 7), "unreserve.fill"))
    return;
  const State s0(c);
  r.ok(c.reserve(1, big, nullptr), "unreserve.reserve_big");
  r.ok(c.unreserve(1, small), "unreserve.back");
  r.check(State(c) == s0, "unreserve.state_as_before");
  r.check(f.reads(1, small, &why), "unreserve.rows_kept", why);
  r.ok(c.unreserve(1, big), "unreserve.above_mapped_is_a_no_op");
  r.check(State(c) == s0, "unreserve.no_op_state");
  r.code(c.unreserve(9, 0), Code::kInvalidArgument, "unreserve.bad_slot");
  r.code(c.unreserve(1, -1), Code::kInvalidArgument, "unreserve.negative");
  r.check(State(c) == s0, "unreserve.refusals_change_nothing");
  // dst's aliases of src's chunks: taken back from dst, kept for src.
  if (!r.ok(c.reserve(0, big, nullptr), "unreserve.reserve_src") || !r.check(f.fill(0, 0, big, 8), "unreserve.fill_src"))
    return;
  const State s1(c);
  if (!r.ok(c.share_prefix(0, 3, big, nullptr), "unreserve.share")) return;
  r.ok(c.unreserve(3, 0), "unreserve.dst_to_0");
  r.check(State(c) == s1, "unreserve.share_taken_back");
  r.check(f.reads(0, big, &why), "unreserve.src_intact", why);
  r.ok(c.release(0, nullptr), "unreserve.release_src");
  r.ok(c.release(1, nullptr), "unreserve.release_1");
  r.eq(c.mapped_bytes(), 0, "unreserve.all_released");
}

template <typename Mem>
void run_all(Report& r, pvt::Device dev, size_t cb) {
  Backend* be = nullptr;
  if (!r.ok(pvt::get_backend(dev, &be), "share.get_backend")) return;
  check_layout<Mem>(r, be, cb);
  check_share<Mem>(r, be, cb, true);
  check_share<Mem>(r, be, cb, false);
  check_share_whole_chunks<Mem>(r, be, cb);
  check_refusals<Mem>(r, be, cb);
  check_failures<Mem>(r, be, cb);
  check_unreserve<Mem>(r, be, cb);
}

}  // namespace share_test

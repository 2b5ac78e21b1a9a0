// Watched slot caches (lookahead.h, issue 30 point 5): the step path publishes lengths, the mapper
// maps a chunk ahead on its own, no call queued. On the host backend (4 rows a 4 KiB chunk):
//   - decode: 8 slots grow one row a step for 60 steps; after each step the mapper (given a step's
//     time) has mapped every slot to the end of the chunk 4 rows past its length (a reference
//     computed here), and from the second step on the step thread itself maps nothing (the backend
//     counts the maps made on the thread that built it), no ticket is handed out;
//   - a look by hand (map_lookahead on a cache marked but not watched): only marked slots, rows
//     rounded to their chunk's end, aligned and unaligned slots, max_seq_len the cap, a second look
//     maps nothing, a slot within its mapped rows is not marked;
//   - a released slot is not mapped again by a look that comes after the release;
//   - a look past the mapped limit fails, is counted, and leaves the other slots mapped;
//   - watch_ahead's argument checks; rows 0 stops watching.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/apis.h"
#include "harness.h"
#include "slow_map_backend.h"

using namespace pvt;
using pvt_test::Report;

namespace {

constexpr size_t kPage = 4096;
constexpr int64_t kRowBytes = 1024;  // 4 rows a chunk
constexpr int64_t kRowsPerChunk = 4;

std::shared_ptr<SlotCache> make_on(Report& r, Backend* b, int64_t slots, int64_t max_seq_len, bool aligned,
                                   const char* what) {
  std::shared_ptr<SlotCache> c;
  SlotCacheShape shape{slots, max_seq_len, kRowBytes};
  shape.align_slots = aligned;
  r.ok(SlotCache::create_on(b, shape, kPage, &c), what);
  return c;
}

// Rows an aligned slot holds once `len` rows plus `ahead` are mapped to their chunk's end.
int64_t aligned_target(int64_t len, int64_t ahead, int64_t max_seq_len) {
  const int64_t want = std::min(len + ahead, max_seq_len);
  return std::min((want + kRowsPerChunk - 1) / kRowsPerChunk * kRowsPerChunk, max_seq_len);
}

// Waits up to `ms` for every slot to hold want[s] rows.
bool mapped_within(const SlotCache& c, const std::vector<int64_t>& want, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    bool all = true;
    for (size_t s = 0; s < want.size(); ++s) all = all && c.mapped_tokens(static_cast<int64_t>(s)) == want[s];
    if (all) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void test_decode(Report& r) {
  constexpr int64_t kSlots = 8, kMax = 200;
  pvt_test::SlowMapBackend counter;  // counts the maps made on this (the step's) thread
  auto c = make_on(r, &counter, kSlots, kMax, true, "decode: create");
  if (!c || !r.ok(watch_ahead(c, kRowsPerChunk), "decode: watch a chunk ahead")) return;
  std::vector<int64_t> slots(kSlots), len(kSlots);
  for (int64_t s = 0; s < kSlots; ++s) slots[s] = s, len[s] = 1 + s;  // staggered: crossings spread out
  int wrong = 0, step_maps_after_first = 0;
  for (int step = 0; step < 60; ++step) {
    const int before = counter.builder_maps.load();
    if (!r.ok(c->reserve_batch(slots, len, false), "decode: reserve_batch")) return;
    if (step > 0) step_maps_after_first += counter.builder_maps.load() - before;
    std::vector<int64_t> want(kSlots);
    for (int64_t s = 0; s < kSlots; ++s) want[s] = aligned_target(len[s], kRowsPerChunk, kMax);
    if (!mapped_within(*c, want, 2000)) {
      if (wrong++ == 0) {
        std::printf("info step %d: slot 0 holds %d rows, want %lld\n", step, c->mapped_tokens(0),
                    static_cast<long long>(want[0]));
      }
    }
    for (auto& l : len) ++l;
  }
  r.eq(wrong, 0, "decode: after each step every slot is mapped to the chunk end 4 rows past its length");
  r.eq(step_maps_after_first, 0, "decode: after the first step the step thread maps nothing");
  r.eq(ahead_tickets(), 0, "decode: no ticket handed out (nothing queued)");
  r.ok(watch_ahead(c, 0), "decode: stop watching");
  const int32_t held = c->mapped_tokens(0);
  r.ok(c->reserve_batch({0}, {held}, false), "decode: a step after the stop");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  r.eq(c->mapped_tokens(0), held, "decode: after the stop nothing more is mapped ahead");
}

void test_look_by_hand(Report& r) {
  auto c = make_on(r, host_backend(), 4, 30, true, "by hand: create");
  auto u = make_on(r, host_backend(), 4, 30, false, "by hand: create unaligned");
  if (!c || !u) return;
  c->lookahead().set_rows(5);  // marked, not watched: only this test looks
  u->lookahead().set_rows(5);
  int64_t n = -1;
  r.ok(c->reserve_batch({0, 2, 3}, {1, 6, 27}, false), "by hand: three slots reserve");
  r.ok(c->map_lookahead(&n), "by hand: look");
  r.eq(n, 3, "by hand: three slots mapped");
  r.eq(c->mapped_tokens(0), 8, "by hand: 1 + 5 rows rounded to the chunk's end");
  r.eq(c->mapped_tokens(1), 0, "by hand: an unmarked slot untouched");
  r.eq(c->mapped_tokens(2), 12, "by hand: 6 + 5 rows rounded");
  r.eq(c->mapped_tokens(3), 30, "by hand: max_seq_len caps 27 + 5");
  r.ok(c->map_lookahead(&n), "by hand: second look");
  r.eq(n, 0, "by hand: a second look maps nothing");
  r.ok(c->reserve_batch({0}, {3}, false), "by hand: slot 0 grows within its mapped rows");
  r.ok(c->map_lookahead(&n), "by hand: look after a step inside the mapped rows");
  r.eq(n, 0, "by hand: 3 + 5 <= 8: not marked");
  r.ok(c->reserve(0, 4, nullptr), "by hand: reserve (single) enters the next chunk's reach");
  r.ok(c->map_lookahead(&n), "by hand: look after reserve");
  r.eq(c->mapped_tokens(0), 12, "by hand: reserve publishes too: 4 + 5 rounded to 12");
  // Unaligned: slot 1 starts at row 30 (byte 30 KiB, inside chunk 7); 2 + 5 rows end at byte
  // 37 KiB, rounded to the chunk's end at 40 KiB: 10 rows.
  r.ok(u->reserve_batch({1}, {2}, false), "by hand: unaligned reserve");
  r.ok(u->map_lookahead(&n), "by hand: unaligned look");
  r.eq(u->mapped_tokens(1), 10, "by hand: unaligned rows rounded to where the slot's chunk ends");
  // Released: a mark set before the release is not acted on.
  r.ok(c->reserve_batch({1}, {2}, false), "by hand: slot 1 reserves (marked)");
  r.ok(c->release(1, nullptr), "by hand: slot 1 released before the look");
  r.ok(c->map_lookahead(&n), "by hand: look after the release");
  r.eq(n, 0, "by hand: nothing mapped for the released slot");
  r.eq(c->mapped_tokens(1), 0, "by hand: the released slot stays empty");
  for (int64_t s = 0; s < 4; ++s) (void)c->release(s, nullptr), (void)u->release(s, nullptr);
}

void test_failure(Report& r) {
  auto c = make_on(r, host_backend(), 4, 100, true, "failure: create");
  if (!c) return;
  c->lookahead().set_rows(40);
  r.ok(c->reserve_batch({0, 1}, {4, 4}, false), "failure: two slots hold 4 rows");
  const int64_t mapped = memory_stats(Device::host()).mapped_bytes;
  set_mapped_limit(Device::host(), mapped + 10 * static_cast<int64_t>(kPage));  // slot 0's 10 more chunks only
  int64_t n = -1;
  r.code(c->map_lookahead(&n), Code::kOutOfMemory, "failure: the look past the limit reports kOutOfMemory");
  set_mapped_limit(Device::host(), 0);
  r.eq(n, 1, "failure: the first slot was mapped");
  r.eq(c->mapped_tokens(0), 44, "failure: slot 0 holds 4 + 40 rows");
  r.eq(c->mapped_tokens(1), 4, "failure: slot 1 as before");
  r.eq(c->lookahead().failures(), 1, "failure: counted");
  for (int64_t s = 0; s < 4; ++s) (void)c->release(s, nullptr);
}

void test_arguments(Report& r) {
  auto c = make_on(r, host_backend(), 2, 50, true, "arguments: create");
  if (!c) return;
  r.code(watch_ahead(c, -1), Code::kInvalidArgument, "arguments: rows < 0 refused");
  r.code(watch_ahead(c, 51), Code::kInvalidArgument, "arguments: rows past max_seq_len refused");
  r.eq(c->lookahead().rows(), 0, "arguments: a refused call watches nothing");
  // The step path's one-pass check (rows mapped and in range, no lock) must still refuse bad entries,
  // mapped rows around them or not, and change nothing.
  r.ok(c->reserve_batch({0, 1}, {10, 10}, false), "arguments: two slots hold 10 rows");
  const int64_t held0 = c->mapped_tokens(0), held1 = c->mapped_tokens(1);
  r.code(c->reserve_batch({0, 2}, {1, 0}, false), Code::kInvalidArgument, "arguments: slot past the end refused");
  r.code(c->reserve_batch({-1, 1}, {0, 1}, false), Code::kInvalidArgument, "arguments: negative slot refused");
  r.code(c->reserve_batch({0, 1}, {1, -1}, false), Code::kInvalidArgument, "arguments: negative length refused");
  r.code(c->reserve_batch({0, 1}, {1, 51}, false), Code::kOutOfRange, "arguments: length past max_seq_len refused");
  r.code(c->reserve_batch({0, 1}, {1}, false), Code::kInvalidArgument, "arguments: one length short refused");
  r.check(c->mapped_tokens(0) == held0 && c->mapped_tokens(1) == held1, "arguments: refused batches change nothing");
  r.ok(c->release(0, nullptr), "arguments: release 0");
  r.ok(c->release(1, nullptr), "arguments: release 1");
}

}  // namespace

int main() {
  Report r;
  test_decode(r);
  test_look_by_hand(r);
  test_failure(r);
  test_arguments(r);
  r.eq(memory_stats(Device::host()).mapped_bytes, 0, "everything released");
  return r.finish();
}

// Prefetches on the background mapper (issue 30 point 2: rows needed steps later, map_ahead with
// AheadKind::kPrefetch) on the host backend:
//   - model: seeded prefetches mixed with releases queued right after them: after each wait every
//     slot holds max(what it held, what was asked) or 0 after a release (a release waits for the
//     prefetch queued before it), the same as a twin reserved synchronously;
//   - partial failure: a prefetch that passes the mapped limit at its second slot maps the first,
//     leaves the second and third as they were and reports kOutOfMemory;
//   - the step path does not wait: while the mapper is held inside a prefetch's map (a backend that
//     blocks), reserve of rows already mapped, reserve_batch of them and an op's SlotCacheHold return
//     at once; a release waits until the prefetch is done; a hold waits for a queued batch (kBatch);
//   - the lock-free path of reserve does not trust a slot a running batch raised (it may undo it);
//   - the gate: a wait covers the work entered before it, not work other threads enter meanwhile;
//   - the mapper thread runs as SCHED_BATCH (seen from inside its map calls), so waking it does not
//     preempt the thread that queued work.
#include <sched.h>

#include <chrono>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "core/apis.h"
#include "harness.h"
#include "slow_map_backend.h"

using namespace pvt;
using pvt_test::Report;

namespace {

constexpr size_t kPage = 4096;
constexpr int64_t kRowBytes = 1024;  // 4 rows a page
using std::chrono::milliseconds;

std::shared_ptr<SlotCache> make_on(Report& r, Backend* b, int64_t slots, int64_t max_seq_len, const char* what) {
  std::shared_ptr<SlotCache> c;
  SlotCacheShape shape{slots, max_seq_len, kRowBytes};
  shape.align_slots = true;
  r.ok(SlotCache::create_on(b, shape, kPage, &c), what);
  return c;
}

void test_model(Report& r) {
  constexpr int64_t kSlots = 12, kMax = 160;
  auto async = make_on(r, host_backend(), kSlots, kMax, "model create async");
  auto sync = make_on(r, host_backend(), kSlots, kMax, "model create sync");
  if (!async || !sync) return;
  std::mt19937 rng(11);
  std::vector<int32_t> model(kSlots, 0);
  int mismatches = 0;
  for (int step = 0; step < 300; ++step) {
    std::vector<int64_t> slots, tokens;
    for (int i = 0, n = static_cast<int>(rng() % 6) + 1; i < n; ++i) {
      slots.push_back(static_cast<int64_t>(rng() % kSlots));
      tokens.push_back(static_cast<int64_t>(rng() % (kMax + 1)));
      model[slots.back()] = std::max<int32_t>(model[slots.back()], static_cast<int32_t>(tokens.back()));
    }
    AheadTicket t = 0;
    if (!r.ok(map_ahead(async, slots, tokens, &t, AheadKind::kPrefetch), "model queue")) return;
    for (size_t i = 0; i < slots.size(); ++i) (void)sync->reserve(slots[i], tokens[i], nullptr);
    if (rng() % 3 == 0) {  // must run after the prefetch queued before it
      const int64_t s = static_cast<int64_t>(rng() % kSlots);
      (void)async->release(s, nullptr);
      (void)sync->release(s, nullptr);
      model[s] = 0;
    }
    if (!r.ok(wait_ahead(t), "model wait")) return;
    const std::vector<int32_t> a = async->mapped_tokens_all(nullptr);
    mismatches += a != model || a != sync->mapped_tokens_all(nullptr) || async->mapped_bytes() != sync->mapped_bytes();
  }
  r.eq(mismatches, 0, "model: prefetch = synchronous = model after each of 300 steps");
  for (int64_t s = 0; s < kSlots; ++s) (void)async->release(s, nullptr);
  r.eq(async->mapped_bytes(), 0, "model: all released");
}

void test_partial_failure(Report& r) {
  auto c = make_on(r, host_backend(), 8, 400, "partial create");
  if (!c) return;
  r.ok(c->reserve(1, 10, nullptr), "partial: slot 1 holds 10 rows");
  r.ok(c->reserve(5, 3, nullptr), "partial: slot 5 holds 3 rows");
  const int64_t mapped_before = memory_stats(Device::host()).mapped_bytes;
  // Room for 30 more pages: slot 1 needs 22 more (100 rows), slot 2 then 75: it fails.
  set_mapped_limit(Device::host(), mapped_before + 30 * static_cast<int64_t>(kPage));
  AheadTicket t = 0;
  r.ok(map_ahead(c, {1, 2, 5}, {100, 300, 400}, &t, AheadKind::kPrefetch), "partial: queued");
  r.code(wait_ahead(t), Code::kOutOfMemory, "partial: wait reports the mapped limit as kOutOfMemory");
  set_mapped_limit(Device::host(), 0);
  r.eq(c->mapped_tokens(1), 100, "partial: the slot before the failure stays mapped");
  r.eq(c->mapped_tokens(2), 0, "partial: the failing slot is as before");
  r.eq(c->mapped_tokens(5), 3, "partial: the slot after it is untouched");
  r.eq(memory_stats(Device::host()).mapped_bytes, mapped_before + 22 * static_cast<int64_t>(kPage),
       "partial: mapped bytes grew by slot 1's 22 pages only");
  for (int64_t s = 0; s < 8; ++s) (void)c->release(s, nullptr);
}

// Runs `fn` on another thread; true when it returned within `ms`.
template <class F>
bool returns_within(std::future<void>* f, F fn, int ms) {
  *f = std::async(std::launch::async, fn);
  return f->wait_for(milliseconds(ms)) == std::future_status::ready;
}

void test_step_does_not_wait(Report& r) {
  pvt_test::SlowMapBackend slow;
  auto c = make_on(r, &slow, 4, 400, "no wait create");
  if (!c) return;
  r.ok(c->reserve(1, 8, nullptr), "no wait: slot 1 holds 8 rows");
  slow.close();
  AheadTicket t = 0;
  r.ok(map_ahead(c, {0}, {400}, &t, AheadKind::kPrefetch), "no wait: prefetch queued");
  slow.wait_blocked();  // the mapper is inside the prefetch's first map, holding the cache's lock
  std::future<void> f;
  Status reserve_st(Code::kDriver, "not run"), batch_st(Code::kDriver, "not run");
  const bool quick = returns_within(&f, [&] {
    reserve_st = c->reserve(1, 8, nullptr);
    batch_st = c->reserve_batch({1}, {5}, /*announced=*/false);
    SlotCacheHold hold(*c);
  }, 2000);
  r.check(quick, "no wait: reserve, reserve_batch of mapped rows and a hold return while the mapper maps");
  std::future<void> rel;
  const bool release_quick = returns_within(&rel, [&] { (void)c->release(1, nullptr); }, 100);
  r.check(!release_quick, "no wait: a release waits for the prefetch queued before it");
  slow.open();
  f.wait();
  rel.wait();
  r.ok(reserve_st, "no wait: reserve of mapped rows succeeds");
  r.ok(batch_st, "no wait: reserve_batch of mapped rows succeeds");
  r.ok(wait_ahead(t), "no wait: the prefetch succeeds");
  r.eq(c->mapped_tokens(0), 400, "no wait: the prefetch mapped slot 0");
  r.eq(c->mapped_tokens(1), 0, "no wait: slot 1 released after it");
  // A batch (what the next step needs) is still waited for by the ops.
  slow.close();
  r.ok(map_ahead(c, {2}, {100}, &t, AheadKind::kBatch), "no wait: a batch queued");
  slow.wait_blocked();
  std::future<void> h;
  r.check(!returns_within(&h, [&] { SlotCacheHold hold(*c); }, 100), "no wait: a hold waits for a queued batch");
  slow.open();
  h.wait();
  r.ok(wait_ahead(t), "no wait: the batch succeeds");
  for (int64_t s = 0; s < 4; ++s) (void)c->release(s, nullptr);
}

// A wait covers what was entered before it, not what other threads enter while it waits (a wait
// for "nothing entered" starved test_background_mapper's two submitters on a 16-core H200).
void test_gate_waits_for_earlier_work_only(Report& r) {
  AheadGate gate;
  for (AheadKind kind : {AheadKind::kBatch, AheadKind::kPrefetch}) {
    const std::string k = kind == AheadKind::kBatch ? "batch" : "prefetch";
    gate.enter(kind);  // #1, before the wait
    std::future<void> w;
    const bool early = returns_within(&w, [&] {
      if (kind == AheadKind::kBatch) {
        gate.wait_batches();
      } else {
        gate.wait_all();
      }
    }, 50);
    r.check(!early, "gate " + k + ": a wait waits for the work entered before it");
    gate.enter(kind);  // #2, entered while the wait waits
    gate.leave(kind);  // #1 done
    r.check(w.wait_for(milliseconds(2000)) == std::future_status::ready,
            "gate " + k + ": the wait returns once the earlier work left, though later work is entered");
    r.check(!gate.idle(), "gate " + k + ": the later work is still entered");
    gate.leave(kind);
    w.wait();
    r.check(gate.idle(), "gate " + k + ": idle once everything left");
  }
  gate.enter(AheadKind::kPrefetch);
  std::future<void> b;
  r.check(returns_within(&b, [&] { gate.wait_batches(); }, 2000), "gate: wait_batches does not wait for a prefetch");
  gate.leave(AheadKind::kPrefetch);
}

// A batch that raised a slot and may still fail (and lower it again) is not trusted by the
// lock-free path: a reserve of those rows waits for the batch, and after it returns the rows are
// mapped (they would not be if it had trusted the raised value and the batch then undid it).
void test_reserve_does_not_trust_a_batch_in_flight(Report& r) {
  pvt_test::SlowMapBackend slow;
  auto c = make_on(r, &slow, 4, 400, "in flight create");
  if (!c) return;
  slow.fail_map = 25;  // slot 0's 100 rows are maps 0..24; slot 1's first map fails
  AheadTicket t = 0;
  r.ok(map_ahead(c, {0, 1}, {100, 100}, &t, AheadKind::kBatch), "in flight: batch queued");
  slow.wait_blocked();  // slot 0 raised to 100, slot 1's map held
  std::future<void> f;
  Status st(Code::kDriver, "not run");
  // From another thread, not ordered after the batch: reserve_batch with announced=true skips the
  // gate (as a second submitter's call racing the mapper would pass it before the batch entered).
  const bool quick = returns_within(&f, [&] { st = c->reserve_batch({0}, {50}, /*announced=*/true); }, 100);
  r.check(!quick, "in flight: a reserve of rows a running batch raised waits for that batch");
  slow.let_fail();
  f.wait();
  r.code(wait_ahead(t), Code::kOutOfMemory, "in flight: the batch failed (injected)");
  r.ok(st, "in flight: the reserve succeeded");
  r.check(c->mapped_tokens(0) >= 50, "in flight: after it the rows are mapped (got " +
                                         std::to_string(c->mapped_tokens(0)) + ")");
  for (int64_t s = 0; s < 4; ++s) (void)c->release(s, nullptr);
}

void test_mapper_policy(Report& r) {
  pvt_test::SlowMapBackend slow;
  auto c = make_on(r, &slow, 2, 64, "policy create");
  if (!c) return;
  AheadTicket t = 0;
  r.ok(map_ahead(c, {0}, {64}, &t, AheadKind::kPrefetch), "policy: queued");
  r.ok(wait_ahead(t), "policy: mapped");
  r.eq(slow.map_policy.load(), SCHED_BATCH, "policy: the mapper maps as SCHED_BATCH (" +
                                                std::to_string(SCHED_BATCH) + ")");
  r.check(mapper_runs_as_batch(), "policy: mapper_runs_as_batch says so");
  (void)c->release(0, nullptr);
}

}  // namespace

int main() {
  Report r;
  test_gate_waits_for_earlier_work_only(r);
  test_mapper_policy(r);
  test_reserve_does_not_trust_a_batch_in_flight(r);
  test_model(r);
  test_partial_failure(r);
  test_step_does_not_wait(r);
  r.eq(ahead_tickets(), 0, "no ticket left behind");
  return r.finish();
}

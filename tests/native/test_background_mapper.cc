// The background mapper (issue 30 point 2, core/background_mapper.h) on the host backend:
//   - equivalence: seeded batches of reservations, mixed with releases issued right after a queue,
//     carried out by the mapper on one cache and synchronously on a twin: after every step both
//     caches hold the same mapped_tokens and mapped bytes, equal to a model (max per reserve, 0
//     per release), so a release queued after a batch always sees it done;
//   - ordering: an op's SlotCacheHold taken right after a large batch sees every slot of it mapped;
//   - failure: a batch that passes the mapped limit halfway fails at wait() with kOutOfMemory and
//     leaves every slot and the mapped bytes as before the batch;
//   - refusals at the call (bad slot, length, sizes) queue nothing; an unknown ticket is refused;
//   - threads: two submitters and an op-like reader on one cache (built with -fsanitize=thread as
//     test_background_mapper_tsan: no race report).
#include <atomic>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/apis.h"
#include "harness.h"

using namespace pvt;
using pvt_test::Report;

namespace {

constexpr size_t kPage = 4096;
constexpr int64_t kRowBytes = 1024;  // 4 rows a page: crossings are frequent

std::shared_ptr<SlotCache> make(Report& r, int64_t slots, int64_t max_seq_len, bool align, const char* what) {
  std::shared_ptr<SlotCache> c;
  SlotCacheShape shape{slots, max_seq_len, kRowBytes};
  shape.align_slots = align;
  r.ok(SlotCache::create(Device::host(), shape, kPage, &c), what);
  return c;
}

void test_equivalence(Report& r, bool align) {
  const std::string tag = align ? "aligned" : "unaligned";
  constexpr int64_t kSlots = 16, kMax = 200;
  auto async = make(r, kSlots, kMax, align, ("equivalence create async " + tag).c_str());
  auto sync = make(r, kSlots, kMax, align, ("equivalence create sync " + tag).c_str());
  if (!async || !sync) return;
  std::mt19937 rng(7);
  std::vector<int32_t> model(kSlots, 0);
  int mismatches = 0, steps = 0;
  for (int step = 0; step < 300; ++step, ++steps) {
    std::vector<int64_t> slots, tokens;
    const int n = static_cast<int>(rng() % 8) + 1;
    for (int i = 0; i < n; ++i) {
      slots.push_back(static_cast<int64_t>(rng() % kSlots));  // repeats allowed
      tokens.push_back(static_cast<int64_t>(rng() % (kMax + 1)));
      model[slots.back()] = std::max<int32_t>(model[slots.back()], static_cast<int32_t>(tokens.back()));
    }
    AheadTicket t = 0;
    if (!r.ok(map_ahead(async, slots, tokens, &t), "equivalence queue " + tag)) return;
    for (size_t i = 0; i < slots.size(); ++i) (void)sync->reserve(slots[i], tokens[i], nullptr);
    if (rng() % 3 == 0) {  // released right after the queue: must run after the batch
      const int64_t s = static_cast<int64_t>(rng() % kSlots);
      (void)async->release(s, nullptr);
      (void)sync->release(s, nullptr);
      model[s] = 0;
    }
    if (step % 2 == 0 && !r.ok(wait_ahead(t), "equivalence wait " + tag)) return;
    if (step % 2 == 1) forget_ahead(t);
    std::vector<int32_t> a;
    {
      SlotCacheHold hold(*async);  // as an op would: after the batch
      a = async->mapped_tokens_all(nullptr);
    }
    if (a != sync->mapped_tokens_all(nullptr) || a != model || async->mapped_bytes() != sync->mapped_bytes()) {
      ++mismatches;
    }
  }
  r.eq(mismatches, 0, "equivalence " + tag + ": mapper = synchronous = model after each of " + std::to_string(steps) +
                          " steps");
  for (int64_t s = 0; s < kSlots; ++s) {
    (void)async->release(s, nullptr);
    (void)sync->release(s, nullptr);
  }
  r.eq(async->mapped_bytes(), 0, "equivalence " + tag + ": all released");
}

void test_hold_sees_the_batch(Report& r) {
  constexpr int64_t kSlots = 64, kMax = 1024;
  int stale = 0;
  for (int round = 0; round < 5; ++round) {
    auto c = make(r, kSlots, kMax, true, "ordering create");
    if (!c) return;
    std::vector<int64_t> slots, tokens;
    for (int64_t s = 0; s < kSlots; ++s) {
      slots.push_back(s);
      tokens.push_back(kMax - s);
    }
    AheadTicket t = 0;
    if (!r.ok(map_ahead(c, slots, tokens, &t), "ordering queue")) return;
    {
      SlotCacheHold hold(*c);  // what an op does first: must see the batch carried out
      for (int64_t s = 0; s < kSlots; ++s) stale += c->mapped_tokens(s) != kMax - s;
    }
    r.ok(wait_ahead(t), "ordering wait");
  }
  r.eq(stale, 0, "ordering: a hold taken right after a 64-slot batch sees every slot mapped (5 rounds)");
}

void test_failure_leaves_the_cache(Report& r) {
  auto c = make(r, 8, 400, true, "failure create");
  if (!c) return;
  r.ok(c->reserve(1, 10, nullptr), "failure: slot 1 holds 10 rows before the batch");
  r.ok(c->reserve(5, 3, nullptr), "failure: slot 5 holds 3 rows before the batch");
  const std::vector<int32_t> before = c->mapped_tokens_all(nullptr);
  const int64_t mapped_before = memory_stats(Device::host()).mapped_bytes;
  // Room for 30 more pages: the batch below needs 25 + 75 + 100 pages, so its second slot fails.
  set_mapped_limit(Device::host(), mapped_before + 30 * static_cast<int64_t>(kPage));
  AheadTicket t = 0;
  r.ok(map_ahead(c, {1, 2, 5}, {100, 300, 400}, &t), "failure: queued (the checks pass)");
  r.code(wait_ahead(t), Code::kOutOfMemory, "failure: wait reports the mapped limit as kOutOfMemory");
  set_mapped_limit(Device::host(), 0);
  r.check(c->mapped_tokens_all(nullptr) == before, "failure: every slot holds what it held before the batch");
  r.eq(memory_stats(Device::host()).mapped_bytes, mapped_before, "failure: mapped bytes as before the batch");
  r.code(wait_ahead(t), Code::kInvalidArgument, "failure: a ticket is forgotten after its wait");
  for (int64_t s = 0; s < 8; ++s) (void)c->release(s, nullptr);
}

void test_refusals(Report& r) {
  auto c = make(r, 4, 100, true, "refusals create");
  if (!c) return;
  const size_t tickets = ahead_tickets();
  AheadTicket t = 0;
  r.code(map_ahead(c, {4}, {1}, &t), Code::kInvalidArgument, "refusals: slot 4 of 4");
  r.code(map_ahead(c, {-1}, {1}, &t), Code::kInvalidArgument, "refusals: slot -1");
  r.code(map_ahead(c, {0}, {-1}, &t), Code::kInvalidArgument, "refusals: length -1");
  r.code(map_ahead(c, {0}, {101}, &t), Code::kOutOfRange, "refusals: length past max_seq_len");
  r.code(map_ahead(c, {0, 1}, {1}, &t), Code::kInvalidArgument, "refusals: two slots, one length");
  r.eq(t, 0, "refusals: no ticket handed out");
  r.eq(ahead_tickets(), tickets, "refusals: nothing queued");
  r.check(c->ahead().idle(), "refusals: the cache's gate is open");
  r.code(wait_ahead(987654321), Code::kInvalidArgument, "refusals: an unknown ticket");
  r.check(!ahead_done(987654321), "refusals: an unknown ticket is not done");
  r.ok(map_ahead(c, {}, {}, &t), "refusals: an empty batch is fine");
  r.ok(wait_ahead(t), "refusals: an empty batch runs");
}

void test_threads(Report& r) {
  constexpr int64_t kSlots = 8, kMax = 256;
  auto c = make(r, kSlots, kMax, true, "threads create");
  if (!c) return;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> errors{0}, below{0};
  std::vector<std::thread> threads;
  for (int64_t half = 0; half < 2; ++half) {  // each submitter owns slots of one parity
    threads.emplace_back([&, half] {
      for (int i = 0; i < 400; ++i) {
        const int64_t s = half + 2 * (i % (kSlots / 2));
        const int64_t n = 1 + (i * 37) % kMax;
        AheadTicket t = 0;
        if (!map_ahead(c, {s}, {n}, &t).ok()) ++errors;
        // What the batch promised is there for an op, as soon as it holds the cache.
        {
          SlotCacheHold hold(*c);
          if (c->mapped_tokens(s) < n) ++below;
        }
        if (!wait_ahead(t).ok()) ++errors;
        if (i % 5 == 4 && !c->release(s, nullptr).ok()) ++errors;
      }
    });
  }
  threads.emplace_back([&] {
    while (!stop.load()) (void)c->mapped_bytes();
  });
  threads[0].join();
  threads[1].join();
  stop = true;
  threads[2].join();
  r.eq(errors.load(), 0, "threads: every queue, wait and release succeeds");
  r.eq(below.load(), 0, "threads: a hold after a queue always sees it");
  r.eq(ahead_tickets(), 0, "threads: no ticket left behind");
}

}  // namespace

int main() {
  Report r;
  test_refusals(r);
  test_equivalence(r, true);
  test_equivalence(r, false);
  test_hold_sees_the_batch(r);
  test_failure_leaves_the_cache(r);
  test_threads(r);
  return r.finish();
}

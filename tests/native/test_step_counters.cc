// Releases fenced by step counters (core/step_counters.h, issue 30 point 5), on the host backend
// with counters the test raises by hand, standing for StepDoorbell's (rung on the host, finished by
// the device). What must hold: a release while issued steps have not finished defers its unmaps;
// the fence is the count issued at the release (steps issued later do not hold it); mapping over a
// pending chunk waits for exactly that fence; the destructor waits; retired counters are dropped;
// null is refused. Then a seeded random sequence of reserve / release / issue / finish / collect
// against a model of which chunk waits for which step. The CUDA side (the doorbell itself) is
// tests/native/test_step_doorbell.cu.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/apis.h"
#include "harness.h"

using namespace pvt;
using pvt_test::Report;

namespace {

class HandCounters final : public StepCounters {
 public:
  uint64_t issued() const override { return issued_.load(); }
  uint64_t finished() const override { return finished_.load(); }
  bool retired() const override { return retired_.load(); }
  std::atomic<uint64_t> issued_{0}, finished_{0};
  std::atomic<bool> retired_{false};
};

constexpr int64_t kRows = 1024;  // rows a slot; 16 rows of 4 KiB: a 64 KiB chunk
SlotCacheShape shape() {
  SlotCacheShape s;
  s.num_slots = 4;
  s.max_seq_len = kRows;
  s.row_bytes = 4096;
  s.align_slots = true;
  return s;
}
constexpr size_t kChunk = 64 << 10;
constexpr int64_t kRowsPerChunk = kChunk / 4096;

void basics(Report& r) {
  std::shared_ptr<SlotCache> cache;
  if (!r.ok(SlotCache::create(Device::host(), shape(), kChunk, &cache), "create")) return;
  r.code(cache->use_counters(nullptr), Code::kInvalidArgument, "null_counters_refused");
  auto c = std::make_shared<HandCounters>();
  r.ok(cache->use_counters(c), "use_counters");
  // Nothing issued: a release unmaps at once.
  r.ok(cache->reserve(0, 2 * kRowsPerChunk, nullptr), "reserve 0");
  r.ok(cache->release(0, nullptr), "release with nothing issued");
  r.eq(cache->pending_chunks(), 0, "nothing_issued_unmaps_at_once");
  // Step 3 issued, 2 finished: deferred, the slot reads as released at once.
  r.ok(cache->reserve(1, 2 * kRowsPerChunk, nullptr), "reserve 1");
  c->issued_ = 3;
  c->finished_ = 2;
  r.ok(cache->release(1, nullptr), "release while step 3 runs");
  r.eq(cache->mapped_tokens(1), 0, "released_slot_reads_as_released");
  r.eq(cache->pending_chunks(), 2, "deferred_while_an_issued_step_runs");
  // Later steps issued do not hold it: the fence is the count at the release.
  c->issued_ = 5;
  r.ok(cache->collect(false), "collect");
  r.eq(cache->pending_chunks(), 2, "still_deferred_before_step_3");
  c->finished_ = 3;
  r.ok(cache->collect(false), "collect");
  r.eq(cache->pending_chunks(), 0, "unmapped_once_step_3_finished_though_5_issued");
  // Mapping over a pending chunk waits for exactly its fence (step 5), raised by another thread.
  r.ok(cache->reserve(2, kRowsPerChunk, nullptr), "reserve 2");
  r.ok(cache->release(2, nullptr), "release at 5 issued");
  r.eq(cache->pending_chunks(), 1, "deferred_at_5");
  c->issued_ = 9;  // steps issued after the release: the reserve below must not wait for them
  std::atomic<bool> raised{false};
  std::thread finisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    raised = true;
    c->finished_ = 5;
  });
  const Status again = cache->reserve(2, kRowsPerChunk, nullptr);
  const bool waited = raised.load();
  finisher.join();
  r.ok(again, "reserve over the pending chunk");
  r.check(waited, "reserve_over_a_pending_chunk_waits_for_its_fence");
  r.eq(cache->mapped_tokens(2), kRowsPerChunk, "remapped_after_the_fence");
  r.eq(cache->pending_chunks(), 0, "the_wait_retired_it");
  // The destructor waits for the steps issued (9) to finish.
  r.ok(cache->release(2, nullptr), "release at 9 issued");
  std::atomic<bool> finished_all{false};
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    finished_all = true;
    c->finished_ = 9;
  });
  cache.reset();
  const bool destroyed_after = finished_all.load();
  closer.join();
  r.check(destroyed_after, "destructor_waits_for_issued_steps");
  r.eq(memory_stats(Device::host()).mapped_bytes, 0, "destroyed_unmaps_all");
}

void retired_dropped(Report& r) {
  std::unique_ptr<Region> region;
  if (!r.ok(Region::create(Device::host(), 4 * kChunk, kChunk, &region), "region")) return;
  auto c = std::make_shared<HandCounters>();
  r.ok(region->use_counters(c), "use");
  r.ok(region->use_counters(c), "use twice");
  r.eq(region->counters_in_use(), 1, "same_counters_held_once");
  r.ok(region->collect(false), "collect");
  r.eq(region->counters_in_use(), 1, "held_while_not_retired");
  c->retired_ = true;
  r.ok(region->collect(false), "collect");
  r.eq(region->counters_in_use(), 0, "retired_counters_dropped");
  r.eq(c.use_count(), 1, "region_let_go_of_them");
}

// Random reserve / release / issue / finish / collect on 4 slots against a model: a released chunk
// waits for the count issued at its release; pending = chunks whose fence > finished (after collect).
void random_sequence(Report& r, uint32_t seed) {
  std::shared_ptr<SlotCache> cache;
  if (!r.ok(SlotCache::create(Device::host(), shape(), kChunk, &cache), "random: create")) return;
  auto c = std::make_shared<HandCounters>();
  r.ok(cache->use_counters(c), "random: use_counters");
  std::mt19937 rng(seed);
  std::vector<int64_t> rows(4, 0);
  std::vector<std::pair<uint64_t, int64_t>> fences;  // (step, chunks) waiting
  int bad = 0;
  for (int op = 0; op < 2000 && bad == 0; ++op) {
    const int64_t slot = static_cast<int64_t>(rng() % 4);
    switch (rng() % 5) {
      case 0: {  // grow a slot (never over a pending chunk here: slots own their chunks)
        const int64_t want = std::min<int64_t>(kRows, rows[slot] + static_cast<int64_t>(rng() % 40));
        if (rows[slot] == 0 && !fences.empty()) break;  // a fresh slot may map over its own pending chunks
        if (!cache->reserve(slot, want, nullptr).ok()) ++bad;
        rows[slot] = want;
        break;
      }
      case 1: {  // release
        const int64_t chunks = (rows[slot] + kRowsPerChunk - 1) / kRowsPerChunk;
        if (!cache->release(slot, nullptr).ok()) ++bad;
        if (chunks > 0 && c->finished() < c->issued()) fences.emplace_back(c->issued(), chunks);
        rows[slot] = 0;
        break;
      }
      case 2: c->issued_ += 1 + rng() % 3; break;
      case 3: c->finished_ = std::min(c->issued(), c->finished() + 1 + rng() % 3); break;
      case 4: {
        if (!cache->collect(false).ok()) ++bad;
        int64_t want = 0;
        for (const auto& f : fences) want += f.first > c->finished() ? f.second : 0;
        fences.erase(std::remove_if(fences.begin(), fences.end(), [&](const auto& f) { return f.first <= c->finished(); }),
                     fences.end());
        if (static_cast<int64_t>(cache->pending_chunks()) != want) {
          std::printf("info seed %u op %d: pending %zu, model %lld\n", seed, op, cache->pending_chunks(),
                      static_cast<long long>(want));
          ++bad;
        }
        break;
      }
    }
  }
  r.eq(bad, 0, "random_sequence_matches_the_model seed " + std::to_string(seed));
  c->finished_ = c->issued();
  cache.reset();
}

}  // namespace

int main() {
  Report r;
  basics(r);
  retired_dropped(r);
  for (uint32_t seed : {1u, 2u, 3u, 4u}) random_sequence(r, seed);
  return r.finish();
}

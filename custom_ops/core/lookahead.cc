#include "lookahead.h"

#include <pthread.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "background_mapper.h"

namespace pvt {
namespace {

struct Watched {
  std::mutex mu;
  std::vector<std::weak_ptr<SlotCache>> caches;
  std::atomic<bool> any{false};
};

// Leaked on purpose, like the mapper's state: the mapper thread may look during static destruction.
Watched& watched() {
  static auto* w = new Watched();
  return *w;
}

// fork(): the registry's mutex is taken around it, so the child's copy is unlocked and consistent
// (the child keeps watching; its mapper thread starts at its first map_ahead or watch_ahead).
void before_fork() { watched().mu.lock(); }
void after_fork() { watched().mu.unlock(); }
const int kAtForkRegistered = pthread_atfork(&before_fork, &after_fork, &after_fork);

}  // namespace

Status watch_ahead(const std::shared_ptr<SlotCache>& cache, int64_t rows) {
  (void)kAtForkRegistered;
  if (rows < 0 || rows > cache->shape().max_seq_len) {
    return catch_bad_alloc("watch_ahead", [&] {
      return Status(Code::kInvalidArgument, "watch_ahead: rows must be in [0, max_seq_len=" +
                                                std::to_string(cache->shape().max_seq_len) + "], got " +
                                                std::to_string(rows));
    });
  }
  Watched& w = watched();
  const Status st = catch_bad_alloc("watch_ahead", [&] {
    std::lock_guard<std::mutex> lock(w.mu);
    bool found = false;
    for (auto it = w.caches.begin(); it != w.caches.end();) {
      const std::shared_ptr<SlotCache> c = it->lock();
      if (c == cache && rows == 0) {
        it = w.caches.erase(it);
        continue;
      }
      found = found || c == cache;
      ++it;
    }
    if (rows > 0 && !found) w.caches.push_back(cache);  // may throw: nothing changed yet
    cache->lookahead().set_rows(rows);
    w.any.store(!w.caches.empty());
    return Status::Ok();
  });
  PVT_RETURN_IF_ERROR(st);
  return rows > 0 ? wake_mapper() : Status::Ok();
}

bool lookahead_watching() { return watched().any.load(std::memory_order_acquire); }

int64_t lookahead_look() {
  Watched& w = watched();
  std::vector<std::shared_ptr<SlotCache>> live;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    try {
      live.reserve(w.caches.size());
    } catch (const std::bad_alloc&) {
      return 0;  // no host memory for the list: the next look tries again
    }
    for (auto it = w.caches.begin(); it != w.caches.end();) {
      if (std::shared_ptr<SlotCache> c = it->lock()) {
        live.push_back(std::move(c));
        ++it;
      } else {
        it = w.caches.erase(it);
      }
    }
    w.any.store(!w.caches.empty());
  }
  int64_t total = 0;
  for (const auto& c : live) {
    int64_t n = 0;
    (void)c->map_lookahead(&n);  // failures are counted per cache; the step maps what is missing
    total += n;
  }
  return total;  // `live` goes last, without the lock: a dying cache waits for its streams
}

}  // namespace pvt

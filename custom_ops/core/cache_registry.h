// Live caches of one kind by base address, so that a raw pointer (a tensor's data) can be traced back
// to the cache whose reservation holds it. One registry per cache type (SeqMajorCache, SlotCache).
// Leaked on purpose: caches may die during static destruction at interpreter exit.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace pvt {

template <class Cache>
class CacheRegistry {
 public:
  // Throws std::bad_alloc when the map cannot grow (callers create caches under catch_bad_alloc).
  static void add(const std::shared_ptr<Cache>& cache) {
    std::lock_guard<std::mutex> lock(state().mu);
    state().live[cache->data()] = cache;
  }
  static void remove(const char* base) {
    std::lock_guard<std::mutex> lock(state().mu);
    state().live.erase(base);
  }
  // The live cache whose reservation holds ptr, or null.
  static std::shared_ptr<Cache> find(const void* ptr) {
    const char* p = static_cast<const char*>(ptr);
    std::shared_ptr<Cache> cache;  // outlives the lock: its destructor takes the same mutex
    {
      std::lock_guard<std::mutex> lock(state().mu);
      auto it = state().live.upper_bound(p);
      if (it == state().live.begin()) return nullptr;
      cache = std::prev(it)->second.lock();
    }
    if (cache && p < cache->data() + cache->reserved_bytes()) return cache;
    return nullptr;
  }
  // Every live cache (throws std::bad_alloc like add).
  static std::vector<std::shared_ptr<Cache>> all() {
    std::vector<std::shared_ptr<Cache>> out;
    std::lock_guard<std::mutex> lock(state().mu);
    for (const auto& entry : state().live) {
      if (auto cache = entry.second.lock()) out.push_back(std::move(cache));
    }
    return out;
  }

 private:
  struct State {
    std::mutex mu;
    std::map<const char*, std::weak_ptr<Cache>> live;
  };
  static State& state() {
    static auto* s = new State();
    return *s;
  }
};

}  // namespace pvt

#include "chunk_pool.h"

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "stats.h"

namespace pvt {
namespace {

struct Key {
  Backend* backend;
  size_t bytes;
  bool operator<(const Key& o) const { return std::tie(backend, bytes) < std::tie(o.backend, o.bytes); }
};

struct Entry {
  Device device;  // the backend's, kept so trim never calls a backend's methods to find it
  std::vector<PhysHandle> handles;
};

struct PoolState {
  std::mutex mu;
  std::map<Key, Entry> pools;
  std::map<Device, int64_t> pooled;  // bytes pooled per device
  std::map<Device, int64_t> limit;   // the device's bound (absent: 0, no pool)
};

// Leaked on purpose, like the stats table: regions may be destroyed during static destruction.
PoolState& state() {
  static auto* s = new PoolState();
  return *s;
}

int64_t limit_locked(PoolState& s, Device device) {
  auto it = s.limit.find(device);
  return it == s.limit.end() ? 0 : it->second;
}

struct Taken {
  Backend* backend;
  size_t bytes;
  PhysHandle handle;
};

// Removes pooled chunks of `device` until at most `keep` bytes stay; the caller releases them.
std::vector<Taken> take_over_locked(PoolState& s, Device device, int64_t keep) {
  std::vector<Taken> out;
  for (auto& [key, entry] : s.pools) {
    if (!(entry.device == device)) continue;
    while (!entry.handles.empty() && s.pooled[device] > keep) {
      out.push_back({key.backend, key.bytes, entry.handles.back()});
      entry.handles.pop_back();
      s.pooled[device] -= static_cast<int64_t>(key.bytes);
    }
  }
  return out;
}

Status release_taken(Device device, const std::vector<Taken>& taken) {
  Status first;
  for (const Taken& t : taken) {
    const Status st = t.backend->release_chunk(t.handle, t.bytes);
    if (st.ok()) {
      stats_detail::add_pooled(device, -static_cast<int64_t>(t.bytes));
    } else if (first.ok()) {
      first = st;
    }
  }
  return first;
}

}  // namespace

bool pool_take(Backend* backend, size_t bytes, PhysHandle* handle) {
  PoolState& s = state();
  Device device;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.pools.find(Key{backend, bytes});
    if (it == s.pools.end() || it->second.handles.empty()) return false;
    *handle = it->second.handles.back();
    it->second.handles.pop_back();
    device = it->second.device;
    s.pooled[device] -= static_cast<int64_t>(bytes);
  }
  stats_detail::add_pooled(device, -static_cast<int64_t>(bytes));
  return true;
}

bool pool_put(Backend* backend, size_t bytes, PhysHandle handle) {
  PoolState& s = state();
  const Device device = backend->device();
  try {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.pooled[device] + static_cast<int64_t>(bytes) > limit_locked(s, device)) return false;
    Entry& entry = s.pools[Key{backend, bytes}];
    entry.device = device;
    entry.handles.push_back(handle);
    s.pooled[device] += static_cast<int64_t>(bytes);
  } catch (const std::bad_alloc&) {
    return false;  // no room to remember it: the caller releases it
  }
  stats_detail::add_pooled(device, static_cast<int64_t>(bytes));
  return true;
}

Status pool_trim(Device device) {
  return catch_bad_alloc("trim_pool", [&] {
    std::vector<Taken> taken;
    {
      std::lock_guard<std::mutex> lock(state().mu);
      taken = take_over_locked(state(), device, 0);
    }
    return release_taken(device, taken);
  });
}

Status set_pool_limit(Device device, int64_t bytes) {
  if (bytes < 0) {
    return Status(Code::kInvalidArgument,
                  "set_pool_limit: the bound must be >= 0 bytes (0: no pool), got " + std::to_string(bytes));
  }
  return catch_bad_alloc("set_pool_limit", [&] {
    std::vector<Taken> taken;
    {
      std::lock_guard<std::mutex> lock(state().mu);
      state().limit[device] = bytes;
      taken = take_over_locked(state(), device, bytes);
    }
    return release_taken(device, taken);
  });
}

int64_t pool_limit(Device device) {
  std::lock_guard<std::mutex> lock(state().mu);
  return limit_locked(state(), device);
}

Status pool_fill(Backend* backend, size_t chunk_bytes, int64_t bytes, int64_t* created) {
  *created = 0;
  const Device device = backend->device();
  const size_t gran = backend->granularity();
  if (chunk_bytes == 0 || chunk_bytes % gran != 0 || bytes < 0) {
    return Status(Code::kInvalidArgument, "fill_pool: chunk size " + std::to_string(chunk_bytes) +
                                              " must be a positive multiple of the granularity " +
                                              std::to_string(gran) + " and bytes >= 0, got " +
                                              std::to_string(bytes));
  }
  const int64_t cb = static_cast<int64_t>(chunk_bytes);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(state().mu);
      auto it = state().pools.find(Key{backend, chunk_bytes});
      const int64_t have = it == state().pools.end() ? 0 : cb * static_cast<int64_t>(it->second.handles.size());
      if (have + cb > bytes || state().pooled[device] + cb > limit_locked(state(), device)) return Status::Ok();
    }
    // Counted first, so the mapped limit (mapped + pooled) is never passed, even by a racing map.
    if (!stats_detail::try_add_pooled(device, cb)) return Status::Ok();
    PhysHandle handle = 0;
    const Status st = backend->create_chunk(chunk_bytes, &handle);
    if (!st.ok()) {
      stats_detail::add_pooled(device, -cb);
      return st;
    }
    stats_detail::add_pooled(device, -cb);  // pool_put counts it again
    if (!pool_put(backend, chunk_bytes, handle)) {
      // Another thread filled the pool meanwhile.
      (void)backend->release_chunk(handle, chunk_bytes);
      return Status::Ok();
    }
    ++*created;
  }
}

}  // namespace pvt

#include "stats.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

namespace pvt {
namespace {

// Leaked on purpose, like the table: regions may be destroyed during static destruction at exit.
std::mutex& stats_mutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

std::map<Device, MemoryStats>& table() {
  static auto* t = new std::map<Device, MemoryStats>();
  return *t;
}

std::atomic<MappedObserver> g_observer{nullptr};

// Whether `delta` more bytes would take the physical memory held (mapped + pooled) past the limit.
bool passes_limit(const MemoryStats& s, int64_t delta) {
  return delta > 0 && s.mapped_limit > 0 && s.mapped_bytes + s.pooled_bytes + delta > s.mapped_limit;
}

void notify(Device device, int64_t delta) {
  if (MappedObserver fn = g_observer.load()) fn(device, delta);
}

}  // namespace

void set_mapped_observer(MappedObserver observer) { g_observer.store(observer); }

MemoryStats memory_stats(Device device) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  auto it = table().find(device);  // a read never inserts (and so never allocates)
  return it == table().end() ? MemoryStats{} : it->second;
}

void set_mapped_limit(Device device, int64_t bytes) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  table()[device].mapped_limit = bytes < 0 ? 0 : bytes;
}

void reset_peak_mapped(Device device) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  auto& s = table()[device];
  s.peak_mapped_bytes = s.mapped_bytes;
}

void add_bytes_written(Device device, int64_t bytes) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  table()[device].bytes_written += bytes;
}

namespace stats_detail {

bool try_add_mapped(Device device, int64_t delta) {
  {
    std::lock_guard<std::mutex> lock(stats_mutex());
    auto& s = table()[device];
    if (passes_limit(s, delta)) return false;
    s.mapped_bytes += delta;
    s.peak_mapped_bytes = std::max(s.peak_mapped_bytes, s.mapped_bytes);
  }
  notify(device, delta);
  return true;
}

void add_mapped(Device device, int64_t delta) {
  {
    std::lock_guard<std::mutex> lock(stats_mutex());
    auto& s = table()[device];
    s.mapped_bytes += delta;
    s.peak_mapped_bytes = std::max(s.peak_mapped_bytes, s.mapped_bytes);
  }
  notify(device, delta);
}

bool try_add_pooled(Device device, int64_t delta) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  auto& s = table()[device];
  if (passes_limit(s, delta)) return false;
  s.pooled_bytes += delta;
  return true;
}

void add_pooled(Device device, int64_t delta) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  table()[device].pooled_bytes += delta;
}

void add_reserved(Device device, int64_t delta, int64_t regions_delta) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  auto& s = table()[device];
  s.reserved_bytes += delta;
  s.live_regions += regions_delta;
}

void add_views(Device device, int64_t delta) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  table()[device].live_vtensors += delta;
}

void add_calls(Device device, int64_t maps, int64_t unmaps) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  auto& s = table()[device];
  s.map_calls += maps;
  s.unmap_calls += unmaps;
}

void add_shared(Device device, int64_t delta) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  table()[device].shared_bytes += delta;
}

}  // namespace stats_detail
}  // namespace pvt

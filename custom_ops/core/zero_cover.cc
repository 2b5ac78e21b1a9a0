#include "zero_cover.h"

#include <algorithm>
#include <iterator>
#include <vector>

namespace pvt {

size_t ZeroCover::round_granule(size_t granule, size_t unit) {
  if (unit == 0 || granule < unit) return 0;
  size_t g = unit;
  while (g <= granule / 2) g *= 2;
  return g;
}

Status ZeroCover::map_runs(ZeroMapper& m, uintptr_t addr, size_t bytes) {
  std::vector<std::pair<uintptr_t, size_t>> made;
  for (uintptr_t at = addr, end = addr + bytes; at < end;) {
    // The largest buddy block that starts here and fits (addresses are multiples of the unit).
    size_t len = granule_;
    while (len > unit_ && (at % len != 0 || at + len > end)) len /= 2;
    Status st = m.map_zero(at, len);
    if (st.ok()) {
      try {
        runs_.emplace(at, len);
        made.emplace_back(at, len);
      } catch (const std::bad_alloc&) {
        (void)m.unmap_zero(at, len);
        runs_.erase(at);
        st = Status(Code::kOutOfMemory, "zero cover: host memory ran out");
      }
    }
    if (!st.ok()) {
      for (const auto& r : made) {
        (void)m.unmap_zero(r.first, r.second);
        runs_.erase(r.first);
      }
      return st;
    }
    at += len;
  }
  return Status::Ok();
}

void ZeroCover::set_granule(size_t granule) {
  std::lock_guard<std::mutex> lock(mu_);
  granule_ = round_granule(granule, unit_);
}

size_t ZeroCover::granule() const {
  std::lock_guard<std::mutex> lock(mu_);
  return granule_;
}

Status ZeroCover::cover_reservation(ZeroMapper& m, uintptr_t base, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    reservations_.emplace(base, bytes);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "zero cover: host memory ran out");
  }
  const Status st = map_runs(m, base, bytes);
  if (!st.ok()) reservations_.erase(base);
  return st;
}

Status ZeroCover::uncover(ZeroMapper& m, uintptr_t addr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return catch_bad_alloc("zero cover", [&]() -> Status {
    const uintptr_t end = addr + bytes;
    std::vector<std::pair<uintptr_t, size_t>> removed;  // parts of [addr, end) this call uncovered
    // Runs overlapping [addr, end): the one starting before addr (if it reaches in), then those inside.
    auto it = runs_.upper_bound(addr);
    if (it != runs_.begin() && std::prev(it)->first + std::prev(it)->second > addr) --it;
    while (it != runs_.end() && it->first < end) {
      const uintptr_t run = it->first;
      const size_t len = it->second;
      removed.reserve(removed.size() + 1);  // before anything changes: a throw here changes nothing
      Status st = m.unmap_zero(run, len);
      if (st.ok()) {
        it = runs_.erase(it);
        // What is left of the run on either side of [addr, end) is covered again.
        const bool has_left = run < addr, has_right = run + len > end;
        if (has_left) st = map_runs(m, run, addr - run);
        if (st.ok() && has_right) {
          st = map_runs(m, end, run + len - end);
          if (!st.ok() && has_left) (void)unmap_runs(m, run, addr - run);
        }
        // The whole run back; if even that fails its place stays uncovered.
        if (!st.ok() && m.map_zero(run, len).ok()) runs_.emplace(run, len);
      }
      if (!st.ok()) {
        for (const auto& r : removed) (void)map_runs(m, r.first, r.second);  // as before the call
        return st;
      }
      const uintptr_t lo = std::max(run, addr), hi = std::min(run + len, end);
      removed.emplace_back(lo, hi - lo);
      it = runs_.lower_bound(run + len);  // the next run inside [addr, end), if any (past the pieces)
    }
    return Status::Ok();
  });
}

Status ZeroCover::cover(ZeroMapper& m, uintptr_t addr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto r = reservations_.upper_bound(addr);
  if (r == reservations_.begin() || addr + bytes > std::prev(r)->first + std::prev(r)->second) {
    return Status::Ok();  // a reservation made without the cover
  }
  return map_runs(m, addr, bytes);
}

Status ZeroCover::drop_reservation(ZeroMapper& m, uintptr_t base, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  reservations_.erase(base);
  return unmap_runs(m, base, bytes);
}

Status ZeroCover::unmap_runs(ZeroMapper& m, uintptr_t base, size_t bytes) {
  Status first;
  for (auto it = runs_.lower_bound(base); it != runs_.end() && it->first < base + bytes;) {
    const Status st = m.unmap_zero(it->first, it->second);
    if (st.ok()) {
      it = runs_.erase(it);
    } else {
      if (first.ok()) first = st;
      ++it;
    }
  }
  return first;
}

size_t ZeroCover::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_.size();
}

size_t ZeroCover::covered(uintptr_t addr, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  auto it = runs_.upper_bound(addr);
  if (it != runs_.begin()) --it;
  for (; it != runs_.end() && it->first < addr + bytes; ++it) {
    const uintptr_t lo = std::max(addr, it->first), hi = std::min(addr + bytes, it->first + it->second);
    if (hi > lo) n += hi - lo;
  }
  return n;
}

}  // namespace pvt

#include "region.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "chunk_pool.h"
#include "stats.h"

namespace pvt {

Status Region::create(Device device, size_t reserve_bytes, size_t chunk_bytes,
                      std::unique_ptr<Region>* out) {
  Backend* backend = nullptr;
  PVT_RETURN_IF_ERROR(get_backend(device, &backend));
  return create_on(backend, reserve_bytes, chunk_bytes, out);
}

Status Region::create_on(Backend* backend, size_t reserve_bytes, size_t chunk_bytes,
                         std::unique_ptr<Region>* out) {
  return catch_bad_alloc("reserving a region", [&]() -> Status {
    if (reserve_bytes == 0) return Status(Code::kInvalidArgument, "reservation size must be positive");
    const Device device = backend->device();
    const size_t gran = backend->granularity();
    if (chunk_bytes == 0) chunk_bytes = gran;
    if (chunk_bytes > SIZE_MAX - gran) {
      return Status(Code::kInvalidArgument,
                    "chunk size of " + std::to_string(chunk_bytes) + " bytes overflows the address space");
    }
    chunk_bytes = (chunk_bytes + gran - 1) / gran * gran;
    // Chunks needed, without the overflow of reserve_bytes + chunk_bytes - 1.
    const size_t num_chunks = reserve_bytes / chunk_bytes + (reserve_bytes % chunk_bytes != 0);
    if (num_chunks > SIZE_MAX / chunk_bytes) {
      return Status(Code::kInvalidArgument, "reservation of " + std::to_string(reserve_bytes) +
                                                " bytes overflows the address space");
    }
    void* base = nullptr;
    PVT_RETURN_IF_ERROR(backend->reserve(num_chunks * chunk_bytes, &base));
    std::unique_ptr<Region> region;
    try {
      region.reset(new Region(backend, static_cast<char*>(base), chunk_bytes, num_chunks));
    } catch (const std::bad_alloc&) {
      (void)backend->free_reservation(base, num_chunks * chunk_bytes);
      throw;
    }
    stats_detail::add_reserved(device, static_cast<int64_t>(num_chunks * chunk_bytes), 1);
    *out = std::move(region);
    return Status::Ok();
  });
}

Region::Region(Backend* backend, char* base, size_t chunk_bytes, size_t num_chunks)
    : backend_(backend), base_(base), chunk_bytes_(chunk_bytes), num_chunks_(num_chunks) {}

Region::~Region() {
  // Errors cannot propagate from a destructor: try every chunk; the stats show anything left mapped.
  const bool waited = wait_uses().ok();
  if (waited) {
    for (Pending& p : pending_) (void)retire(p);
    for (auto it = mapped_.begin(); it != mapped_.end();) {
      auto next = std::next(it);
      (void)detach(it);
      it = next;
    }
  }
  for (const auto& use : uses_) backend_->destroy_event(use.second);
  if (waited && backend_->free_reservation(base_, reserved_bytes()).ok()) {
    stats_detail::add_reserved(device(), -static_cast<int64_t>(reserved_bytes()), -1);
  }
}

bool Region::is_mapped(size_t offset, size_t bytes) const {
  if (bytes == 0) return true;
  if (offset + bytes > reserved_bytes() || offset + bytes < offset) return false;
  const size_t first = offset / chunk_bytes_, last = (offset + bytes - 1) / chunk_bytes_;
  // Walk the mapped chunks from `first`: every chunk up to `last` must be there, in order.
  size_t want = first;
  for (auto it = mapped_.lower_bound(first); it != mapped_.end() && it->first == want; ++it) {
    if (want == last) return true;
    ++want;
  }
  return false;
}

Status Region::check_range(size_t offset, size_t bytes, const char* what) const {
  if (offset % chunk_bytes_ != 0 || bytes % chunk_bytes_ != 0) {
    return Status(Code::kInvalidArgument,
                  std::string(what) + ": range [" + std::to_string(offset) + ", +" +
                      std::to_string(bytes) + ") is not aligned to the chunk size " +
                      std::to_string(chunk_bytes_));
  }
  if (offset + bytes > reserved_bytes() || offset + bytes < offset) {
    return Status(Code::kOutOfRange,
                  std::string(what) + ": range [" + std::to_string(offset) + ", +" +
                      std::to_string(bytes) + ") is past the reservation of " +
                      std::to_string(reserved_bytes()) + " bytes");
  }
  return Status::Ok();
}

Status Region::map_range(size_t offset, size_t bytes) {
  return catch_bad_alloc("map_range", [&] { return map_range_impl(offset, bytes); });
}

Status Region::map_range_impl(size_t offset, size_t bytes) {
  PVT_RETURN_IF_ERROR(check_range(offset, bytes, "map_range"));
  const size_t first = offset / chunk_bytes_, last = (offset + bytes) / chunk_bytes_;
  // Pending chunks here first (waiting for them), then whatever else finished meanwhile.
  PVT_RETURN_IF_ERROR(settle(first, last));
  PVT_RETURN_IF_ERROR(collect(false));
  std::vector<size_t> done;
  Status status;
  for (size_t c = first; c < last; ++c) {
    if (mapped_.count(c)) continue;
    PhysChunk* chunk = nullptr;
    status = create_phys(&chunk);
    if (!status.ok()) break;
    status = attach(c, chunk);
    if (!status.ok()) {
      (void)release_phys(chunk);
      break;
    }
    try {
      done.push_back(c);
    } catch (const std::bad_alloc&) {
      // No room to remember the chunk: give it back now, then undo the rest below.
      (void)detach(mapped_.find(c));
      status = Status(Code::kOutOfMemory, "map_range: host memory ran out");
      break;
    }
  }
  if (!status.ok()) {
    // All or nothing: give back what this call mapped. Nothing was written to those chunks yet, so
    // no stream needs waiting for.
    for (size_t c : done) (void)detach(mapped_.find(c));
  }
  return status;
}

Status Region::alias_range(const Region& src, size_t src_offset, size_t dst_offset, size_t bytes) {
  return catch_bad_alloc("alias_range", [&] { return alias_range_impl(src, src_offset, dst_offset, bytes); });
}

Status Region::alias_range_impl(const Region& src, size_t src_offset, size_t dst_offset, size_t bytes) {
  if (src.backend_ != backend_) {
    return Status(Code::kInvalidArgument, "alias_range: the source region is on another backend (" +
                                              src.device().to_string() + ") than the destination (" +
                                              device().to_string() + ")");
  }
  if (src.chunk_bytes_ != chunk_bytes_) {
    return Status(Code::kInvalidArgument, "alias_range: the source's chunk size " +
                                              std::to_string(src.chunk_bytes_) +
                                              " differs from the destination's " +
                                              std::to_string(chunk_bytes_));
  }
  PVT_RETURN_IF_ERROR(src.check_range(src_offset, bytes, "alias_range (source)"));
  PVT_RETURN_IF_ERROR(check_range(dst_offset, bytes, "alias_range (destination)"));
  if (!src.is_mapped(src_offset, bytes)) {
    return Status(Code::kInvalidArgument, "alias_range: the source range [" + std::to_string(src_offset) +
                                              ", +" + std::to_string(bytes) + ") is not wholly mapped");
  }
  const size_t src_first = src_offset / chunk_bytes_;
  const size_t first = dst_offset / chunk_bytes_, count = bytes / chunk_bytes_;
  auto taken = mapped_.lower_bound(first);
  if (taken != mapped_.end() && taken->first < first + count) {
    return Status(Code::kInvalidArgument, "alias_range: destination chunk " +
                                              std::to_string(taken->first) +
                                              " is already mapped (unmap it first)");
  }
  PVT_RETURN_IF_ERROR(settle(first, first + count));
  PVT_RETURN_IF_ERROR(collect(false));
  Status status;
  size_t done = 0;
  for (; done < count; ++done) {
    status = attach(first + done, src.mapped_.find(src_first + done)->second);
    if (!status.ok()) break;
  }
  if (!status.ok()) {
    // All or nothing: unmap the aliases made so far (nothing used them yet). The source still maps
    // each chunk, so none is released.
    for (size_t c = first; c < first + done; ++c) (void)detach(mapped_.find(c));
  }
  return status;
}

Status Region::copy(size_t dst_offset, size_t src_offset, size_t bytes, void* stream) {
  if (!is_mapped(dst_offset, bytes) || !is_mapped(src_offset, bytes)) {
    return catch_bad_alloc("copy", [&] {
      return Status(Code::kInvalidArgument, "copy: [" + std::to_string(src_offset) + ", +" + std::to_string(bytes) +
                                                ") -> [" + std::to_string(dst_offset) + ", +" +
                                                std::to_string(bytes) + ") is not wholly mapped");
    });
  }
  return backend_->copy(base_ + dst_offset, base_ + src_offset, bytes, stream);
}

Status Region::make_private(size_t chunk, void* stream) {
  return catch_bad_alloc("make_private", [&] { return make_private_impl(chunk, stream); });
}

Status Region::make_private_impl(size_t c, void* stream) {
  auto it = mapped_.find(c);
  if (it == mapped_.end()) {
    return Status(Code::kInvalidArgument, "make_private: chunk " + std::to_string(c) + " is not mapped");
  }
  PhysChunk* shared = it->second;
  if (shared->mappings.load() < 2) return Status::Ok();
  char* addr = base_ + c * chunk_bytes_;
  // The copy goes into the new chunk through a scratch mapping: its own place is taken by the
  // shared chunk until the swap below, and the swap must not leave it without its bytes.
  PhysChunk* fresh = nullptr;
  PVT_RETURN_IF_ERROR(create_phys(&fresh));
  void* scratch = nullptr;
  Status st = backend_->reserve(chunk_bytes_, &scratch);
  if (st.ok()) {
    st = backend_->map_chunk(scratch, chunk_bytes_, fresh->handle);
    if (st.ok()) {
      st = backend_->copy(scratch, addr, chunk_bytes_, stream);
      // The copy must be done before its destination mapping goes (a failed enqueue queued nothing).
      if (st.ok()) st = wait_stream(stream);
      const Status unmapped = backend_->unmap_chunk(scratch, chunk_bytes_);
      if (st.ok()) st = unmapped;
    }
    (void)backend_->free_reservation(scratch, chunk_bytes_);
  }
  // Nobody may still read the shared mapping here when it goes.
  if (st.ok()) st = wait_uses();
  if (st.ok()) st = backend_->unmap_chunk(addr, chunk_bytes_);
  if (!st.ok()) {
    (void)release_phys(fresh);
    return st;
  }
  st = backend_->map_chunk(addr, chunk_bytes_, fresh->handle);
  if (!st.ok()) {
    // Put the shared chunk back (its bytes never changed), so the region is as before.
    const Status back = backend_->map_chunk(addr, chunk_bytes_, shared->handle);
    (void)release_phys(fresh);
    if (!back.ok()) {
      // Cannot restore the mapping: forget it, as a failed unmap would leave it.
      mapped_.erase(it);
      physical_stale_ = true;
      if (c < prefix_) prefix_ = c;
      shared->mappings.fetch_sub(1);
      stats_detail::add_shared(device(), -static_cast<int64_t>(chunk_bytes_));
    }
    return st;
  }
  it->second = fresh;
  physical_stale_ = true;
  fresh->mappings.store(1);
  shared->mappings.fetch_sub(1);  // >= 1 left: the other places still map it
  stats_detail::add_shared(device(), -static_cast<int64_t>(chunk_bytes_));
  stats_detail::add_calls(device(), 1, 1);
  return Status::Ok();
}

size_t Region::physical_bytes() const {
  if (!physical_stale_) return physical_;
  // Distinct chunks by sorting one flat vector (a std::set would allocate a node per chunk).
  std::vector<const PhysChunk*> seen;
  seen.reserve(mapped_.size());
  for (const auto& m : mapped_) seen.push_back(m.second);
  std::sort(seen.begin(), seen.end());
  physical_ = static_cast<size_t>(std::unique(seen.begin(), seen.end()) - seen.begin()) * chunk_bytes_;
  physical_stale_ = false;
  return physical_;
}

Status Region::wait_stream(void* stream) {
  EventHandle event = 0;
  PVT_RETURN_IF_ERROR(backend_->record_event(stream, &event));
  if (event == 0) return Status::Ok();
  const Status waited = backend_->wait_event(event);
  backend_->destroy_event(event);
  return waited;
}

const PhysChunk* Region::phys_chunk(size_t chunk) const {
  auto it = mapped_.find(chunk);
  return it == mapped_.end() ? nullptr : it->second;
}

Status Region::create_phys(PhysChunk** out) {
  const int64_t cb = static_cast<int64_t>(chunk_bytes_);
  PhysHandle handle = 0;
  // A pooled chunk first: no create on the map path.
  const bool pooled = pool_take(backend_, chunk_bytes_, &handle);
  // Pooled chunks count against the limit too: when a new chunk would pass it, give the pool back.
  bool counted = stats_detail::try_add_mapped(device(), cb);
  if (!counted && !pooled && memory_stats(device()).pooled_bytes > 0) {
    (void)pool_trim(device());
    counted = stats_detail::try_add_mapped(device(), cb);
  }
  if (!counted) {
    if (pooled && !pool_put(backend_, chunk_bytes_, handle)) (void)backend_->release_chunk(handle, chunk_bytes_);
    const MemoryStats s = memory_stats(device());
    return catch_bad_alloc("mapping a chunk", [&] {
      return Status(Code::kOutOfMemory, "mapping " + std::to_string(chunk_bytes_) + " more bytes on " +
                                            device().to_string() + " would pass the mapped-memory limit of " +
                                            std::to_string(s.mapped_limit) + " bytes (" +
                                            std::to_string(s.mapped_bytes) + " mapped, " +
                                            std::to_string(s.pooled_bytes) + " pooled)");
    });
  }
  if (!pooled) {
    Status created = backend_->create_chunk(chunk_bytes_, &handle);
    if (created.code() == Code::kOutOfMemory && memory_stats(device()).pooled_bytes > 0) {
      // The device is full (cuMemCreate): what the pool holds may be what is missing. Once.
      (void)pool_trim(device());
      created = backend_->create_chunk(chunk_bytes_, &handle);
    }
    if (!created.ok()) {
      stats_detail::add_mapped(device(), -cb);
      return created;
    }
  }
  try {
    *out = new PhysChunk(handle);
  } catch (const std::bad_alloc&) {
    (void)backend_->release_chunk(handle, chunk_bytes_);
    stats_detail::add_mapped(device(), -cb);
    return Status(Code::kOutOfMemory, "mapping a chunk: host memory ran out");
  }
  return Status::Ok();
}

Status Region::release_phys(PhysChunk* chunk) {
  // Into the pool when it has room (the bytes stay as they are, chunk_pool.h), else to the backend.
  // On failure the chunk stays counted (and leaks): its memory is still held.
  if (!pool_put(backend_, chunk_bytes_, chunk->handle)) {
    PVT_RETURN_IF_ERROR(backend_->release_chunk(chunk->handle, chunk_bytes_));
  }
  delete chunk;
  stats_detail::add_mapped(device(), -static_cast<int64_t>(chunk_bytes_));
  return Status::Ok();
}

Status Region::attach(size_t c, PhysChunk* chunk) {
  char* addr = base_ + c * chunk_bytes_;
  PVT_RETURN_IF_ERROR(backend_->map_chunk(addr, chunk_bytes_, chunk->handle));
  try {
    mapped_.emplace(c, chunk);
    physical_stale_ = true;
  } catch (const std::bad_alloc&) {
    (void)backend_->unmap_chunk(addr, chunk_bytes_);
    return Status(Code::kOutOfMemory, "mapping a chunk: host memory ran out");
  }
  if (chunk->mappings.fetch_add(1) > 0) stats_detail::add_shared(device(), static_cast<int64_t>(chunk_bytes_));
  while (prefix_ == c && prefix_ < num_chunks_ && mapped_.count(prefix_)) ++prefix_;
  stats_detail::add_calls(device(), 1, 0);
  return Status::Ok();
}

Status Region::detach(std::map<size_t, PhysChunk*>::iterator it) {
  const size_t c = it->first;
  PhysChunk* chunk = it->second;
  PVT_RETURN_IF_ERROR(backend_->unmap_chunk(base_ + c * chunk_bytes_, chunk_bytes_));
  mapped_.erase(it);
  physical_stale_ = true;
  if (c < prefix_) prefix_ = c;
  return drop_mapping(chunk);
}

Status Region::drop_mapping(PhysChunk* chunk) {
  stats_detail::add_calls(device(), 0, 1);
  if (chunk->mappings.fetch_sub(1) > 1) {
    stats_detail::add_shared(device(), -static_cast<int64_t>(chunk_bytes_));
    return Status::Ok();
  }
  return release_phys(chunk);
}

Status Region::unmap_range(size_t offset, size_t bytes) {
  return catch_bad_alloc("unmap_range", [&] { return unmap_range_impl(offset, bytes); });
}

Status Region::unmap_range_impl(size_t offset, size_t bytes) {
  PVT_RETURN_IF_ERROR(check_range(offset, bytes, "unmap_range"));
  const size_t first = offset / chunk_bytes_, last = (offset + bytes) / chunk_bytes_;
  PVT_RETURN_IF_ERROR(collect(false));
  auto it = mapped_.lower_bound(first);
  if (it == mapped_.end() || it->first >= last) return Status::Ok();  // nothing mapped there
  bool done = false;
  PVT_RETURN_IF_ERROR(uses_done(&done));
  if (done) {
    // O(mapped chunks in the range), however wide the range.
    while (it != mapped_.end() && it->first < last) {
      auto next = std::next(it);
      PVT_RETURN_IF_ERROR(detach(it));
      it = next;
    }
    return Status::Ok();
  }
  // Deferred: everything that can throw first, so a failure changes nothing.
  Pending p;
  p.events.reserve(uses_.size());
  for (const auto& use : uses_) p.events.push_back(use.second);
  p.fences.reserve(counters_.size());
  for (const auto& c : counters_) p.fences.push_back(Fence{c, c->issued()});
  for (auto m = it; m != mapped_.end() && m->first < last; ++m) p.chunks.emplace_back(m->first, m->second);
  pending_.reserve(pending_.size() + 1);
  physical_stale_ = true;
  for (const auto& c : p.chunks) {
    mapped_.erase(c.first);
    if (c.first < prefix_) prefix_ = c.first;
  }
  pending_.push_back(std::move(p));
  return Status::Ok();
}

Status Region::undo_map(size_t offset, size_t bytes) {
  return catch_bad_alloc("undo_map", [&]() -> Status {
    PVT_RETURN_IF_ERROR(check_range(offset, bytes, "undo_map"));
    const size_t last = (offset + bytes) / chunk_bytes_;
    for (auto it = mapped_.lower_bound(offset / chunk_bytes_); it != mapped_.end() && it->first < last;) {
      auto next = std::next(it);
      PVT_RETURN_IF_ERROR(detach(it));
      it = next;
    }
    return Status::Ok();
  });
}

Status Region::uses_done(bool* done) {
  *done = true;
  for (const auto& use : uses_) {
    PVT_RETURN_IF_ERROR(backend_->event_done(use.second, done));
    if (!*done) return Status::Ok();
  }
  for (const auto& c : counters_) {
    if (c->finished() < c->issued()) {
      *done = false;
      return Status::Ok();
    }
  }
  return Status::Ok();
}

namespace {

// Steps finish on the device by themselves (issued steps were released): a host wait that polls.
void wait_steps(const StepCounters& c, uint64_t step) {
  for (int spins = 0; c.finished() < step; ++spins) {
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace

Status Region::pending_done(const Pending& p, bool wait, bool* done) {
  *done = true;
  for (EventHandle e : p.events) {
    PVT_RETURN_IF_ERROR(wait ? backend_->wait_event(e) : backend_->event_done(e, done));
    if (!*done) return Status::Ok();
  }
  for (const Fence& f : p.fences) {
    if (wait) wait_steps(*f.counters, f.step);
    if (!f.done()) {
      *done = false;
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Status Region::use_counters(std::shared_ptr<const StepCounters> counters) {
  if (counters == nullptr) return Status(Code::kInvalidArgument, "use_counters: the step counters are null");
  return catch_bad_alloc("use_counters", [&]() -> Status {
    for (const auto& c : counters_) {
      if (c == counters) return Status::Ok();
    }
    counters_.push_back(std::move(counters));
    return Status::Ok();
  });
}

Status Region::retire(Pending& p) {
  while (!p.chunks.empty()) {
    const auto [c, chunk] = p.chunks.back();
    PVT_RETURN_IF_ERROR(backend_->unmap_chunk(base_ + c * chunk_bytes_, chunk_bytes_));
    p.chunks.pop_back();
    PVT_RETURN_IF_ERROR(drop_mapping(chunk));
  }
  return Status::Ok();
}

Status Region::collect(bool wait) {
  Status first;
  for (Pending& p : pending_) {
    bool done = true;
    PVT_RETURN_IF_ERROR(pending_done(p, wait, &done));
    if (done) {
      const Status st = retire(p);
      if (first.ok()) first = st;
    }
  }
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.chunks.empty(); }),
                 pending_.end());
  counters_.erase(std::remove_if(counters_.begin(), counters_.end(), [](const auto& c) { return c->retired(); }),
                  counters_.end());
  return first;
}

Status Region::settle(size_t first, size_t last) {
  Status status;
  for (Pending& p : pending_) {
    bool overlaps = false;
    for (const auto& c : p.chunks) overlaps = overlaps || (c.first >= first && c.first < last);
    if (!overlaps) continue;
    bool done = false;
    PVT_RETURN_IF_ERROR(pending_done(p, true, &done));
    status = retire(p);
    if (!status.ok()) break;
  }
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.chunks.empty(); }),
                 pending_.end());
  return status;
}

size_t Region::pending_chunks() const {
  size_t n = 0;
  for (const Pending& p : pending_) n += p.chunks.size();
  return n;
}

Status Region::ensure_mapped(size_t end) {
  if (end > reserved_bytes()) {
    return catch_bad_alloc("ensure_mapped", [&] {
      return Status(Code::kOutOfRange, "ensure_mapped: " + std::to_string(end) +
                                           " bytes is past the reservation of " +
                                           std::to_string(reserved_bytes()) + " bytes");
    });
  }
  const size_t need = round_up(end);
  if (need <= prefix_ * chunk_bytes_) return Status::Ok();  // the common decode step: nothing to map
  return map_range(prefix_ * chunk_bytes_, need - prefix_ * chunk_bytes_);
}

Status Region::release_from(size_t end) {
  const size_t from = round_up(end);
  if (mapped_.empty()) return Status::Ok();
  const size_t high = (mapped_.rbegin()->first + 1) * chunk_bytes_;
  if (from >= high) return Status::Ok();  // nothing mapped past `end`
  return unmap_range(from, high - from);
}

Status Region::record_use(void* stream) {
  return catch_bad_alloc("record_use", [&]() -> Status {
    for (auto& use : uses_) {
      if (use.first == stream) return backend_->record_event(stream, &use.second);
    }
    EventHandle event = 0;
    PVT_RETURN_IF_ERROR(backend_->record_event(stream, &event));
    if (event == 0) return Status::Ok();  // the host: nothing will ever need waiting for
    try {
      uses_.emplace_back(stream, event);
    } catch (const std::bad_alloc&) {
      // Cannot remember it: wait now, so no later unmap can overtake this stream's work.
      const Status waited = backend_->wait_event(event);
      backend_->destroy_event(event);
      return waited;
    }
    return Status::Ok();
  });
}

Status Region::use_event(void* stream, EventHandle* event) {
  *event = 0;
  PVT_RETURN_IF_ERROR(record_use(stream));
  for (const auto& use : uses_) {
    if (use.first == stream) *event = use.second;
  }
  if (*event == 0 && device().kind != DeviceKind::kHost) {
    // record_use waited instead of remembering the stream (no host memory): nothing to hand out.
    return Status(Code::kOutOfMemory, "use_event: no host memory to remember the stream's event");
  }
  return Status::Ok();
}

Status Region::wait_uses() {
  for (const auto& use : uses_) PVT_RETURN_IF_ERROR(backend_->wait_event(use.second));
  for (const auto& c : counters_) wait_steps(*c, c->issued());
  return Status::Ok();
}

}  // namespace pvt

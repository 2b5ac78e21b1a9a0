#include "region.h"

#include <string>

#include "stats.h"

namespace pvt {

Status Region::create(Device device, size_t reserve_bytes, size_t chunk_bytes,
                      std::unique_ptr<Region>* out) {
  if (reserve_bytes == 0) return Status(Code::kInvalidArgument, "reservation size must be positive");
  Backend* backend = nullptr;
  PVT_RETURN_IF_ERROR(get_backend(device, &backend));
  const size_t gran = backend->granularity();
  if (chunk_bytes == 0) chunk_bytes = gran;
  chunk_bytes = (chunk_bytes + gran - 1) / gran * gran;
  const size_t num_chunks = (reserve_bytes + chunk_bytes - 1) / chunk_bytes;
  if (num_chunks > (SIZE_MAX / chunk_bytes)) {
    return Status(Code::kInvalidArgument, "reservation of " + std::to_string(reserve_bytes) +
                                              " bytes overflows the address space");
  }
  void* base = nullptr;
  PVT_RETURN_IF_ERROR(backend->reserve(num_chunks * chunk_bytes, &base));
  stats_detail::add_reserved(device, static_cast<int64_t>(num_chunks * chunk_bytes), 1);
  out->reset(new Region(backend, static_cast<char*>(base), chunk_bytes, num_chunks));
  return Status::Ok();
}

Region::Region(Backend* backend, char* base, size_t chunk_bytes, size_t num_chunks)
    : backend_(backend),
      base_(base),
      chunk_bytes_(chunk_bytes),
      mapped_(num_chunks, false),
      handles_(num_chunks, 0) {}

Region::~Region() {
  // Errors cannot propagate from a destructor: try every chunk; the stats show anything left mapped.
  for (size_t c = 0; c < high_; ++c) {
    if (mapped_[c]) (void)unmap_range(c * chunk_bytes_, chunk_bytes_);
  }
  if (backend_->free_reservation(base_, reserved_bytes()).ok()) {
    stats_detail::add_reserved(device(), -static_cast<int64_t>(reserved_bytes()), -1);
  }
}

bool Region::is_mapped(size_t offset, size_t bytes) const {
  if (bytes == 0) return true;
  if (offset + bytes > reserved_bytes() || offset + bytes < offset) return false;
  for (size_t c = offset / chunk_bytes_; c <= (offset + bytes - 1) / chunk_bytes_; ++c) {
    if (!mapped_[c]) return false;
  }
  return true;
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

void Region::mark(size_t chunk, bool mapped, PhysHandle handle) {
  mapped_[chunk] = mapped;
  handles_[chunk] = handle;
  if (mapped) {
    ++num_mapped_;
    if (chunk + 1 > high_) high_ = chunk + 1;
    while (prefix_ < mapped_.size() && mapped_[prefix_]) ++prefix_;
  } else {
    --num_mapped_;
    if (chunk < prefix_) prefix_ = chunk;
    while (high_ > 0 && !mapped_[high_ - 1]) --high_;
  }
}

Status Region::map_range(size_t offset, size_t bytes) {
  PVT_RETURN_IF_ERROR(check_range(offset, bytes, "map_range"));
  const size_t first = offset / chunk_bytes_, last = (offset + bytes) / chunk_bytes_;
  std::vector<size_t> done;
  Status status;
  for (size_t c = first; c < last && status.ok(); ++c) {
    if (mapped_[c]) continue;
    if (!stats_detail::try_add_mapped(device(), static_cast<int64_t>(chunk_bytes_))) {
      const MemoryStats s = memory_stats(device());
      status = Status(Code::kOutOfMemory,
                      "mapping " + std::to_string(chunk_bytes_) + " more bytes on " +
                          device().to_string() + " would pass the mapped-memory limit of " +
                          std::to_string(s.mapped_limit) + " bytes (" +
                          std::to_string(s.mapped_bytes) + " mapped)");
      break;
    }
    PhysHandle handle = 0;
    status = backend_->map(base_ + c * chunk_bytes_, chunk_bytes_, &handle);
    if (!status.ok()) {
      stats_detail::add_mapped(device(), -static_cast<int64_t>(chunk_bytes_));
      break;
    }
    mark(c, true, handle);
    stats_detail::add_calls(device(), 1, 0);
    done.push_back(c);
  }
  if (!status.ok()) {
    // All or nothing: give back what this call mapped. Nothing was written to those chunks yet.
    for (size_t c : done) {
      if (backend_->unmap(base_ + c * chunk_bytes_, chunk_bytes_, handles_[c], last_stream_).ok()) {
        mark(c, false, 0);
        stats_detail::add_mapped(device(), -static_cast<int64_t>(chunk_bytes_));
        stats_detail::add_calls(device(), 0, 1);
      }
    }
  }
  return status;
}

Status Region::unmap_range(size_t offset, size_t bytes) {
  PVT_RETURN_IF_ERROR(check_range(offset, bytes, "unmap_range"));
  const size_t first = offset / chunk_bytes_, last = (offset + bytes) / chunk_bytes_;
  for (size_t c = first; c < last; ++c) {
    if (!mapped_[c]) continue;
    PVT_RETURN_IF_ERROR(backend_->unmap(base_ + c * chunk_bytes_, chunk_bytes_, handles_[c], last_stream_));
    mark(c, false, 0);
    stats_detail::add_mapped(device(), -static_cast<int64_t>(chunk_bytes_));
    stats_detail::add_calls(device(), 0, 1);
  }
  return Status::Ok();
}

Status Region::ensure_mapped(size_t end) {
  if (end > reserved_bytes()) {
    return Status(Code::kOutOfRange, "ensure_mapped: " + std::to_string(end) +
                                         " bytes is past the reservation of " +
                                         std::to_string(reserved_bytes()) + " bytes");
  }
  const size_t need = round_up(end);
  if (need <= prefix_ * chunk_bytes_) return Status::Ok();  // the common decode step: nothing to map
  return map_range(prefix_ * chunk_bytes_, need - prefix_ * chunk_bytes_);
}

Status Region::release_from(size_t end) {
  const size_t from = round_up(end);
  if (from >= high_ * chunk_bytes_) return Status::Ok();  // nothing mapped past `end`
  return unmap_range(from, high_ * chunk_bytes_ - from);
}

}  // namespace pvt

// Region: one reserved virtual range cut into equal chunks, any of which can be mapped or released.
// Ranges are chunk-aligned byte offsets from base(); the region remembers which chunks are mapped, so
// callers may grow a tail (the KV cache today) or manage independent sub-ranges (one per sequence).
// Not thread-safe by itself: SeqMajorCache serialises access with its own mutex.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "backend.h"

namespace pvt {

class Region {
 public:
  // `reserve_bytes` and `chunk_bytes` are rounded up: chunk to the backend granularity, the
  // reservation to a whole number of chunks.
  static Status create(Device device, size_t reserve_bytes, size_t chunk_bytes,
                       std::unique_ptr<Region>* out);
  ~Region();  // unmaps every mapped chunk (synchronising last_stream), then frees the range
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  Device device() const { return backend_->device(); }
  char* base() const { return base_; }
  size_t reserved_bytes() const { return chunk_bytes_ * mapped_.size(); }
  size_t chunk_bytes() const { return chunk_bytes_; }
  size_t num_chunks() const { return mapped_.size(); }
  size_t mapped_bytes() const { return chunk_bytes_ * num_mapped_; }
  bool chunk_mapped(size_t chunk) const { return mapped_[chunk]; }
  // True when every byte of [offset, offset+bytes) lies in a mapped chunk.
  bool is_mapped(size_t offset, size_t bytes) const;

  // Map every not-yet-mapped chunk in [offset, offset+bytes) (both chunk-aligned). All or nothing:
  // on failure the chunks this call mapped are released again and the region is as before.
  Status map_range(size_t offset, size_t bytes);
  // Release every mapped chunk in [offset, offset+bytes) (both chunk-aligned).
  Status unmap_range(size_t offset, size_t bytes);
  // Convenience for a growing tail: map [0, round_up(end)) / release everything from round_up(end).
  Status ensure_mapped(size_t end);
  Status release_from(size_t end);

  // Stream that last queued work on this region's memory; unmapping waits for it (see Backend::unmap).
  void set_stream(void* stream) { last_stream_ = stream; }
  size_t round_up(size_t bytes) const { return (bytes + chunk_bytes_ - 1) / chunk_bytes_ * chunk_bytes_; }

 private:
  Region(Backend* backend, char* base, size_t chunk_bytes, size_t num_chunks);
  Status check_range(size_t offset, size_t bytes, const char* what) const;
  void mark(size_t chunk, bool mapped, PhysHandle handle);

  Backend* backend_;
  char* base_;
  size_t chunk_bytes_;
  std::vector<bool> mapped_;
  std::vector<PhysHandle> handles_;
  size_t num_mapped_ = 0;
  // Chunks [0, prefix_) are all mapped and none at or past high_ is: a growing tail costs
  // O(new chunks) per call instead of a scan of the whole reservation.
  size_t prefix_ = 0;
  size_t high_ = 0;
  void* last_stream_ = nullptr;
};

}  // namespace pvt

#include "seq_cache.h"

#include <cstdint>
#include <iterator>
#include <string>

#include "cache_registry.h"
#include "stats.h"

namespace pvt {

namespace {
using Registry = CacheRegistry<SeqMajorCache>;
}  // namespace

Status SeqMajorCache::create(Device device, const CacheShape& shape, const CacheConfig& config,
                             std::shared_ptr<SeqMajorCache>* out) {
  return catch_bad_alloc("creating a cache", [&] { return create_impl(device, shape, config, out); });
}

Status SeqMajorCache::create_impl(Device device, const CacheShape& shape, const CacheConfig& config,
                                  std::shared_ptr<SeqMajorCache>* out) {
  if (shape.batch <= 0 || shape.heads <= 0 || shape.head_dim <= 0) {
    return Status(Code::kInvalidArgument,
                  "cache shape must be positive, got batch=" + std::to_string(shape.batch) +
                      " heads=" + std::to_string(shape.heads) +
                      " head_dim=" + std::to_string(shape.head_dim));
  }
  if (shape.elem_bytes != 1 && shape.elem_bytes != 2 && shape.elem_bytes != 4) {
    return Status(Code::kInvalidArgument,
                  "element size must be 1, 2 or 4 bytes, got " + std::to_string(shape.elem_bytes));
  }
  if (config.capacity_tokens <= 0) {
    return Status(Code::kInvalidArgument, "capacity must be at least one token, got " +
                                              std::to_string(config.capacity_tokens));
  }
  const bool token_fits = shape.batch <= INT64_MAX / shape.heads / shape.head_dim / shape.elem_bytes;
  const int64_t token_bytes = token_fits ? shape.token_bytes() : 0;
  if (!token_fits ||
      static_cast<uint64_t>(config.capacity_tokens) > SIZE_MAX / static_cast<uint64_t>(token_bytes)) {
    return Status(Code::kInvalidArgument,
                  "a cache of " + std::to_string(config.capacity_tokens) + " tokens of batch=" +
                      std::to_string(shape.batch) + " heads=" + std::to_string(shape.heads) +
                      " head_dim=" + std::to_string(shape.head_dim) +
                      " overflows the address space (lower max_seq_len)");
  }
  const size_t bytes = static_cast<size_t>(config.capacity_tokens) * static_cast<size_t>(token_bytes);
  std::unique_ptr<Region> region;
  PVT_RETURN_IF_ERROR(Region::create(
      device, bytes, config.chunk_bytes ? config.chunk_bytes : kDefaultChunkBytes, &region));
  // The reservation is rounded up to whole chunks, but the capacity stays what was asked for, so
  // "past the reservation" means past max_seq_len, whatever the chunk size.
  std::shared_ptr<SeqMajorCache> cache(new SeqMajorCache(shape, config.capacity_tokens, std::move(region)));
  Registry::add(cache);  // on bad_alloc `cache` dies here and frees the region
  *out = std::move(cache);
  return Status::Ok();
}

SeqMajorCache::~SeqMajorCache() { Registry::remove(region_->base()); }

std::shared_ptr<SeqMajorCache> SeqMajorCache::find(const void* ptr) { return Registry::find(ptr); }

SeqMajorCache::SeqMajorCache(CacheShape shape, int64_t capacity_tokens, std::unique_ptr<Region> region)
    : shape_(shape), capacity_tokens_(capacity_tokens), region_(std::move(region)) {}

size_t SeqMajorCache::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return region_->mapped_bytes();
}

int64_t SeqMajorCache::longest_locked() const {
  return views_.empty() ? 0 : views_.rbegin()->first;
}

int64_t SeqMajorCache::longest_view() const {
  std::lock_guard<std::mutex> lock(mu_);
  return longest_locked();
}

int64_t SeqMajorCache::live_views() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& kv : views_) n += kv.second;
  return n;
}

Status SeqMajorCache::reserve_locked(int64_t end) {
  if (end < 0 || end > capacity_tokens_) {
    return Status(Code::kOutOfRange,
                  "cache needs " + std::to_string(end) + " tokens but its reservation holds " +
                      std::to_string(capacity_tokens_) +
                      " (raise max_seq_len when the cache is created)");
  }
  return region_->ensure_mapped(static_cast<size_t>(end) * shape_.token_bytes());
}

Status SeqMajorCache::reserve_tokens(int64_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  return reserve_locked(end);
}

Status SeqMajorCache::record_use(void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return region_->record_use(stream);
}

bool SeqMajorCache::write_allowed(int64_t pos) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pos >= longest_locked();
}

Status SeqMajorCache::begin_append(int64_t pos, int64_t count) {
  return catch_bad_alloc("begin_append", [&]() -> Status {
    if (pos < 0 || count <= 0 || count > INT64_MAX - pos) {
      return Status(Code::kInvalidArgument, "append of " + std::to_string(count) +
                                                " tokens at position " + std::to_string(pos));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (pos < longest_locked()) {
      return Status(Code::kConflict,
                    "position " + std::to_string(pos) + " is seen by a live view of length " +
                        std::to_string(longest_locked()) + "; the caller must copy first");
    }
    const bool had_view = views_.count(pos + count) != 0;
    PVT_RETURN_IF_ERROR(reserve_locked(pos + count));
    try {
      views_[pos + count] += 1;
    } catch (const std::bad_alloc&) {
      // Nothing registered: give back what this call mapped past the longest live view.
      if (!had_view) (void)region_->release_from(static_cast<size_t>(longest_locked()) * shape_.token_bytes());
      throw;
    }
    stats_detail::add_views(device(), 1);
    return Status::Ok();
  });
}

Status SeqMajorCache::add_view(int64_t length) {
  return catch_bad_alloc("add_view", [&] {
    std::lock_guard<std::mutex> lock(mu_);
    views_[length] += 1;
    stats_detail::add_views(device(), 1);
    return Status::Ok();
  });
}

void SeqMajorCache::remove_view(int64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = views_.find(length);
  if (it == views_.end()) return;  // unbalanced call: nothing to do, never unmap on a guess
  if (--it->second == 0) views_.erase(it);
  stats_detail::add_views(device(), -1);
  // Chunks past the longest live view hold nothing any tensor can see; give them back. Failure
  // only leaves memory mapped (visible in the stats), never a view pointing at unmapped memory.
  (void)region_->release_from(static_cast<size_t>(longest_locked()) * shape_.token_bytes());
}

}  // namespace pvt

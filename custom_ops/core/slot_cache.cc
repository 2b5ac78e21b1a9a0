#include "slot_cache.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <string>

#include "cache_registry.h"
#include "checked_math.h"
#include "seq_cache.h"
#include "stats.h"

namespace pvt {

namespace {
using Registry = CacheRegistry<SlotCache>;
}  // namespace

Status SlotCache::create(Device device, const SlotCacheShape& shape, size_t chunk_bytes,
                         std::shared_ptr<SlotCache>* out) {
  if (shape.num_slots <= 0 || shape.max_seq_len <= 0 || shape.row_bytes <= 0) {
    return Status(Code::kInvalidArgument,
                  "slot cache shape must be positive, got num_slots=" + std::to_string(shape.num_slots) +
                      " max_seq_len=" + std::to_string(shape.max_seq_len) +
                      " row_bytes=" + std::to_string(shape.row_bytes));
  }
  // mapped_tokens are int32 (what the kernels read). Every byte offset inside the cache is at most
  // its total size, so once that fits int64 (and size_t) no later product can wrap.
  int64_t total = 0;
  if (shape.max_seq_len > std::numeric_limits<int32_t>::max() ||
      !checked_product({shape.num_slots, shape.max_seq_len, shape.row_bytes}, &total) ||
      static_cast<uint64_t>(total) > SIZE_MAX) {
    return Status(Code::kInvalidArgument, "slot cache of " + std::to_string(shape.num_slots) + " x " +
                                              std::to_string(shape.max_seq_len) + " rows of " +
                                              std::to_string(shape.row_bytes) +
                                              " bytes is too large (its size in bytes does not fit in 64 bits"
                                              " or max_seq_len passes 2^31 - 1)");
  }
  return catch_bad_alloc("creating a slot cache", [&]() -> Status {
    std::unique_ptr<Region> region;
    PVT_RETURN_IF_ERROR(Region::create(device, static_cast<size_t>(total),
                                       chunk_bytes ? chunk_bytes : kDefaultChunkBytes, &region));
    std::shared_ptr<SlotCache> cache(new SlotCache(shape, std::move(region)));
    stats_detail::add_views(device, 1);  // the cache tensor: one live VTensor (the destructor undoes it)
    Registry::add(cache);  // on bad_alloc `cache` dies here and frees the region
    *out = std::move(cache);
    return Status::Ok();
  });
}

SlotCache::SlotCache(SlotCacheShape shape, std::unique_ptr<Region> region)
    : shape_(shape), region_(std::move(region)), mapped_(static_cast<size_t>(shape.num_slots), 0) {}

SlotCache::~SlotCache() {
  Registry::remove(region_->base());
  stats_detail::add_views(device(), -1);
}

std::shared_ptr<SlotCache> SlotCache::find(const void* ptr) { return Registry::find(ptr); }

size_t SlotCache::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return region_->mapped_bytes();
}

int32_t SlotCache::mapped_tokens(int64_t slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slot >= 0 && slot < shape_.num_slots ? mapped_[static_cast<size_t>(slot)] : 0;
}

std::vector<int32_t> SlotCache::mapped_tokens_all(uint64_t* version) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (version) *version = version_;
  return mapped_;
}

std::shared_ptr<void> SlotCache::attachment() const {
  std::lock_guard<std::mutex> lock(mu_);
  return attachment_;
}

void SlotCache::set_attachment(std::shared_ptr<void> a) {
  std::lock_guard<std::mutex> lock(mu_);
  attachment_ = std::move(a);
}

Status SlotCache::check_slot(int64_t slot) const {
  if (slot < 0 || slot >= shape_.num_slots) {
    return Status(Code::kInvalidArgument, "slot " + std::to_string(slot) + " is out of range [0, " +
                                              std::to_string(shape_.num_slots) + ")");
  }
  return Status::Ok();
}

Status SlotCache::reserve(int64_t slot, int64_t tokens, void* /*stream: mapping new chunks waits for no work*/) {
  return catch_bad_alloc("reserve", [&]() -> Status {
    PVT_RETURN_IF_ERROR(check_slot(slot));
    if (tokens < 0) {
      return Status(Code::kInvalidArgument, "tokens must be in [0, max_seq_len=" +
                                                std::to_string(shape_.max_seq_len) + "], got " +
                                                std::to_string(tokens));
    }
    if (tokens > shape_.max_seq_len) {
      return Status(Code::kOutOfRange, "slot " + std::to_string(slot) + ": " + std::to_string(tokens) +
                                           " tokens is past max_seq_len=" + std::to_string(shape_.max_seq_len) +
                                           " (the slot holds at most max_seq_len=" +
                                           std::to_string(shape_.max_seq_len) + ")");
    }
    // Shared: reserve only adds mappings, so ops holding the cache may go on meanwhile.
    std::shared_lock<std::shared_mutex> use(use_mu_);
    std::lock_guard<std::mutex> lock(mu_);
    int32_t& mapped = mapped_[static_cast<size_t>(slot)];
    if (tokens <= mapped) return Status::Ok();
    const size_t cb = region_->chunk_bytes();
    const size_t begin = static_cast<size_t>(slot * shape_.slot_bytes() + mapped * shape_.row_bytes);
    const size_t end = static_cast<size_t>(slot * shape_.slot_bytes() + tokens * shape_.row_bytes);
    const size_t first = begin / cb * cb;
    PVT_RETURN_IF_ERROR(region_->map_range(first, region_->round_up(end) - first));
    mapped = static_cast<int32_t>(tokens);
    ++version_;
    return Status::Ok();
  });
}

bool SlotCache::chunk_needed_by_other(size_t c, int64_t slot) const {
  const int64_t cb = static_cast<int64_t>(region_->chunk_bytes());
  const int64_t lo = static_cast<int64_t>(c) * cb, hi = lo + cb;  // chunk bytes [lo, hi)
  const int64_t sb = shape_.slot_bytes();
  for (int64_t s = lo / sb; s < shape_.num_slots && s * sb < hi; ++s) {
    if (s == slot) continue;
    const int64_t used_end = s * sb + mapped_[static_cast<size_t>(s)] * shape_.row_bytes;
    if (mapped_[static_cast<size_t>(s)] > 0 && used_end > lo && s * sb < hi) return true;
  }
  return false;
}

Status SlotCache::release(int64_t slot, void* stream) {
  PVT_RETURN_IF_ERROR(check_slot(slot));
  // Exclusive: waits until no op holds the cache (SlotCacheHold), so none is between its check of
  // mapped_tokens and its last access of the memory unmapped below.
  std::unique_lock<std::shared_mutex> use(use_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  int32_t& mapped = mapped_[static_cast<size_t>(slot)];
  if (mapped == 0) return Status::Ok();
  // Work the caller queued on `stream` may still read the slot: the unmaps below wait for it, as
  // for every stream the ops recorded (record_use).
  PVT_RETURN_IF_ERROR(region_->record_use(stream));
  const size_t cb = region_->chunk_bytes();
  const size_t begin = static_cast<size_t>(slot * shape_.slot_bytes());
  const size_t end = begin + static_cast<size_t>(mapped) * static_cast<size_t>(shape_.row_bytes);
  // From here on the slot is not readable, even if an unmap below fails (memory stays mapped then,
  // visible in the stats, but no kernel reads it).
  mapped = 0;
  ++version_;
  for (size_t c = begin / cb; c * cb < end; ++c) {
    if (!region_->chunk_mapped(c) || chunk_needed_by_other(c, slot)) continue;
    PVT_RETURN_IF_ERROR(region_->unmap_range(c * cb, cb));
  }
  return Status::Ok();
}

Status SlotCache::record_use(void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return region_->record_use(stream);
}

SlotCacheHold::SlotCacheHold(const SlotCache& a, const SlotCache* b) {
  const SlotCache* lo = &a;
  const SlotCache* hi = b == &a ? nullptr : b;
  if (hi != nullptr && std::less<const SlotCache*>()(hi, lo)) std::swap(lo, hi);
  first_ = std::shared_lock<std::shared_mutex>(lo->use_mu_);
  if (hi != nullptr) second_ = std::shared_lock<std::shared_mutex>(hi->use_mu_);
}

}  // namespace pvt

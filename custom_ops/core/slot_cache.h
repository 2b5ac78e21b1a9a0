// SlotCache: one reserved range holding `num_slots` slots of `max_seq_len` token rows each,
// batch-major (slot s, token t at byte (s * max_seq_len + t) * row_bytes): the flash-attn k_cache
// layout, and the model-wide "token rows that hold every layer" layout (docs/SLOT_CACHE.md).
//
// Each slot is mapped on demand up to its own length, by the host, ahead of the step that needs it
// (reserve); release gives a slot's memory back. Slots are not chunk-aligned: a chunk at the border
// of two slots is mapped while either needs it and released when neither does, so mapped memory
// follows the sum of the slots' lengths (plus at most one chunk per slot).
//
// mapped_tokens(slot) is the number of leading rows of the slot the cache guarantees mapped: the
// kernels check every read and write against it (kv_mapped in decode_attention.h), so a caller that
// did not reserve gets an error, never a fault. All public methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "region.h"

namespace pvt {

struct SlotCacheShape {
  int64_t num_slots = 0;
  int64_t max_seq_len = 0;
  int64_t row_bytes = 0;  // bytes of one token row of one slot ([H, D] or [L, 2, Hkv, D] elements)
  int64_t slot_bytes() const { return max_seq_len * row_bytes; }
};

class SlotCache {
 public:
  // chunk_bytes 0: kDefaultChunkBytes (seq_cache.h); rounded up to the backend granularity.
  static Status create(Device device, const SlotCacheShape& shape, size_t chunk_bytes,
                       std::shared_ptr<SlotCache>* out);
  ~SlotCache();
  SlotCache(const SlotCache&) = delete;
  SlotCache& operator=(const SlotCache&) = delete;

  Device device() const { return region_->device(); }
  const SlotCacheShape& shape() const { return shape_; }
  char* data() const { return region_->base(); }
  size_t chunk_bytes() const { return region_->chunk_bytes(); }
  size_t reserved_bytes() const { return region_->reserved_bytes(); }
  size_t mapped_bytes() const;
  int32_t mapped_tokens(int64_t slot) const;
  // A copy of every slot's mapped_tokens, and a counter that changes whenever any of them does
  // (the adapter keeps a device copy and refreshes it only when the version moved).
  std::vector<int32_t> mapped_tokens_all(uint64_t* version) const;

  // Map the chunks covering rows [0, tokens) of `slot` (those already mapped stay). kOutOfRange for a
  // bad slot or tokens > max_seq_len, kOutOfMemory when memory (or the limit) runs out; all or
  // nothing. Never lowers mapped_tokens.
  Status reserve(int64_t slot, int64_t tokens, void* stream);
  // Unmap the slot's chunks that no other slot needs; mapped_tokens(slot) becomes 0. `stream` is
  // synchronised first (work queued on it may still read the slot).
  Status release(int64_t slot, void* stream);

  // Work queued on `stream` may read or write this cache: a later release waits for it
  // (Region::record_use). The ops call it after queuing their kernels.
  Status record_use(void* stream);

  // The live slot cache whose reservation contains `ptr`, or null.
  static std::shared_ptr<SlotCache> find(const void* ptr);

  // Opaque per-cache state an adapter attaches (device copies of mapped_tokens, the error flag);
  // destroyed with the cache.
  std::shared_ptr<void> attachment() const;
  void set_attachment(std::shared_ptr<void> a);

 private:
  SlotCache(SlotCacheShape shape, std::unique_ptr<Region> region);
  Status check_slot(int64_t slot, const char* what) const;
  // True when a slot other than `slot` has mapped rows inside chunk `c`.
  bool chunk_needed_by_other(size_t c, int64_t slot) const;

  const SlotCacheShape shape_;
  std::unique_ptr<Region> region_;
  mutable std::mutex mu_;
  std::vector<int32_t> mapped_;
  uint64_t version_ = 0;
  std::shared_ptr<void> attachment_;
};

}  // namespace pvt

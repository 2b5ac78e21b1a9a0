// SeqMajorCache: a KV cache of logical shape [batch, seq, heads, head_dim] stored seq-major, i.e. as a
// contiguous [capacity, batch, heads, head_dim] array in one Region, so the tokens at one position for
// the whole batch are one contiguous write.
//
// Several tensors ("views") may see the same cache, each with its own length: the output of every
// append, the input it came from, a truncated view. The cache records the length of each live view
// and enforces the two safety rules the adapter relies on:
//   * write_allowed(pos): a write at token position pos is in place only when no live view sees pos,
//     i.e. pos >= longest live view. Otherwise the caller must copy (copy-on-write), so data another
//     live tensor sees is never overwritten.
//   * memory is released only past the longest live view, so no live tensor points at unmapped memory.
// All public methods are thread-safe.
#pragma once

#include <cstdint>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "region.h"

namespace pvt {

struct CacheShape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t elem_bytes = 0;  // 1 (8-bit codes), 2 (float16, bfloat16) or 4 (float32)
  int64_t token_bytes() const { return batch * heads * head_dim * elem_bytes; }
};

struct CacheConfig {
  int64_t capacity_tokens = 0;  // reservation = capacity_tokens * token_bytes, rounded up to chunks
  size_t chunk_bytes = 0;       // 0: default_chunk_bytes(); rounded up to the backend granularity
};

// Defaults, documented in README: chunk 2 MiB (the CUDA granularity on current GPUs), capacity the
// larger of max_seq_len and what the first append needs.
constexpr size_t kDefaultChunkBytes = size_t(2) << 20;
constexpr int64_t kDefaultMaxSeqLen = 4096;

class SeqMajorCache {
 public:
  static Status create(Device device, const CacheShape& shape, const CacheConfig& config,
                       std::shared_ptr<SeqMajorCache>* out);

  Device device() const { return region_->device(); }
  const CacheShape& shape() const { return shape_; }
  int64_t capacity_tokens() const { return capacity_tokens_; }
  char* data() const { return region_->base(); }
  size_t chunk_bytes() const { return region_->chunk_bytes(); }
  size_t reserved_bytes() const { return region_->reserved_bytes(); }
  size_t mapped_bytes() const;
  int64_t longest_view() const;
  int64_t live_views() const;

  // Make tokens [0, end) writable. kOutOfRange past capacity, kOutOfMemory when physical memory (or
  // the configured limit, or host memory for the bookkeeping) runs out; on error nothing changed.
  Status reserve_tokens(int64_t end);
  // True when writing at `pos` overwrites nothing a live view sees.
  bool write_allowed(int64_t pos) const;
  // Atomically: check write_allowed(pos) (kConflict if not), reserve [0, pos+count), register a
  // view of length pos+count. On error nothing changed. The caller then queues the write, and
  // then calls record_use with the stream it queued it on.
  Status begin_append(int64_t pos, int64_t count);
  // Work queued on `stream` so far reads or writes this cache: memory is released only after it
  // has finished (Region::record_use). Every writer and every reader (attention) calls it after
  // queuing its kernels; a no-op on the host.
  Status record_use(void* stream);
  // Host bytes written into this cache by append kernels are counted per device in the stats
  // (MemoryStats::bytes_written); the adapter reports each write it queues.

  // The live cache whose reservation contains `ptr`, or null. Thread-safe; used by is_vtensor().
  static std::shared_ptr<SeqMajorCache> find(const void* ptr);
  ~SeqMajorCache();

  // View bookkeeping. add_view is for views created without an append (migration, truncate);
  // kOutOfMemory (and nothing registered) when host memory runs out.
  Status add_view(int64_t length);
  // Drops one view of `length`; releases the chunks past the new longest view (after waiting for
  // every stream that used the cache). Never fails: a failed release leaves memory mapped (visible
  // in the stats), never a view over unmapped memory.
  void remove_view(int64_t length);

 private:
  SeqMajorCache(CacheShape shape, int64_t capacity_tokens, std::unique_ptr<Region> region);
  static Status create_impl(Device device, const CacheShape& shape, const CacheConfig& config,
                            std::shared_ptr<SeqMajorCache>* out);
  Status reserve_locked(int64_t end);
  int64_t longest_locked() const;

  const CacheShape shape_;
  const int64_t capacity_tokens_;
  std::unique_ptr<Region> region_;
  mutable std::mutex mu_;
  std::map<int64_t, int64_t> views_;  // length -> number of live views of that length
};

}  // namespace pvt

#include "slot_cache.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
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
  Backend* backend = nullptr;
  PVT_RETURN_IF_ERROR(get_backend(device, &backend));
  return create_on(backend, shape, chunk_bytes, out);
}

namespace {

// Rows per slot so that slot_rows * row_bytes is a multiple of chunk_bytes (every slot then starts
// on a chunk): max_seq_len rounded up to a multiple of chunk_bytes / gcd(chunk_bytes, row_bytes).
// False when that passes int64 (or int32: the kernels index rows as int32).
bool aligned_rows(int64_t max_seq_len, int64_t row_bytes, int64_t chunk_bytes, int64_t* rows) {
  const int64_t unit = chunk_bytes / std::gcd(chunk_bytes, row_bytes);
  const int64_t units = max_seq_len / unit + (max_seq_len % unit != 0);
  return checked_mul(units, unit, rows) && *rows <= std::numeric_limits<int32_t>::max();
}

}  // namespace

Status SlotCache::create_on(Backend* backend, const SlotCacheShape& in, size_t chunk_bytes,
                            std::shared_ptr<SlotCache>* out) {
  const Device device = backend->device();
  SlotCacheShape shape = in;
  if (shape.num_slots <= 0 || shape.max_seq_len <= 0 || shape.row_bytes <= 0) {
    return Status(Code::kInvalidArgument,
                  "slot cache shape must be positive, got num_slots=" + std::to_string(shape.num_slots) +
                      " max_seq_len=" + std::to_string(shape.max_seq_len) +
                      " row_bytes=" + std::to_string(shape.row_bytes));
  }
  // The chunk size the region will use (Region::create_on rounds it the same way; 0: overflow).
  const size_t gran = backend->granularity();
  size_t cb = chunk_bytes ? chunk_bytes : kDefaultChunkBytes;
  cb = cb > static_cast<size_t>(std::numeric_limits<int64_t>::max()) - gran ? 0 : (cb + gran - 1) / gran * gran;
  // mapped_tokens are int32 (what the kernels read). Every byte offset inside the cache is at most
  // its total size, so once that fits int64 (and size_t) no later product can wrap.
  shape.slot_rows = shape.max_seq_len;
  int64_t total = 0;
  if (shape.max_seq_len > std::numeric_limits<int32_t>::max() || cb == 0 ||
      (shape.align_slots &&
       !aligned_rows(shape.max_seq_len, shape.row_bytes, static_cast<int64_t>(cb), &shape.slot_rows)) ||
      !checked_product({shape.num_slots, shape.slot_rows, shape.row_bytes}, &total) ||
      static_cast<uint64_t>(total) > SIZE_MAX) {
    return Status(Code::kInvalidArgument, "slot cache of " + std::to_string(shape.num_slots) + " x " +
                                              std::to_string(shape.max_seq_len) + " rows of " +
                                              std::to_string(shape.row_bytes) +
                                              " bytes is too large (its size in bytes does not fit in 64 bits"
                                              " or its rows per slot, chunk-aligned, pass 2^31 - 1)");
  }
  return catch_bad_alloc("creating a slot cache", [&]() -> Status {
    std::unique_ptr<Region> region;
    PVT_RETURN_IF_ERROR(Region::create_on(backend, static_cast<size_t>(total), cb, &region));
    std::shared_ptr<SlotCache> cache(new SlotCache(shape, std::move(region)));
    stats_detail::add_views(device, 1);  // the cache tensor: one live VTensor (the destructor undoes it)
    Registry::add(cache);  // on bad_alloc `cache` dies here and frees the region
    *out = std::move(cache);
    return Status::Ok();
  });
}

SlotCache::SlotCache(SlotCacheShape shape, std::unique_ptr<Region> region)
    : shape_(shape),
      region_(std::move(region)),
      mapped_(static_cast<size_t>(shape.num_slots)),  // zeros
      lookahead_(static_cast<size_t>(shape.num_slots)) {}

SlotCache::~SlotCache() {
  Registry::remove(region_->base());
  stats_detail::add_views(device(), -1);
}

std::shared_ptr<SlotCache> SlotCache::find(const void* ptr) { return Registry::find(ptr); }

size_t SlotCache::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return region_->physical_bytes();
}

size_t SlotCache::shared_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return region_->mapped_bytes() - region_->physical_bytes();
}

int32_t SlotCache::mapped_tokens(int64_t slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slot >= 0 && slot < shape_.num_slots ? mapped_[static_cast<size_t>(slot)].load() : 0;
}

std::vector<int32_t> SlotCache::mapped_tokens_all(uint64_t* version) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (version) *version = version_;
  return std::vector<int32_t>(mapped_.begin(), mapped_.end());
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

Status SlotCache::check_reserve(int64_t slot, int64_t tokens) const {
  PVT_RETURN_IF_ERROR(check_slot(slot));
  if (tokens < 0) {
    return Status(Code::kInvalidArgument, "tokens must be in [0, max_seq_len=" + std::to_string(shape_.max_seq_len) +
                                              "], got " + std::to_string(tokens));
  }
  if (tokens > shape_.max_seq_len) {
    return Status(Code::kOutOfRange, "slot " + std::to_string(slot) + ": " + std::to_string(tokens) +
                                         " tokens is past max_seq_len=" + std::to_string(shape_.max_seq_len) +
                                         " (the slot holds at most max_seq_len=" +
                                         std::to_string(shape_.max_seq_len) + ")");
  }
  return Status::Ok();
}

Status SlotCache::reserve(int64_t slot, int64_t tokens, void* /*stream: mapping new chunks waits for no work*/) {
  return catch_bad_alloc("reserve", [&]() -> Status {
    PVT_RETURN_IF_ERROR(check_reserve(slot, tokens));
    ahead_.wait_batches();
    // Already mapped (ahead): no lock, so a step never waits for the mapper's current slot.
    if (!rows_mapped(&slot, &tokens, 1)) {
      // Shared: reserve only adds mappings, so ops holding the cache may go on meanwhile.
      std::shared_lock<std::shared_mutex> use(use_mu_);
      std::lock_guard<std::mutex> lock(mu_);
      PVT_RETURN_IF_ERROR(reserve_locked(slot, tokens));
    }
    publish(&slot, &tokens, 1);
    return Status::Ok();
  });
}

Status SlotCache::unreserve(int64_t slot, int64_t old) {
  PVT_RETURN_IF_ERROR(check_slot(slot));
  if (old < 0) return Status(Code::kInvalidArgument, "tokens must be >= 0, got " + std::to_string(old));
  ahead_.wait_all();
  std::unique_lock<std::shared_mutex> use(use_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  unreserve_locked(slot, static_cast<int32_t>(std::min<int64_t>(old, shape_.max_seq_len)));
  return Status::Ok();
}

Status SlotCache::reserve_locked(int64_t slot, int64_t tokens) {
  std::atomic<int32_t>& mapped = mapped_[static_cast<size_t>(slot)];
  if (tokens <= mapped) return Status::Ok();
  const size_t cb = region_->chunk_bytes();
  const size_t begin = static_cast<size_t>(slot * shape_.slot_bytes() + mapped * shape_.row_bytes);
  const size_t end = static_cast<size_t>(slot * shape_.slot_bytes() + tokens * shape_.row_bytes);
  const size_t first = begin / cb * cb;
  PVT_RETURN_IF_ERROR(region_->map_range(first, region_->round_up(end) - first));
  mapped = static_cast<int32_t>(tokens);
  ++version_;
  return Status::Ok();
}

void SlotCache::unreserve_locked(int64_t slot, int32_t old) {
  std::atomic<int32_t>& mapped = mapped_[static_cast<size_t>(slot)];
  if (mapped <= old) return;
  const size_t cb = region_->chunk_bytes();
  const size_t off = static_cast<size_t>(slot * shape_.slot_bytes());
  const size_t keep_end = off + static_cast<size_t>(old) * static_cast<size_t>(shape_.row_bytes);  // rows < old
  const size_t end = off + static_cast<size_t>(mapped) * static_cast<size_t>(shape_.row_bytes);
  mapped = old;
  ++version_;
  for (size_t c = keep_end / cb; c * cb < end; ++c) {
    if ((old > 0 && c * cb < keep_end) || chunk_needed_by_other(c, slot)) continue;
    (void)region_->undo_map(c * cb, cb);
  }
}

Status SlotCache::check_batch(const std::vector<int64_t>& slots, const std::vector<int64_t>& tokens) const {
  if (slots.size() != tokens.size()) {
    return Status(Code::kInvalidArgument, "a batch of reservations needs one length per slot, got " +
                                              std::to_string(slots.size()) + " slots and " +
                                              std::to_string(tokens.size()) + " lengths");
  }
  for (size_t i = 0; i < slots.size(); ++i) PVT_RETURN_IF_ERROR(check_reserve(slots[i], tokens[i]));
  return Status::Ok();
}

Status SlotCache::reserve_batch(const std::vector<int64_t>& slots, const std::vector<int64_t>& tokens,
                                bool announced) {
  return catch_bad_alloc("reserve", [&]() -> Status {
    if (slots.size() != tokens.size()) return check_batch(slots, tokens);
    if (!announced) ahead_.wait_batches();
    // The step path's usual case once rows are mapped ahead: one pass that also validates, no lock.
    if (rows_mapped(slots.data(), tokens.data(), slots.size())) {
      publish(slots.data(), tokens.data(), slots.size());
      return Status::Ok();
    }
    PVT_RETURN_IF_ERROR(check_batch(slots, tokens));  // the message of the first bad entry
    std::shared_lock<std::shared_mutex> use(use_mu_);
    std::lock_guard<std::mutex> lock(mu_);
    // Odd while the values raised below may still be lowered again (rows_mapped then takes the lock).
    struct Seq {
      std::atomic<uint64_t>& n;
      explicit Seq(std::atomic<uint64_t>& s) : n(s) { n.fetch_add(1); }
      ~Seq() { n.fetch_add(1); }
    } seq(batch_seq_);
    std::vector<std::pair<int64_t, int32_t>> before;  // (slot, mapped_tokens before), to undo in reverse
    before.reserve(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
      before.emplace_back(slots[i], mapped_[static_cast<size_t>(slots[i])]);
      const Status one = reserve_locked(slots[i], tokens[i]);
      if (!one.ok()) {
        for (auto it = before.rbegin(); it != before.rend(); ++it) unreserve_locked(it->first, it->second);
        return one;
      }
    }
    publish(slots.data(), tokens.data(), slots.size());
    return Status::Ok();
  });
}

void SlotCache::publish(const int64_t* slots, const int64_t* tokens, size_t n) {
  const int64_t ahead = lookahead_.rows();
  if (ahead == 0) return;
  for (size_t i = 0; i < n; ++i) {
    lookahead_.publish(slots[i], tokens[i], mapped_[static_cast<size_t>(slots[i])].load(std::memory_order_relaxed), ahead);
  }
}

int64_t SlotCache::chunk_end_rows(int64_t slot, int64_t rows) const {
  const int64_t off = slot * shape_.slot_bytes();
  const int64_t end = static_cast<int64_t>(region_->round_up(static_cast<size_t>(off + rows * shape_.row_bytes)));
  return std::min((end - off) / shape_.row_bytes, shape_.max_seq_len);
}

Status SlotCache::map_lookahead(int64_t* mapped_slots) {
  *mapped_slots = 0;
  const int64_t ahead = lookahead_.rows();
  if (ahead == 0 || !lookahead_.take_any()) return Status::Ok();
  return catch_bad_alloc("map ahead", [&]() -> Status {
    Status first;
    for (int64_t s = 0; s < shape_.num_slots; ++s) {
      if (!lookahead_.take(s)) continue;
      std::shared_lock<std::shared_mutex> use(use_mu_);
      std::lock_guard<std::mutex> lock(mu_);
      const int64_t wanted = lookahead_.wanted(s);  // 0: released since it was marked
      if (wanted == 0) continue;
      const int64_t target = chunk_end_rows(s, std::min(wanted + ahead, shape_.max_seq_len));
      if (target <= mapped_[static_cast<size_t>(s)]) continue;
      const Status st = reserve_locked(s, target);
      if (st.ok()) {
        ++*mapped_slots;
      } else {
        lookahead_.count_failure();
        if (first.ok()) first = st;
      }
    }
    return first;
  });
}

bool SlotCache::rows_mapped(const int64_t* slots, const int64_t* tokens, size_t n) const {
  const uint64_t seq = batch_seq_.load();
  if (seq % 2 != 0) return false;
  for (size_t i = 0; i < n; ++i) {
    // A slot or length out of range is not mapped: the caller's checks then name it.
    if (slots[i] < 0 || slots[i] >= shape_.num_slots || tokens[i] < 0 || tokens[i] > shape_.max_seq_len) return false;
    if (tokens[i] > mapped_[static_cast<size_t>(slots[i])].load()) return false;
  }
  return batch_seq_.load() == seq;  // no batch began meanwhile (whose raise the loads may have seen)
}

Status SlotCache::prefetch(const std::vector<int64_t>& slots, const std::vector<int64_t>& tokens) {
  return catch_bad_alloc("reserve", [&]() -> Status {
    PVT_RETURN_IF_ERROR(check_batch(slots, tokens));
    for (size_t i = 0; i < slots.size(); ++i) {
      if (tokens[i] <= mapped_[static_cast<size_t>(slots[i])].load()) continue;
      std::shared_lock<std::shared_mutex> use(use_mu_);
      std::lock_guard<std::mutex> lock(mu_);
      PVT_RETURN_IF_ERROR(reserve_locked(slots[i], tokens[i]));
    }
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
  ahead_.wait_all();  // a reservation or prefetch queued before this release is carried out first
  // Exclusive: waits until no op holds the cache (SlotCacheHold), so none is between its check of
  // mapped_tokens and its last access of the memory unmapped below.
  std::unique_lock<std::shared_mutex> use(use_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  std::atomic<int32_t>& mapped = mapped_[static_cast<size_t>(slot)];
  lookahead_.forget(slot);  // under mu_: the mapper's next look skips the slot
  if (mapped == 0) return Status::Ok();
  // Work the caller queued on `stream` may still read the slot: the unmaps below are deferred until
  // it is done, as for every stream the ops recorded (record_use), without blocking.
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

Status SlotCache::collect(bool wait) {
  std::lock_guard<std::mutex> lock(mu_);
  return catch_bad_alloc("collect", [&] { return region_->collect(wait); });
}

Status SlotCache::collect_all(Device device, bool wait, size_t* pending) {
  *pending = 0;
  return catch_bad_alloc("collect", [&] {
    Status first;
    for (const auto& cache : Registry::all()) {
      if (!(cache->device() == device)) continue;
      const Status st = cache->collect(wait);
      if (first.ok()) first = st;
      *pending += cache->pending_chunks();
    }
    return first;
  });
}

size_t SlotCache::pending_chunks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return region_->pending_chunks();
}

Status SlotCache::share_prefix(int64_t src, int64_t dst, int64_t tokens, void* stream) {
  return catch_bad_alloc("share_prefix", [&]() -> Status {
    PVT_RETURN_IF_ERROR(check_slot(src));
    PVT_RETURN_IF_ERROR(check_slot(dst));
    if (src == dst) {
      return Status(Code::kInvalidArgument, "cannot share slot " + std::to_string(src) + " with itself");
    }
    if (!shape_.align_slots) {
      return Status(Code::kInvalidArgument, "this cache's slots are not chunk-aligned (created without "
                                            "align_slots): a chunk may hold rows of two slots, so none can be shared");
    }
    if (tokens < 1) {
      return Status(Code::kInvalidArgument, "tokens must be at least 1, got " + std::to_string(tokens));
    }
    ahead_.wait_all();  // aliases and copies must see the prefetched rows of src (and none come after)
    // Shared: sharing only adds mappings (to an empty slot no op reads), like reserve.
    std::shared_lock<std::shared_mutex> use(use_mu_);
    std::lock_guard<std::mutex> lock(mu_);
    return share_prefix_locked(src, dst, tokens, stream);
  });
}

Status SlotCache::share_prefix_locked(int64_t src, int64_t dst, int64_t tokens, void* stream) {
  const int32_t have = mapped_[static_cast<size_t>(src)];
  if (tokens > have) {
    return Status(Code::kInvalidArgument, "slot " + std::to_string(src) + " has " + std::to_string(have) +
                                         " tokens mapped (" + (have ? "" : "empty or released; ") +
                                         "reserve or fill it first), cannot share " + std::to_string(tokens));
  }
  if (mapped_[static_cast<size_t>(dst)] != 0) {
    return Status(Code::kInvalidArgument, "slot " + std::to_string(dst) + " holds " +
                                              std::to_string(mapped_[static_cast<size_t>(dst)]) +
                                              " mapped tokens: release it before sharing into it");
  }
  const size_t cb = region_->chunk_bytes();
  const size_t src_off = static_cast<size_t>(src * shape_.slot_bytes());
  const size_t dst_off = static_cast<size_t>(dst * shape_.slot_bytes());
  const size_t bytes = static_cast<size_t>(tokens * shape_.row_bytes);
  const size_t whole = bytes / cb * cb, tail = bytes - whole;
  if (whole) PVT_RETURN_IF_ERROR(region_->alias_range(*region_, src_off, dst_off, whole));
  if (tail) {
    // The chunk holding row `tokens` stays src's own (src appends into it): dst gets a copy.
    Status st = region_->map_range(dst_off + whole, cb);
    if (st.ok()) st = region_->copy(dst_off + whole, src_off + whole, tail, stream);
    if (st.ok()) st = region_->record_use(stream);
    if (!st.ok()) {
      (void)region_->unmap_range(dst_off, whole + cb);  // the aliases and the copy's chunk, if mapped
      return st;
    }
  }
  mapped_[static_cast<size_t>(dst)] = static_cast<int32_t>(tokens);
  ++version_;
  return Status::Ok();
}

int64_t SlotCache::first_shared_row(int64_t slot, int64_t from, int64_t to) const {
  if (!check_slot(slot).ok() || from < 0 || from >= to) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  const size_t cb = region_->chunk_bytes(), rb = static_cast<size_t>(shape_.row_bytes);
  const size_t off = static_cast<size_t>(slot * shape_.slot_bytes());
  const size_t first = (off + static_cast<size_t>(from) * rb) / cb;
  const size_t end = (off + static_cast<size_t>(to) * rb + cb - 1) / cb;
  for (size_t c = first; c < end; ++c) {
    const PhysChunk* chunk = region_->phys_chunk(c);
    if (chunk != nullptr && chunk->mappings.load() >= 2) {
      // The first row with a byte in chunk c (past `first`, the chunk starts after row `from`'s first byte).
      return c == first ? from : static_cast<int64_t>((c * cb - off) / rb);
    }
  }
  return -1;
}

Status SlotCache::make_private(int64_t slot, int64_t from, int64_t to, void* stream) {
  return catch_bad_alloc("make_private", [&]() -> Status {
    PVT_RETURN_IF_ERROR(check_slot(slot));
    if (from < 0) {
      return Status(Code::kInvalidArgument, "write_from must be >= 0, got " + std::to_string(from));
    }
    ahead_.wait_all();
    // Exclusive: the shared mappings replaced below must not be read by an op meanwhile.
    std::unique_lock<std::shared_mutex> use(use_mu_);
    std::lock_guard<std::mutex> lock(mu_);
    to = std::min<int64_t>(to, mapped_[static_cast<size_t>(slot)]);
    if (from >= to) return Status::Ok();
    const size_t cb = region_->chunk_bytes();
    const size_t off = static_cast<size_t>(slot * shape_.slot_bytes());
    const size_t first = (off + static_cast<size_t>(from * shape_.row_bytes)) / cb;
    const size_t end = (off + static_cast<size_t>(to * shape_.row_bytes) + cb - 1) / cb;
    bool recorded = false;
    for (size_t c = first; c < end; ++c) {
      const PhysChunk* chunk = region_->phys_chunk(c);
      if (chunk == nullptr || chunk->mappings.load() < 2) continue;
      if (!recorded) {
        // Work the caller queued on `stream` may still read the shared mapping.
        PVT_RETURN_IF_ERROR(region_->record_use(stream));
        recorded = true;
      }
      PVT_RETURN_IF_ERROR(region_->make_private(c, stream));
    }
    return Status::Ok();
  });
}

Status SlotCache::record_use(void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return region_->record_use(stream);
}

Status SlotCache::use_counters(std::shared_ptr<const StepCounters> counters) {
  std::lock_guard<std::mutex> lock(mu_);
  return region_->use_counters(std::move(counters));
}

Status SlotCache::use_event(void* stream, EventHandle* event) {
  std::lock_guard<std::mutex> lock(mu_);
  return region_->use_event(stream, event);
}

SlotCacheHold::SlotCacheHold(const SlotCache& a, const SlotCache* b) {
  const SlotCache* lo = &a;
  const SlotCache* hi = b == &a ? nullptr : b;
  if (hi != nullptr && std::less<const SlotCache*>()(hi, lo)) std::swap(lo, hi);
  // Reservations queued before this op are carried out first (a host wait, usually none).
  lo->ahead_.wait_batches();
  if (hi != nullptr) hi->ahead_.wait_batches();
  first_ = std::shared_lock<std::shared_mutex>(lo->use_mu_);
  if (hi != nullptr) second_ = std::shared_lock<std::shared_mutex>(hi->use_mu_);
}

}  // namespace pvt

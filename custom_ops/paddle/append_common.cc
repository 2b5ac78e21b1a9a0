#include "append_common.h"

#include <algorithm>
#include <cstdint>

namespace pvt {

void check_defined(const paddle::Tensor& t, const char* op, const char* what) {
  PD_CHECK(t.defined(), op, ": ", what, " must be a tensor, got None");
}

CacheConfig cache_config(const CacheShape& shape, int64_t max_seq_len, int64_t chunk_bytes,
                         int64_t need_tokens, const char* op) {
  PD_CHECK(max_seq_len >= 0, op, ": max_seq_len must be positive (0: the default, ", kDefaultMaxSeqLen,
           "), got ", max_seq_len);
  PD_CHECK(chunk_bytes >= 0, op, ": chunk_bytes must be positive (0: the default, ", kDefaultChunkBytes,
           "), got ", chunk_bytes);
  CacheConfig config;
  config.capacity_tokens = std::max(max_seq_len > 0 ? max_seq_len : kDefaultMaxSeqLen, need_tokens);
  config.chunk_bytes = static_cast<size_t>(chunk_bytes);  // 0: the core's default
  // The core sizes the reservation as capacity * token_bytes; past int64 that product wraps into a
  // small reservation that would look valid. (Non-positive sizes are the core's to refuse.)
  int64_t token_bytes = 0, bytes = 0;
  const bool positive = shape.batch > 0 && shape.heads > 0 && shape.head_dim > 0;
  PD_CHECK(!positive || checked_product({shape.batch, shape.heads, shape.head_dim, shape.elem_bytes}, &token_bytes),
           op, ": a token of batch=", shape.batch, " heads=", shape.heads, " head_dim=", shape.head_dim,
           " does not fit in 64 bits of bytes");
  PD_CHECK(!positive || checked_mul(config.capacity_tokens, token_bytes, &bytes), op, ": a reservation of ",
           config.capacity_tokens, " tokens of ", token_bytes, " bytes does not fit in 64 bits; lower max_seq_len");
  return config;
}

namespace {

void check_inputs(const paddle::Tensor& cache, const paddle::Tensor& tokens, int64_t expect_tokens,
                  const char* op) {
  check_defined(cache, op, "the cache");
  check_defined(tokens, op, "tokens");
  refuse_slot_cache(cache, op, "the cache");
  refuse_slot_cache(tokens, op, "tokens");
  const auto& c = cache.dims();
  const auto& t = tokens.dims();
  PD_CHECK(c.size() == 4, op, ": cache must have rank 4 (logical [batch, seq, heads, head_dim]), got rank ",
           c.size());
  PD_CHECK(t.size() == 4, op, ": tokens must have rank 4 [batch, tokens, heads, head_dim], got shape ",
           dims_str(t));
  PD_CHECK(cache.dtype() == tokens.dtype(), op, ": tokens have dtype ",
           phi::DataTypeToString(tokens.dtype()), " but the cache has dtype ",
           phi::DataTypeToString(cache.dtype()));
  kv_elem_bytes(cache.dtype(), op, "the cache");
  PD_CHECK(cache.place() == tokens.place(), op, ": tokens are on ", tokens.place().DebugString(),
           " but the cache is on ", cache.place().DebugString());
  // The storage view is [S, B, H, D]; messages speak of the logical [B, S, H, D].
  PD_CHECK(t[0] == c[1] && t[2] == c[2] && t[3] == c[3], op,
           ": tokens [batch, tokens, heads, head_dim] = ", dims_str(t),
           " do not match the cache [batch, seq, heads, head_dim] = [", c[1], ", ", c[0], ", ", c[2],
           ", ", c[3], "] in batch, heads or head_dim");
  PD_CHECK(t[1] >= 1, op, ": tokens must hold at least one token, got shape ", dims_str(t));
  if (expect_tokens > 0) {
    PD_CHECK(t[1] == expect_tokens, op, ": expects exactly ", expect_tokens,
             " token(s) per call ([batch, 1, heads, head_dim]), got shape ", dims_str(t));
  }
}

AppendParams params_for(const CacheShape& s, void* dst, const void* src, int64_t tokens,
                        int64_t dst_pos, const int64_t (&src_stride)[4]) {
  AppendParams p;
  p.dst = dst;
  p.src = src;
  p.batch = s.batch;
  p.tokens = tokens;
  p.heads = s.heads;
  p.head_dim = s.head_dim;
  p.dst_pos = dst_pos;
  std::copy(src_stride, src_stride + 4, p.src_stride);
  p.elem_bytes = s.elem_bytes;
  return p;
}

}  // namespace

paddle::Tensor append_to_cache(const paddle::Tensor& cache, const paddle::Tensor& tokens,
                               int64_t max_seq_len, int64_t chunk_bytes, int64_t expect_tokens,
                               const char* op) {
  check_inputs(cache, tokens, expect_tokens, op);
  const auto& c = cache.dims();
  const int64_t S = c[0], B = c[1], H = c[2], D = c[3], T = tokens.dims()[1];
  const CacheShape shape{B, H, D, kv_elem_bytes(cache.dtype(), op, "the cache")};
  // Attributes are checked on every call, also when an in-place append does not use them.
  CacheConfig config = cache_config(shape, max_seq_len, chunk_bytes, S + T, op);
  const phi::Place place = cache.place();
  void* stream = stream_of(tokens);
  // tokens arrive contiguous [B, T, H, D] (Paddle makes custom-op inputs contiguous).
  const int64_t token_stride[4] = {T * H * D, H * D, D, 1};

  std::shared_ptr<SeqMajorCache> target;
  int64_t copy_old = 0;  // tokens of the old cache to copy into `target` first (0: append in place)
  if (const VTensorAllocation* alloc = whole_storage_view(cache)) {
    const Status st = alloc->cache()->begin_append(S, T);
    if (st.ok()) {
      target = alloc->cache();
    } else if (st.code() != Code::kConflict) {
      throw_if_error(st, op);  // past the reservation, out of memory: the cache is untouched
    } else {
      copy_old = S;  // a live view sees position S: copy-on-write
      // The copy is a fork of this cache: same reservation and chunk size unless the call says.
      if (max_seq_len == 0) {
        config.capacity_tokens = std::max(alloc->cache()->capacity_tokens(), S + T);
      }
      if (chunk_bytes == 0) config.chunk_bytes = alloc->cache()->chunk_bytes();
    }
  } else {
    copy_old = S;  // a plain tensor (or a view we cannot write through): migrate once
  }

  if (!target) {
    throw_if_error(SeqMajorCache::create(to_device(place), shape, config, &target), op);
    throw_if_error(target->begin_append(0, S + T), op);
  }
  // The output takes over the view registration before any copy is queued, so a failed launch
  // unregisters it again (and releases what it mapped) instead of leaking it.
  paddle::Tensor out = make_storage_view(target, S + T, cache.dtype(), place);
  if (copy_old > 0) {
    const int64_t cache_stride[4] = {H * D, B * H * D, D, 1};  // storage [S, B, H, D] as (b, s, h, d)
    launch_append(params_for(shape, target->data(), cache.data(), S, 0, cache_stride), place, stream,
                  op);
  }
  launch_append(params_for(shape, target->data(), tokens.data(), T, S, token_stride), place, stream, op);
  return out;
}

std::vector<int64_t> append_out_shape(const std::vector<int64_t>& cache_shape,
                                      const std::vector<int64_t>& tokens_shape) {
  PD_CHECK(cache_shape.size() == 4 && tokens_shape.size() == 4,
           "vtensor append: cache and tokens must have rank 4");
  const int64_t S = cache_shape[0], T = tokens_shape[1];
  return {S < 0 || T < 0 ? -1 : S + T, cache_shape[1], cache_shape[2], cache_shape[3]};
}

}  // namespace pvt

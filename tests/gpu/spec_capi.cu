// C entry points over the core and kernels for spec_loop.py through ctypes (pvt_capi.py): what pvt_torch.cu
// gives, without Python or PyTorch headers, so the library is built where nvcc is (spec_capi_build.sh) and
// carried to the GPU machine instead of compiled there (83 s of device time for the extension, run of
// 2026-12-01 20:48 UTC). Every function returns 0 or a nonzero code with pvt_capi_error() saying why.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "core/apis.h"
#include "kernels/decode_attention.h"
#include "kernels/decode_attention_plan.h"
#include "kernels/speculative_accept.h"

namespace {

thread_local std::string g_error;

int fail(const std::string& what) {
  g_error = what;
  return 1;
}

int status(const pvt::Status& s) { return s.ok() ? 0 : fail(s.to_string()); }

// What attention plans with (pvt_capi_set_decode_options; a CUDA graph keeps the plan of its capture).
pvt::DecodeOptions g_options;

struct CacheHandle {
  std::shared_ptr<pvt::SeqMajorCache> cache;
};

// dims: batch, q_len, q_heads, kv_heads, head_dim, kv_len, dtype (ScalarType); ptrs: q, k, v, out,
// cache_seqlens (may be null); strides (elements): q, k, v, out, 4 each.
pvt::DecodeAttentionParams attention_params(const int64_t* dims, void* const* ptrs, const int64_t* strides) {
  pvt::DecodeAttentionParams p;
  p.batch = dims[0]; p.q_len = dims[1]; p.q_heads = dims[2]; p.kv_heads = dims[3]; p.head_dim = dims[4];
  p.kv_len = dims[5];
  p.dtype = static_cast<pvt::ScalarType>(dims[6]);
  p.scale = 1.f / std::sqrt(static_cast<float>(p.head_dim));
  p.q = ptrs[0]; p.k = ptrs[1]; p.v = ptrs[2]; p.out = ptrs[3];
  p.cache_seqlens = static_cast<const int32_t*>(ptrs[4]);
  for (int i = 0; i < 4; ++i) {
    p.q_stride[i] = strides[i]; p.k_stride[i] = strides[4 + i]; p.v_stride[i] = strides[8 + i];
    p.out_stride[i] = strides[12 + i];
  }
  return p;
}

}  // namespace

extern "C" {

const char* pvt_capi_error() { return g_error.c_str(); }

int pvt_capi_cache_create(int device, int64_t batch, int64_t heads, int64_t head_dim, int64_t elem_bytes,
                          int64_t capacity, void** out) {
  auto h = std::make_unique<CacheHandle>();
  const int rc = status(pvt::SeqMajorCache::create(pvt::Device::cuda(device), pvt::CacheShape{batch, heads, head_dim, elem_bytes},
                                                   pvt::CacheConfig{capacity, 0}, &h->cache));
  if (rc == 0) *out = h.release();
  return rc;
}

void pvt_capi_cache_destroy(void* h) { delete static_cast<CacheHandle*>(h); }

void* pvt_capi_cache_data(void* h) { return static_cast<CacheHandle*>(h)->cache->data(); }

int pvt_capi_cache_reserve(void* h, int64_t end) { return status(static_cast<CacheHandle*>(h)->cache->reserve_tokens(end)); }

int pvt_capi_cache_begin_append(void* h, int64_t pos, int64_t n) {
  return status(static_cast<CacheHandle*>(h)->cache->begin_append(pos, n));
}

int64_t pvt_capi_mapped_bytes_total(int device) {
  return static_cast<int64_t>(pvt::memory_stats(pvt::Device::cuda(device)).mapped_bytes);
}

// ints: splits, no_mma, mma_mha, mma_warps, no_pdl, no_cluster, mma_blocks_per_sm, split_keys, mma_row_tiles,
// balance, balance_blocks_per_sm, merge_chunk, mma_row_warps, merge_wide, mma_warp_keys (pvt::DecodeOptions).
int pvt_capi_set_decode_options(const int64_t* ints) {
  pvt::DecodeOptions o;
  o.splits = ints[0];
  o.no_mma = ints[1] != 0;
  o.mma_mha = ints[2] != 0;
  o.mma_warps = static_cast<int>(ints[3]);
  o.no_pdl = ints[4] != 0;
  o.no_cluster = ints[5] != 0;
  o.mma_blocks_per_sm = static_cast<int>(ints[6]);
  o.split_keys = ints[7];
  o.mma_row_tiles = static_cast<int>(ints[8]);
  o.balance = static_cast<int>(ints[9]);
  o.balance_blocks_per_sm = static_cast<int>(ints[10]);
  o.merge_chunk = static_cast<int>(ints[11]);
  o.mma_row_warps = static_cast<int>(ints[12]);
  o.merge_wide = static_cast<int>(ints[13]);
  o.mma_warp_keys = static_cast<int>(ints[14]);
  const pvt::Status s = pvt::decode_plan::check_options(o);
  if (!s.ok()) return status(s);
  g_options = o;
  return 0;
}

int pvt_capi_attention_workspace(const int64_t* dims, void* const* ptrs, const int64_t* strides, int64_t* bytes) {
  auto p = attention_params(dims, ptrs, strides);
  p.options = &g_options;
  const pvt::Status s = pvt::check_decode_attention_params(p);
  if (!s.ok()) return status(s);
  *bytes = static_cast<int64_t>(pvt::decode_attention_cuda_workspace_bytes(p));
  return 0;
}

// The plan attention would launch (pvt_torch's plan): out = mma kernel, rows kernel, M-tiles, warps, splits,
// cluster, balanced grid (0: not balanced), workspace bytes, the plain plan's splits the balanced grid holds
// (0: none; the rule, the device choosing), row groups, the wide merge kernel, keys a warp. `out`: 12 values.
int pvt_capi_plan(const int64_t* dims, void* const* ptrs, const int64_t* strides, int64_t* out) {
  auto p = attention_params(dims, ptrs, strides);
  p.options = &g_options;
  pvt::decode_plan::Plan pl;
  const pvt::Status s = pvt::decode_attention_cuda_plan(p, &pl);
  if (!s.ok()) return status(s);
  const int64_t v[] = {pl.mma_kernel,  pl.rows_kernel, pl.mma_tiles,    pl.mma_warps,
                       pl.splits,      pl.cluster,     pl.balance_grid, static_cast<int64_t>(pl.workspace_bytes),
                       pl.balance_plain_splits, pl.row_groups, pl.merge_wide, pl.mma_warp_keys};
  std::copy(v, v + 12, out);
  return 0;
}

int pvt_capi_attention(const int64_t* dims, void* const* ptrs, const int64_t* strides, void* workspace,
                       int64_t workspace_bytes, void* stream) {
  auto p = attention_params(dims, ptrs, strides);
  p.options = &g_options;
  p.workspace = workspace;
  p.workspace_bytes = static_cast<size_t>(workspace_bytes);
  return status(pvt::decode_attention_cuda(p, stream));
}

// ptrs: draft [n, k] int64, target [n, k+1] int64, slots [n] int32, target_seqlens, draft_seqlens int32,
// out_ids [n, max_new] int64, out_len, finished, accepted int32 [n], next_tokens int64 [n], error_flag int32 [1].
// ints: n, k, target_num_slots, target_capacity, target_advance, draft_num_slots, draft_capacity,
// draft_advance, max_new_tokens, eos_token_id, pad_token_id.
int pvt_capi_speculative_accept(void* const* ptrs, const int64_t* ints, void* stream) {
  pvt::SpeculativeAcceptParams p;
  p.draft_tokens = static_cast<const int64_t*>(ptrs[0]);
  p.target_tokens = static_cast<const int64_t*>(ptrs[1]);
  p.slot_ids = static_cast<const int32_t*>(ptrs[2]);
  p.target_seqlens = static_cast<int32_t*>(ptrs[3]);
  p.draft_seqlens = static_cast<int32_t*>(ptrs[4]);
  p.out_ids = static_cast<int64_t*>(ptrs[5]);
  p.out_len = static_cast<int32_t*>(ptrs[6]);
  p.finished = static_cast<int32_t*>(ptrs[7]);
  p.accepted = static_cast<int32_t*>(ptrs[8]);
  p.next_tokens = static_cast<int64_t*>(ptrs[9]);
  p.error_flag = static_cast<int32_t*>(ptrs[10]);
  p.batch = ints[0]; p.num_draft = ints[1];
  p.target_num_slots = ints[2]; p.target_capacity = ints[3]; p.target_advance = ints[4];
  p.draft_num_slots = ints[5]; p.draft_capacity = ints[6]; p.draft_advance = ints[7];
  p.max_new_tokens = ints[8]; p.eos_token_id = ints[9]; p.pad_token_id = ints[10];
  return status(pvt::speculative_accept_cuda(p, stream));
}

}  // extern "C"

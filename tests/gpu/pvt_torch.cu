// A small PyTorch extension over the framework-free core and kernels (custom_ops/core, kernels), for
// the H200 harness in tests/gpu/: no Paddle there, so the decode loop and the attention comparison are
// driven from PyTorch. Not part of the installed package; built on the machine by build.py.
//   Cache          a SeqMajorCache (VM reservation, chunks mapped as it grows) seen as a torch tensor
//   append         append_tokens_cuda: tokens [B, T, H, D] written in place at a host position
//   attention      decode_attention_cuda over any strided K/V (seq-major cache, slot cache, [B,H,S,D])
//   speculative_accept   speculative_accept_cuda: accept/advance of a speculative step, in place on the
//                  device (no host read: a CUDA graph captures it)
//   set_decode_options / decode_options   the benchmark knobs (pvt::DecodeOptions) every later call
//                  plans with; set_decode_options() with no argument restores the defaults
//   plan           the plan attention() would launch for these arguments (kernel family, M-tiles, splits):
//                  what a benchmark records next to each time, so that a silent fallback shows
//   mma_probe      what the device says about each tensor-core instance (built, sm_80 code, blocks an
//                  SM, the CUDA error of a failed query)
//   quant_append / quant_attention / quant_workspace_bytes   8-bit caches (kv_quant_append.h,
//                  kv_quant_attention.h): a Cache of dtype float8_e4m3fn or int8 holds the codes; fp8's
//                  scales are a float32 [H] tensor, int8's a float32 [capacity, B, H] tensor beside it
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/apis.h"
#include "kernels/append_tokens.h"
#include "kernels/decode_attention.h"
#include "kernels/decode_attention_mma_launch_cuda.cuh"
#include "kernels/decode_attention_plan.h"
#include "kernels/kv_quant_append.h"
#include "kernels/kv_quant_attention.h"
#include "kernels/speculative_accept.h"

namespace {

void check(const pvt::Status& s) { TORCH_CHECK(s.ok(), s.to_string()); }

pvt::ScalarType dtype_of(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return pvt::ScalarType::kFloat32;
    case torch::kFloat16: return pvt::ScalarType::kFloat16;
    case torch::kBFloat16: return pvt::ScalarType::kBFloat16;
    default: TORCH_CHECK(false, "pvt_torch: unsupported dtype ", t.scalar_type());
  }
}

void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }

// The knobs workspace_bytes and attention plan with (a CUDA graph keeps the plan made at its capture).
pvt::DecodeOptions g_options;

void set_decode_options(int64_t splits, bool no_mma, bool mma_mha, int64_t mma_warps, bool no_pdl, bool no_cluster,
                        int64_t mma_blocks_per_sm, int64_t mma_row_tiles, int64_t split_keys, int64_t balance,
                        int64_t mma_row_warps, int64_t balance_blocks_per_sm, int64_t merge_chunk,
                        int64_t merge_wide, int64_t mma_warp_keys) {
  pvt::DecodeOptions o;
  o.splits = splits;
  o.no_mma = no_mma;
  o.mma_mha = mma_mha;
  o.mma_warps = static_cast<int>(mma_warps);
  o.no_pdl = no_pdl;
  o.no_cluster = no_cluster;
  o.mma_blocks_per_sm = static_cast<int>(mma_blocks_per_sm);
  o.mma_row_tiles = static_cast<int>(mma_row_tiles);
  o.split_keys = split_keys;
  o.balance = static_cast<int>(balance);
  o.mma_row_warps = static_cast<int>(mma_row_warps);
  o.balance_blocks_per_sm = static_cast<int>(balance_blocks_per_sm);
  o.merge_chunk = static_cast<int>(merge_chunk);
  o.merge_wide = static_cast<int>(merge_wide);
  o.mma_warp_keys = static_cast<int>(mma_warp_keys);
  check(pvt::decode_plan::check_options(o));
  g_options = o;
}

pybind11::dict decode_options() {
  pybind11::dict d;
  d["splits"] = g_options.splits;
  d["no_mma"] = g_options.no_mma;
  d["mma_mha"] = g_options.mma_mha;
  d["mma_warps"] = g_options.mma_warps;
  d["no_pdl"] = g_options.no_pdl;
  d["no_cluster"] = g_options.no_cluster;
  d["mma_blocks_per_sm"] = g_options.mma_blocks_per_sm;
  d["mma_row_tiles"] = g_options.mma_row_tiles;
  d["split_keys"] = g_options.split_keys;
  d["balance"] = g_options.balance;
  d["mma_row_warps"] = g_options.mma_row_warps;
  d["balance_blocks_per_sm"] = g_options.balance_blocks_per_sm;
  d["merge_chunk"] = g_options.merge_chunk;
  d["merge_wide"] = g_options.merge_wide;
  d["mma_warp_keys"] = g_options.mma_warp_keys;
  return d;
}

struct Cache {
  std::shared_ptr<pvt::SeqMajorCache> cache;
  torch::ScalarType dtype;

  Cache(int64_t batch, int64_t heads, int64_t head_dim, const std::string& dt, int64_t capacity, int64_t chunk_bytes)
      : dtype(dt == "float16" ? torch::kFloat16 : dt == "bfloat16" ? torch::kBFloat16 : dt == "float32" ? torch::kFloat32
              : dt == "float8_e4m3fn" ? torch::kFloat8_e4m3fn : torch::kInt8) {
    TORCH_CHECK(dt == "float16" || dt == "bfloat16" || dt == "float32" || dt == "float8_e4m3fn" || dt == "int8",
                "Cache: dtype float16, bfloat16, float32, float8_e4m3fn or int8");
    const int64_t eb = torch::elementSize(dtype);
    check(pvt::SeqMajorCache::create(pvt::Device::cuda(c10::cuda::current_device()),
                                     pvt::CacheShape{batch, heads, head_dim, eb},
                                     pvt::CacheConfig{capacity, static_cast<size_t>(chunk_bytes)}, &cache));
  }
  // The whole reservation as [capacity, B, H, D]; only the mapped prefix may be touched. The tensor
  // keeps the cache alive.
  torch::Tensor tensor() const {
    const auto& s = cache->shape();
    auto keep = cache;
    return torch::from_blob(cache->data(), {cache->capacity_tokens(), s.batch, s.heads, s.head_dim},
                            [keep](void*) {}, torch::TensorOptions().dtype(dtype).device(torch::kCUDA));
  }
  void reserve(int64_t end) { check(cache->reserve_tokens(end)); }
  void begin_append(int64_t pos, int64_t n) { check(cache->begin_append(pos, n)); }
  void remove_view(int64_t len) { cache->remove_view(len); }
  int64_t mapped_bytes() const { return static_cast<int64_t>(cache->mapped_bytes()); }
  int64_t reserved_bytes() const { return static_cast<int64_t>(cache->reserved_bytes()); }
};

// tokens [B, T, H, D] (any strides) into the cache at token position pos (already begun).
void append(Cache& c, const torch::Tensor& src, int64_t pos) {
  TORCH_CHECK(src.is_cuda() && src.dim() == 4 && src.scalar_type() == c.dtype, "append: src must be a CUDA [B,T,H,D] tensor of the cache's dtype");
  pvt::AppendParams a;
  a.dst = c.cache->data();
  a.src = src.data_ptr();
  a.batch = src.size(0); a.tokens = src.size(1); a.heads = src.size(2); a.head_dim = src.size(3);
  a.dst_pos = pos;
  a.elem_bytes = src.element_size();
  for (int i = 0; i < 4; ++i) a.src_stride[i] = src.stride(i);
  check(pvt::append_tokens_cuda(a, stream()));
  check(c.cache->record_use(stream()));  // a release waits for this write (SeqMajorCache::record_use)
}

pvt::DecodeAttentionParams params(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& out, int64_t kv_len,
                                  const std::optional<torch::Tensor>& cache_seqlens,
                                  const std::optional<torch::Tensor>& kv_batch_index,
                                  const std::optional<torch::Tensor>& cu_seqlens_q,
                                  const std::optional<torch::Tensor>& lse, int64_t q_len) {
  // q/out: [B, Tq, Hq, D] (or packed [rows, 1, Hq, D] with cu_seqlens_q); k/v: logical [S, B, Hkv, D].
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && out.dim() == 4, "attention: 4-d tensors");
  pvt::DecodeAttentionParams p;
  p.batch = cu_seqlens_q ? cu_seqlens_q->numel() - 1 : q.size(0);
  p.q_len = cu_seqlens_q ? q_len : q.size(1);
  p.q_heads = q.size(2); p.kv_heads = k.size(2); p.head_dim = q.size(3); p.kv_len = kv_len;
  p.dtype = dtype_of(q);
  p.scale = 1.f / std::sqrt(static_cast<float>(p.head_dim));
  p.q = q.data_ptr(); p.k = k.data_ptr(); p.v = v.data_ptr(); p.out = out.data_ptr();
  for (int i = 0; i < 4; ++i) {
    p.q_stride[i] = q.stride(i); p.k_stride[i] = k.stride(i); p.v_stride[i] = v.stride(i); p.out_stride[i] = out.stride(i);
  }
  if (cu_seqlens_q) { p.q_stride[1] = q.stride(0); p.out_stride[1] = out.stride(0); }  // packed rows
  auto i32 = [](const std::optional<torch::Tensor>& t) -> const int32_t* {
    if (!t) return nullptr;
    TORCH_CHECK(t->is_cuda() && t->scalar_type() == torch::kInt32 && t->is_contiguous(), "int32 CUDA tensors");
    return t->data_ptr<int32_t>();
  };
  p.cache_seqlens = i32(cache_seqlens);
  p.kv_batch_index = i32(kv_batch_index);
  p.cu_seqlens_q = i32(cu_seqlens_q);
  p.lse = lse ? lse->data_ptr<float>() : nullptr;
  p.options = &g_options;
  return p;
}

int64_t workspace_bytes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& out,
                        int64_t kv_len, std::optional<torch::Tensor> cache_seqlens,
                        std::optional<torch::Tensor> kv_batch_index, std::optional<torch::Tensor> cu_seqlens_q,
                        std::optional<torch::Tensor> lse, int64_t q_len) {
  return static_cast<int64_t>(pvt::decode_attention_cuda_workspace_bytes(
      params(q, k, v, out, kv_len, cache_seqlens, kv_batch_index, cu_seqlens_q, lse, q_len)));
}

void attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, torch::Tensor& out,
               int64_t kv_len, const torch::Tensor& workspace, std::optional<torch::Tensor> cache_seqlens,
               std::optional<torch::Tensor> kv_batch_index, std::optional<torch::Tensor> cu_seqlens_q,
               std::optional<torch::Tensor> lse, int64_t q_len) {
  auto p = params(q, k, v, out, kv_len, cache_seqlens, kv_batch_index, cu_seqlens_q, lse, q_len);
  p.workspace = workspace.numel() ? workspace.data_ptr() : nullptr;
  p.workspace_bytes = static_cast<size_t>(workspace.numel());
  check(pvt::decode_attention_cuda(p, stream()));
}

pybind11::dict plan(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& out,
                    int64_t kv_len, std::optional<torch::Tensor> cache_seqlens, std::optional<torch::Tensor> kv_batch_index,
                    std::optional<torch::Tensor> cu_seqlens_q, std::optional<torch::Tensor> lse, int64_t q_len) {
  pvt::decode_plan::Plan pl;
  check(pvt::decode_attention_cuda_plan(params(q, k, v, out, kv_len, cache_seqlens, kv_batch_index, cu_seqlens_q, lse, q_len), &pl));
  pybind11::dict d;
  d["kernel"] = pl.mma_rows ? "mma_rows" : pl.mma_kernel ? "mma" : pl.rows_kernel ? "rows" : "one_row";
  d["mma_tiles"] = pl.mma_tiles;
  d["row_groups"] = pl.row_groups;
  d["mma_warps"] = pl.mma_warps;
  d["splits"] = pl.splits;
  d["cluster"] = pl.cluster;
  d["balance_grid"] = pl.balance_grid;
  d["balance_plain_splits"] = pl.balance_plain_splits;
  d["workspace_bytes"] = pl.workspace_bytes;
  d["merge_wide"] = pl.merge_wide;
  d["warp_keys"] = pl.mma_warp_keys;
  return d;
}

// What the device says about one tensor-core instance, as a dict (tiles: the key-slice kernel's M-tiles, or
// "rows" for the row-owning kernel).
pybind11::dict facts_dict(const pvt::decode_cuda::MmaFacts& f, int D, int warps, pybind11::object tiles) {
  pybind11::dict d;
  d["head_dim"] = D;
  d["warps"] = warps;
  d["tiles"] = tiles;
  d["sm80"] = f.sm80;
  d["resident"] = f.resident;
  d["cluster_limit"] = f.cluster_limit;
  d["query_error"] = f.query_error;
  d["max_clusters"] = std::vector<int>(f.max_clusters + 2, f.max_clusters + pvt::decode_plan::kMaxClusterSplits + 1);
  return d;
}

pybind11::list mma_probe() {
  namespace dc = pvt::decode_cuda;
  const pvt::ScalarType h = pvt::ScalarType::kFloat16;
  pybind11::list out;
  for (int D : {64, 80, 96, 128, 256})
    for (int tiles : {1, 2, 4, 8})
      for (int warps : {4, 8}) {
        dc::MmaFacts f;
        switch (D) {
          case 64: f = dc::mma_facts<64>(h, warps, tiles, 16); break;
          case 80: f = dc::mma_facts<80>(h, warps, tiles, 16); break;
          case 96: f = dc::mma_facts<96>(h, warps, tiles, 16); break;
          case 128: f = dc::mma_facts<128>(h, warps, tiles, 16); break;
          default: f = dc::mma_facts<256>(h, warps, tiles, 16); break;
        }
        if (f.exists) out.append(facts_dict(f, D, warps, pybind11::int_(tiles)));
      }
  for (int D : {64, 80, 96, 128, 256})  // the row-owning kernel's instances
    for (int warps : {2, 4, 8}) {
      dc::MmaFacts f;
      switch (D) {
        case 64: f = dc::mma_rows_facts<64>(h, warps); break;
        case 80: f = dc::mma_rows_facts<80>(h, warps); break;
        case 96: f = dc::mma_rows_facts<96>(h, warps); break;
        case 128: f = dc::mma_rows_facts<128>(h, warps); break;
        default: f = dc::mma_rows_facts<256>(h, warps); break;
      }
      if (f.exists) out.append(facts_dict(f, D, warps, pybind11::str("rows")));
    }
  return out;
}

// A CUDA tensor of one dtype, contiguous, with `numel` elements (-1: any): speculative_accept's arrays.
template <typename T>
T* spec_array(const torch::Tensor& t, torch::ScalarType dtype, int64_t numel, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == dtype && t.is_contiguous(), "speculative_accept: ", name,
              " must be a contiguous CUDA tensor of ", dtype, ", got ", t.scalar_type(), t.is_cuda() ? "" : " (not CUDA)");
  TORCH_CHECK(numel < 0 || t.numel() == numel, "speculative_accept: ", name, " must have ", numel, " elements, got ", t.numel());
  return static_cast<T*>(t.data_ptr());
}

// draft [n, k] int64, target [n, k+1] int64, slots [n] int32; seqlens int32 [slots] of each cache (updated
// in place), out_ids [n, max_new] int64, out_len / finished / accepted [n] int32, next_tokens [n] int64,
// error_flag [1] int32. The capacities are the caches' max lengths. Queued on the current stream.
void speculative_accept(const torch::Tensor& draft, const torch::Tensor& target, const torch::Tensor& slots,
                        torch::Tensor& target_seqlens, torch::Tensor& draft_seqlens, torch::Tensor& out_ids,
                        torch::Tensor& out_len, torch::Tensor& finished, torch::Tensor& accepted,
                        torch::Tensor& next_tokens, torch::Tensor& error_flag, int64_t target_capacity,
                        int64_t draft_capacity, int64_t target_advance, int64_t draft_advance, int64_t eos_token_id,
                        int64_t pad_token_id) {
  TORCH_CHECK(draft.dim() == 2 && target.dim() == 2 && out_ids.dim() == 2, "speculative_accept: draft [n, k], target "
              "[n, k+1] and out_ids [n, max_new] are 2-d");
  const int64_t n = draft.size(0), k = draft.size(1);
  TORCH_CHECK(target.size(0) == n && target.size(1) == k + 1 && out_ids.size(0) == n, "speculative_accept: target must "
              "be [", n, ", ", k + 1, "] and out_ids [", n, ", max_new], got ", target.sizes(), " and ", out_ids.sizes());
  pvt::SpeculativeAcceptParams p;
  p.batch = n;
  p.num_draft = k;
  p.draft_tokens = spec_array<const int64_t>(draft, torch::kInt64, n * k, "draft");
  p.target_tokens = spec_array<const int64_t>(target, torch::kInt64, n * (k + 1), "target");
  p.slot_ids = spec_array<const int32_t>(slots, torch::kInt32, n, "slots");
  p.target_seqlens = spec_array<int32_t>(target_seqlens, torch::kInt32, -1, "target_seqlens");
  p.target_num_slots = target_seqlens.numel();
  p.target_capacity = target_capacity;
  p.target_advance = target_advance;
  p.draft_seqlens = spec_array<int32_t>(draft_seqlens, torch::kInt32, -1, "draft_seqlens");
  p.draft_num_slots = draft_seqlens.numel();
  p.draft_capacity = draft_capacity;
  p.draft_advance = draft_advance;
  p.out_ids = spec_array<int64_t>(out_ids, torch::kInt64, -1, "out_ids");
  p.max_new_tokens = out_ids.size(1);
  p.out_len = spec_array<int32_t>(out_len, torch::kInt32, n, "out_len");
  p.finished = spec_array<int32_t>(finished, torch::kInt32, n, "finished");
  p.eos_token_id = eos_token_id;
  p.pad_token_id = pad_token_id;
  p.accepted = spec_array<int32_t>(accepted, torch::kInt32, n, "accepted");
  p.next_tokens = spec_array<int64_t>(next_tokens, torch::kInt64, n, "next_tokens");
  p.error_flag = spec_array<int32_t>(error_flag, torch::kInt32, 1, "error_flag");
  check(pvt::speculative_accept_cuda(p, stream()));
}

// ---- 8-bit caches.
pvt::KvQuant quant_kind(const Cache& c) {
  TORCH_CHECK(c.dtype == torch::kFloat8_e4m3fn || c.dtype == torch::kInt8, "quant: the cache must be float8_e4m3fn or int8");
  return c.dtype == torch::kInt8 ? pvt::KvQuant::kInt8 : pvt::KvQuant::kFp8E4M3;
}

// The scales tensor of c's kind: fp8 float32 [H]; int8 float32 [capacity, B, H], contiguous, on the GPU.
void check_scales(const Cache& c, const torch::Tensor& scale) {
  const auto& s = c.cache->shape();
  const bool fp8 = quant_kind(c) == pvt::KvQuant::kFp8E4M3;
  TORCH_CHECK(scale.is_cuda() && scale.scalar_type() == torch::kFloat32 && scale.is_contiguous(),
              "quant: scales must be a contiguous float32 CUDA tensor");
  if (fp8) {
    TORCH_CHECK(scale.dim() == 1 && scale.size(0) == s.heads, "quant: fp8 scales must be [", s.heads, "]");
  } else {
    TORCH_CHECK(scale.dim() == 3 && scale.size(0) == c.cache->capacity_tokens() && scale.size(1) == s.batch &&
                scale.size(2) == s.heads, "quant: int8 scales must be [capacity, ", s.batch, ", ", s.heads, "]");
  }
}

// tokens [B, T, H, D] (float16/bfloat16/float32, any strides, head_dim contiguous) quantized into the
// cache at token position pos (already begun); int8 writes their scales at [pos, pos + T).
void quant_append(Cache& c, const torch::Tensor& src, int64_t pos, torch::Tensor& scale) {
  const auto& s = c.cache->shape();
  TORCH_CHECK(src.is_cuda() && src.dim() == 4 && src.size(0) == s.batch && src.size(2) == s.heads &&
              src.size(3) == s.head_dim && src.stride(3) == 1, "quant_append: src must be a CUDA [B, T, H, D] tensor, D contiguous");
  check_scales(c, scale);
  pvt::QuantAppendParams p;
  p.kind = quant_kind(c);
  p.src_type = dtype_of(src);
  p.outer = s.batch, p.inner = src.size(1), p.heads = s.heads, p.head_dim = s.head_dim;
  p.src = src.data_ptr();
  for (int i = 0; i < 3; ++i) p.src_stride[i] = src.stride(i);
  const int64_t row = s.batch * s.heads * s.head_dim;  // one token of the [capacity, B, H, D] codes
  p.dst = c.cache->data() + pos * row;
  p.dst_stride[0] = s.heads * s.head_dim, p.dst_stride[1] = row, p.dst_stride[2] = s.head_dim;
  if (p.kind == pvt::KvQuant::kInt8) {
    p.scale = scale.data_ptr<float>() + pos * s.batch * s.heads;
    p.scale_stride[0] = s.heads, p.scale_stride[1] = s.batch * s.heads, p.scale_stride[2] = 1;
  } else {
    p.scale = scale.data_ptr<float>();
    p.scale_stride[2] = 1;
  }
  check(pvt::quant_append_cuda(p, stream()));
  check(c.cache->record_use(stream()));
}

// q/out [B, 1, Hq, D] float16/bfloat16; K and V the caches' codes, kv_len tokens (or cache_seqlens + 1).
pvt::QuantAttentionParams quant_params(const torch::Tensor& q, const Cache& k, const Cache& v, const torch::Tensor& out,
                                       int64_t kv_len, const torch::Tensor& k_scale, const torch::Tensor& v_scale,
                                       const std::optional<torch::Tensor>& cache_seqlens) {
  TORCH_CHECK(quant_kind(k) == quant_kind(v), "quant_attention: K and V caches of one kind");
  check_scales(k, k_scale);
  check_scales(v, v_scale);
  pvt::QuantAttentionParams p;
  p.attn = params(q, k.tensor(), v.tensor(), out, kv_len, cache_seqlens, std::nullopt, std::nullopt, std::nullopt, 1);
  p.kind = quant_kind(k);
  p.k_scale = k_scale.data_ptr<float>();
  p.v_scale = v_scale.data_ptr<float>();
  const auto& s = k.cache->shape();
  for (int64_t* st : {p.k_scale_stride, p.v_scale_stride}) {
    if (p.kind == pvt::KvQuant::kInt8) {
      st[0] = s.batch * s.heads, st[1] = s.heads, st[2] = 1;
    } else {
      st[0] = st[1] = 0, st[2] = 1;
    }
  }
  return p;
}

int64_t quant_workspace_bytes(const torch::Tensor& q, const Cache& k, const Cache& v, const torch::Tensor& out,
                              int64_t kv_len, const torch::Tensor& k_scale, const torch::Tensor& v_scale,
                              std::optional<torch::Tensor> cache_seqlens) {
  return static_cast<int64_t>(
      pvt::quant_attention_cuda_workspace_bytes(quant_params(q, k, v, out, kv_len, k_scale, v_scale, cache_seqlens)));
}

void quant_attention(const torch::Tensor& q, const Cache& k, const Cache& v, torch::Tensor& out, int64_t kv_len,
                     const torch::Tensor& k_scale, const torch::Tensor& v_scale, const torch::Tensor& workspace,
                     std::optional<torch::Tensor> cache_seqlens) {
  auto p = quant_params(q, k, v, out, kv_len, k_scale, v_scale, cache_seqlens);
  p.attn.workspace = workspace.numel() ? workspace.data_ptr() : nullptr;
  p.attn.workspace_bytes = static_cast<size_t>(workspace.numel());
  check(pvt::quant_attention_cuda(p, stream()));
}

int64_t mapped_bytes_total() { return pvt::memory_stats(pvt::Device::cuda(c10::cuda::current_device())).mapped_bytes; }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  pybind11::class_<Cache>(m, "Cache")
      .def(pybind11::init<int64_t, int64_t, int64_t, const std::string&, int64_t, int64_t>(), pybind11::arg("batch"),
           pybind11::arg("heads"), pybind11::arg("head_dim"), pybind11::arg("dtype"), pybind11::arg("capacity"),
           pybind11::arg("chunk_bytes") = 0)
      .def("tensor", &Cache::tensor)
      .def("reserve", &Cache::reserve)
      .def("begin_append", &Cache::begin_append)
      .def("remove_view", &Cache::remove_view)
      .def("mapped_bytes", &Cache::mapped_bytes)
      .def("reserved_bytes", &Cache::reserved_bytes);
  m.def("append", &append);
  const auto opt = [](const char* n) { return pybind11::arg(n) = pybind11::none(); };
  m.def("workspace_bytes", &workspace_bytes, pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"),
        pybind11::arg("out"), pybind11::arg("kv_len"), opt("cache_seqlens"), opt("kv_batch_index"),
        opt("cu_seqlens_q"), opt("lse"), pybind11::arg("q_len") = 1);
  m.def("attention", &attention, pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("out"),
        pybind11::arg("kv_len"), pybind11::arg("workspace"), opt("cache_seqlens"), opt("kv_batch_index"),
        opt("cu_seqlens_q"), opt("lse"), pybind11::arg("q_len") = 1);
  m.def("plan", &plan, pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("out"),
        pybind11::arg("kv_len"), opt("cache_seqlens"), opt("kv_batch_index"), opt("cu_seqlens_q"), opt("lse"),
        pybind11::arg("q_len") = 1);
  m.def("mma_probe", &mma_probe);
  m.def("quant_append", &quant_append, pybind11::arg("cache"), pybind11::arg("src"), pybind11::arg("pos"),
        pybind11::arg("scale"));
  m.def("quant_workspace_bytes", &quant_workspace_bytes, pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"),
        pybind11::arg("out"), pybind11::arg("kv_len"), pybind11::arg("k_scale"), pybind11::arg("v_scale"),
        opt("cache_seqlens"));
  m.def("quant_attention", &quant_attention, pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"),
        pybind11::arg("out"), pybind11::arg("kv_len"), pybind11::arg("k_scale"), pybind11::arg("v_scale"),
        pybind11::arg("workspace"), opt("cache_seqlens"));
  m.def("mapped_bytes_total", &mapped_bytes_total);
  m.def("speculative_accept", &speculative_accept, pybind11::arg("draft"), pybind11::arg("target"),
        pybind11::arg("slots"), pybind11::arg("target_seqlens"), pybind11::arg("draft_seqlens"),
        pybind11::arg("out_ids"), pybind11::arg("out_len"), pybind11::arg("finished"), pybind11::arg("accepted"),
        pybind11::arg("next_tokens"), pybind11::arg("error_flag"), pybind11::arg("target_capacity"),
        pybind11::arg("draft_capacity"), pybind11::arg("target_advance") = 1, pybind11::arg("draft_advance") = 0,
        pybind11::arg("eos_token_id") = -1, pybind11::arg("pad_token_id") = 0);
  const pvt::DecodeOptions defaults;
  m.def("set_decode_options", &set_decode_options, pybind11::arg("splits") = defaults.splits,
        pybind11::arg("no_mma") = defaults.no_mma, pybind11::arg("mma_mha") = defaults.mma_mha,
        pybind11::arg("mma_warps") = defaults.mma_warps, pybind11::arg("no_pdl") = defaults.no_pdl,
        pybind11::arg("no_cluster") = defaults.no_cluster, pybind11::arg("mma_blocks_per_sm") = defaults.mma_blocks_per_sm,
        pybind11::arg("mma_row_tiles") = defaults.mma_row_tiles,
        pybind11::arg("split_keys") = defaults.split_keys, pybind11::arg("balance") = defaults.balance,
        pybind11::arg("mma_row_warps") = defaults.mma_row_warps,
        pybind11::arg("balance_blocks_per_sm") = defaults.balance_blocks_per_sm,
        pybind11::arg("merge_chunk") = defaults.merge_chunk, pybind11::arg("merge_wide") = defaults.merge_wide,
        pybind11::arg("mma_warp_keys") = defaults.mma_warp_keys);
  m.def("decode_options", &decode_options);
}

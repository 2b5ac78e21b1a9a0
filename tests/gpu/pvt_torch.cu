// A small PyTorch extension over the framework-free core and kernels (custom_ops/core, kernels), for
// the H200 harness in tests/gpu/: no Paddle there, so the decode loop and the attention comparison are
// driven from PyTorch. Not part of the installed package; built on the machine by build.py.
//   Cache          a SeqMajorCache (VM reservation, chunks mapped as it grows) seen as a torch tensor
//   append         append_tokens_cuda: tokens [B, T, H, D] written in place at a host position
//   attention      decode_attention_cuda over any strided K/V (seq-major cache, slot cache, [B,H,S,D])
//   set_decode_options / decode_options   the benchmark knobs (pvt::DecodeOptions) every later call
//                  plans with; set_decode_options() with no argument restores the defaults
//   plan           the plan attention() would launch for these arguments (kernel family, M-tiles, splits):
//                  what a benchmark records next to each time, so that a silent fallback shows
//   mma_probe      what the device says about each tensor-core instance (built, sm_80 code, blocks an
//                  SM, the CUDA error of a failed query)
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <memory>
#include <optional>
#include <string>

#include "core/apis.h"
#include "kernels/append_tokens.h"
#include "kernels/decode_attention.h"
#include "kernels/decode_attention_mma_launch_cuda.cuh"
#include "kernels/decode_attention_plan.h"

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
                        int64_t mma_blocks_per_sm) {
  pvt::DecodeOptions o;
  o.splits = splits;
  o.no_mma = no_mma;
  o.mma_mha = mma_mha;
  o.mma_warps = static_cast<int>(mma_warps);
  o.no_pdl = no_pdl;
  o.no_cluster = no_cluster;
  o.mma_blocks_per_sm = static_cast<int>(mma_blocks_per_sm);
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
  return d;
}

struct Cache {
  std::shared_ptr<pvt::SeqMajorCache> cache;
  torch::ScalarType dtype;

  Cache(int64_t batch, int64_t heads, int64_t head_dim, const std::string& dt, int64_t capacity, int64_t chunk_bytes)
      : dtype(dt == "float16" ? torch::kFloat16 : dt == "bfloat16" ? torch::kBFloat16 : torch::kFloat32) {
    TORCH_CHECK(dt == "float16" || dt == "bfloat16" || dt == "float32", "Cache: dtype float16, bfloat16 or float32");
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
  d["kernel"] = pl.mma_kernel ? "mma" : pl.rows_kernel ? "rows" : "one_row";
  d["mma_tiles"] = pl.mma_tiles;
  d["mma_warps"] = pl.mma_warps;
  d["splits"] = pl.splits;
  d["cluster"] = pl.cluster;
  d["workspace_bytes"] = pl.workspace_bytes;
  return d;
}

pybind11::list mma_probe() {
  namespace dc = pvt::decode_cuda;
  pybind11::list out;
  for (int D : {64, 80, 96, 128, 256})
    for (int tiles : {1, 2, 4, 8})
      for (int warps : {4, 8}) {
        dc::MmaFacts f;
        switch (D) {
          case 64: f = dc::mma_facts<64>(pvt::ScalarType::kFloat16, warps, tiles); break;
          case 80: f = dc::mma_facts<80>(pvt::ScalarType::kFloat16, warps, tiles); break;
          case 96: f = dc::mma_facts<96>(pvt::ScalarType::kFloat16, warps, tiles); break;
          case 128: f = dc::mma_facts<128>(pvt::ScalarType::kFloat16, warps, tiles); break;
          default: f = dc::mma_facts<256>(pvt::ScalarType::kFloat16, warps, tiles); break;
        }
        if (!f.exists) continue;
        pybind11::dict d;
        d["head_dim"] = D;
        d["warps"] = warps;
        d["tiles"] = tiles;
        d["sm80"] = f.sm80;
        d["resident"] = f.resident;
        d["cluster_limit"] = f.cluster_limit;
        d["query_error"] = f.query_error;
        out.append(d);
      }
  return out;
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
  m.def("mapped_bytes_total", &mapped_bytes_total);
  const pvt::DecodeOptions defaults;
  m.def("set_decode_options", &set_decode_options, pybind11::arg("splits") = defaults.splits,
        pybind11::arg("no_mma") = defaults.no_mma, pybind11::arg("mma_mha") = defaults.mma_mha,
        pybind11::arg("mma_warps") = defaults.mma_warps, pybind11::arg("no_pdl") = defaults.no_pdl,
        pybind11::arg("no_cluster") = defaults.no_cluster, pybind11::arg("mma_blocks_per_sm") = defaults.mma_blocks_per_sm);
  m.def("decode_options", &decode_options);
}

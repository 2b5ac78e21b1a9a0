// PyTorch binding of the merge kernel (custom_ops/kernels/merge_attention_states_cuda.cu) for the
// sequence-parallel H200 script (sp_decode.py). Kept apart from tests/gpu/pvt_torch.cu (the core,
// append and attention bindings) so the two scripts build independently; sp_build.py compiles it.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#include <vector>

#include "kernels/merge_attention_states.h"

namespace {

pvt::ScalarType dtype_of(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return pvt::ScalarType::kFloat32;
    case torch::kFloat16: return pvt::ScalarType::kFloat16;
    case torch::kBFloat16: return pvt::ScalarType::kBFloat16;
    default: TORCH_CHECK(false, "merge: unsupported dtype ", t.scalar_type());
  }
}

// outs: n tensors [..., H, D] (contiguous, one dtype, CUDA); lses: n float32 [..., H]. Writes out
// ([..., H, D]) and lse ([..., H], float32), which the caller allocates.
void merge(const std::vector<torch::Tensor>& outs, const std::vector<torch::Tensor>& lses, torch::Tensor& out,
           torch::Tensor& lse) {
  TORCH_CHECK(!outs.empty() && outs.size() == lses.size(), "merge: as many lses as outs, at least one");
  TORCH_CHECK(static_cast<int64_t>(outs.size()) <= pvt::kMaxMergeParts, "merge: too many parts");
  pvt::MergeAttentionStatesParams p;
  p.num_parts = static_cast<int64_t>(outs.size());
  p.head_dim = out.size(-1);
  p.rows = out.numel() / p.head_dim;
  p.dtype = dtype_of(out);
  TORCH_CHECK(out.is_cuda() && out.is_contiguous() && lse.is_contiguous() && lse.scalar_type() == torch::kFloat32 &&
                  lse.numel() == p.rows, "merge: out/lse must be contiguous CUDA tensors, lse float32 [rows]");
  for (size_t i = 0; i < outs.size(); ++i) {
    TORCH_CHECK(outs[i].sizes() == out.sizes() && outs[i].scalar_type() == out.scalar_type() && outs[i].is_contiguous(),
                "merge: part ", i, " must match out in shape and dtype, contiguous");
    TORCH_CHECK(lses[i].numel() == p.rows && lses[i].scalar_type() == torch::kFloat32 && lses[i].is_contiguous(),
                "merge: lse ", i, " must be float32 [rows], contiguous");
    p.outs[i] = outs[i].data_ptr();
    p.lses[i] = lses[i].data_ptr<float>();
  }
  p.out = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  const pvt::Status s = pvt::merge_attention_states_cuda(p, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(s.ok(), s.to_string());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("merge", &merge); }

// vtensor_merge_attention_states: exact merge of attention computed over parts of a key set.
//   Outs  n tensors [..., H, D], one dtype (float32, float16, bfloat16), one shape, one place
//   Lses  n float32 tensors [..., H] (the outputs' shape without D): each part's log-sum-exp
//   Out   [..., H, D] in the outputs' dtype;  Lse  [..., H] float32, the whole key set's log-sum-exp
// Parts that saw no key carry lse -inf (weight 0); see kernels/merge_attention_states.h.
#include <string>

#include "../op_names.h"
#include "op_support.h"
#include "vtensor_slot_common.h"
#include "../kernels/merge_attention_states.h"

namespace {

constexpr const char* kOp = pvt::names::kMergeAttentionStates;

using pvt::dims_str;

pvt::ScalarType scalar_type(phi::DataType dtype) { return pvt::scalar_type_of(dtype, kOp, "each output"); }

void check_inputs(const std::vector<paddle::Tensor>& outs, const std::vector<paddle::Tensor>& lses) {
  PD_CHECK(!outs.empty(), kOp, ": needs at least one part, got none");
  PD_CHECK(outs.size() == lses.size(), kOp, ": got ", outs.size(), " outputs but ", lses.size(),
           " lse tensors; each part needs both");
  PD_CHECK(static_cast<int64_t>(outs.size()) <= pvt::kMaxMergeParts, kOp, ": at most ", pvt::kMaxMergeParts,
           " parts per merge, got ", outs.size());
  const paddle::Tensor& o0 = outs[0];
  const phi::DDim& d0 = o0.dims();
  PD_CHECK(d0.size() >= 2, kOp, ": outputs must be [..., heads, head_dim] (rank >= 2), got ", dims_str(d0));
  // First among the shape checks: rows = numel / head_dim below needs a non-empty head_dim.
  PD_CHECK(o0.numel() > 0, kOp, ": outputs must not be empty (every dimension >= 1), got shape ", dims_str(d0));
  scalar_type(o0.dtype());
  for (size_t i = 0; i < outs.size(); ++i) {
    const paddle::Tensor& o = outs[i];
    const paddle::Tensor& l = lses[i];
    PD_CHECK(o.dims() == d0, kOp, ": part ", i, "'s output has shape ", dims_str(o.dims()), " but part 0's has ",
             dims_str(d0), "; every part must have the same shape");
    PD_CHECK(o.dtype() == o0.dtype(), kOp, ": part ", i, "'s output is ", phi::DataTypeToString(o.dtype()),
             " but part 0's is ", phi::DataTypeToString(o0.dtype()));
    PD_CHECK(l.dtype() == phi::DataType::FLOAT32, kOp, ": part ", i, "'s lse must be float32, got ",
             phi::DataTypeToString(l.dtype()));
    PD_CHECK(l.dims().size() == d0.size() - 1, kOp, ": part ", i, "'s lse has shape ", dims_str(l.dims()),
             "; expected the output's shape without head_dim, ", dims_str(phi::slice_ddim(d0, 0, d0.size() - 1)));
    for (int j = 0; j < d0.size() - 1; ++j) {
      PD_CHECK(l.dims()[j] == d0[j], kOp, ": part ", i, "'s lse has shape ", dims_str(l.dims()),
               "; expected the output's shape without head_dim, ", dims_str(phi::slice_ddim(d0, 0, d0.size() - 1)));
    }
    PD_CHECK(o.is_contiguous() && l.is_contiguous(), kOp, ": part ", i, " is not contiguous");
    pvt::refuse_slot_cache(o, kOp, "an output");
    pvt::refuse_slot_cache(l, kOp, "an lse");
    PD_CHECK(o.place() == o0.place() && l.place() == o0.place(), kOp, ": part ", i, " is on ",
             o.place().DebugString(), " (lse on ", l.place().DebugString(), ") but part 0's output is on ",
             o0.place().DebugString(), "; all parts must share a place");
  }
}

}  // namespace

std::vector<paddle::Tensor> VTensorMergeAttentionStates(const std::vector<paddle::Tensor>& outs,
                                                        const std::vector<paddle::Tensor>& lses) {
  check_inputs(outs, lses);
  const phi::DDim& d0 = outs[0].dims();
  std::vector<int64_t> out_shape = phi::vectorize(d0);
  std::vector<int64_t> lse_shape(out_shape.begin(), out_shape.end() - 1);
  paddle::Tensor out = paddle::empty(out_shape, outs[0].dtype(), outs[0].place());
  paddle::Tensor lse = paddle::empty(lse_shape, phi::DataType::FLOAT32, outs[0].place());

  pvt::MergeAttentionStatesParams p;
  p.num_parts = static_cast<int64_t>(outs.size());
  p.head_dim = d0[d0.size() - 1];
  p.rows = outs[0].numel() / p.head_dim;
  p.dtype = scalar_type(outs[0].dtype());
  // Paddle hands custom ops contiguous inputs, so [rows, D] and [rows] are the memory layout.
  for (size_t i = 0; i < outs.size(); ++i) {
    p.outs[i] = outs[i].data();
    p.lses[i] = lses[i].data<float>();
  }
  p.out = out.data();
  p.lse = lse.data<float>();

  if (outs[0].place().GetType() == phi::AllocationType::CPU) {
    pvt::throw_if_error(pvt::merge_attention_states_cpu(p), kOp);
    return {out, lse};
  }
#ifdef PADDLE_VTENSOR_WITH_CUDA
  pvt::DeviceGuard guard(outs[0].place(), kOp);
  pvt::throw_if_error(pvt::merge_attention_states_cuda(p, pvt::stream_of(outs[0])), kOp);
  return {out, lse};
#else
  PD_THROW(kOp, ": this build of paddle_vtensor has no CUDA kernels (tensor on ", outs[0].place().DebugString(), ")");
#endif
}

std::vector<std::vector<int64_t>> VTensorMergeAttentionStatesInferShape(
    const std::vector<std::vector<int64_t>>& out_shapes, const std::vector<std::vector<int64_t>>&) {
  std::vector<int64_t> out = out_shapes.empty() ? std::vector<int64_t>{} : out_shapes[0];
  std::vector<int64_t> lse(out.begin(), out.empty() ? out.end() : out.end() - 1);
  return {out, lse};
}

std::vector<paddle::DataType> VTensorMergeAttentionStatesInferDtype(const std::vector<paddle::DataType>& out_dtypes,
                                                                    const std::vector<paddle::DataType>&) {
  return {out_dtypes.empty() ? paddle::DataType::FLOAT32 : out_dtypes[0], paddle::DataType::FLOAT32};
}

PVT_BUILD_OP(PVT_OP_MERGE_ATTENTION_STATES)
    .Inputs({paddle::Vec("Outs"), paddle::Vec("Lses")})
    .Outputs({"Out", "Lse"})
    .SetKernelFn(PD_KERNEL(VTensorMergeAttentionStates))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorMergeAttentionStatesInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorMergeAttentionStatesInferDtype));

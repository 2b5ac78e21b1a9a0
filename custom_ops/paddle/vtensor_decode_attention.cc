// vtensor_decode_attention: attention of a few new query tokens over a KV cache read in place.
//   Q     [B, Tq, Hq, D]
//   K, V  [S, B, Hkv, D]  storage views of the logical [B, S, Hkv, D] caches (contiguous for a
//                         VTensor; Paddle makes any other input contiguous first); Hq % Hkv == 0
//   Mask  optional [B or 1, Hq or 1, Tq or 1, S]: bool (true = attend) or additive float
//         (float32 or Q's dtype), as PaddleNLP builds it ([B, 1, Tq, S]). Absent: causal.
//   attr scale (any finite value; the Python wrapper passes 1/sqrt(D) by default)
//   Out   [B, Tq, Hq, D], Q's dtype.
// vtensor_decode_attention_lse: the same, plus
//   Lse   [B, Tq, Hq] float32, log(sum_s exp(score)) per query and head (-inf for a query that sees no
//         key), to merge attention over parts of the cache (vtensor_merge_attention_states).
// Two registrations rather than an optional output: Paddle's custom ops allow optional outputs only
// in place, and the static pass (passes/attention_rewrite.cc) builds the one-output op.
#include <cmath>
#include <string>

#include "../op_names.h"
#include "append_common.h"
#include "../kernels/decode_attention.h"
#ifdef PADDLE_VTENSOR_WITH_CUDA
#include "../kernels/decode_attention_plan.h"
#include "../kernels/split_counters.h"
#endif

namespace {

constexpr const char* kOp = pvt::names::kDecodeAttention;
using pvt::dims_str;

// Paddle dtype -> kernel scalar type (bool only makes sense for the mask; q's bool is refused by the
// q/k/v dtype checks).
pvt::ScalarType scalar_type(phi::DataType dtype, const char* what) {
  return pvt::scalar_type_of(dtype, kOp, what, /*allow_bool=*/true);
}

// The op's only checks: the Python wrapper passes its arguments straight through.
void check_inputs(const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
                  const paddle::optional<paddle::Tensor>& mask, float scale) {
  pvt::check_defined(q, kOp, "q");
  pvt::check_defined(k, kOp, "the key cache");
  pvt::check_defined(v, kOp, "the value cache");
  if (mask) pvt::check_defined(*mask, kOp, "the mask");
  pvt::refuse_slot_cache(q, kOp, "q");
  pvt::refuse_slot_cache(k, kOp, "the key cache");
  pvt::refuse_slot_cache(v, kOp, "the value cache");
  if (mask) pvt::refuse_slot_cache(*mask, kOp, "the mask");
  PD_CHECK(std::isfinite(scale), kOp, ": scale must be finite, got ", scale);
  const auto& qd = q.dims();
  const auto& kd = k.dims();
  PD_CHECK(qd.size() == 4, kOp, ": q must have rank 4 [batch, q_len, q_heads, head_dim], got shape ",
           dims_str(qd));
  PD_CHECK(kd.size() == 4, kOp,
           ": the key cache must have rank 4 (storage view [seq, batch, kv_heads, head_dim]), got shape ",
           dims_str(kd));
  PD_CHECK(v.dims() == kd, kOp, ": the value cache (storage view) has shape ", dims_str(v.dims()),
           " but the key cache has ", dims_str(kd));
  PD_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), kOp, ": q, k and v must share one dtype, got q ",
           phi::DataTypeToString(q.dtype()), ", k ", phi::DataTypeToString(k.dtype()), ", v ",
           phi::DataTypeToString(v.dtype()));
  PD_CHECK(q.dtype() != phi::DataType::BOOL, kOp, ": q must be float32, float16 or bfloat16, got bool");
  scalar_type(q.dtype(), "q");
  PD_CHECK(q.place() == k.place() && q.place() == v.place(), kOp, ": q is on ", q.place().DebugString(),
           ", k on ", k.place().DebugString(), ", v on ", v.place().DebugString(), "; all must share a place");
  const int64_t B = qd[0], Tq = qd[1], Hq = qd[2], D = qd[3], S = kd[0], Hkv = kd[2];
  PD_CHECK(kd[1] == B && kd[3] == D, kOp, ": the cache [batch, seq, kv_heads, head_dim] = [", kd[1], ", ", S,
           ", ", Hkv, ", ", kd[3], "] does not match q [batch, q_len, q_heads, head_dim] = ", dims_str(qd),
           " in batch or head_dim");
  PD_CHECK(B > 0 && Tq > 0 && Hq > 0 && D > 0, kOp, ": q must not be empty, got shape ", dims_str(qd));
  PD_CHECK(S > 0 && Hkv > 0, kOp, ": the cache must hold at least one token and one head, got [batch, seq, "
           "kv_heads, head_dim] = [", kd[1], ", ", S, ", ", Hkv, ", ", kd[3], "]");
  PD_CHECK(Hq % Hkv == 0, kOp, ": q_heads (", Hq, ") must be a multiple of the cache's kv_heads (", Hkv, ")");
  if (mask) {
    const auto& md = mask->dims();
    PD_CHECK(md.size() == 4 && (md[0] == B || md[0] == 1) && (md[1] == Hq || md[1] == 1) &&
                 (md[2] == Tq || md[2] == 1) && md[3] == S,
             kOp, ": the mask must broadcast to [batch, q_heads, q_len, kv_len] = [", B, ", ", Hq, ", ", Tq,
             ", ", S, "] (batch, q_heads and q_len may be 1), got ", dims_str(md));
    const phi::DataType mt = mask->dtype();
    PD_CHECK(mt == phi::DataType::BOOL || mt == phi::DataType::FLOAT32 || mt == q.dtype(), kOp,
             ": the mask must be bool, float32 or ", phi::DataTypeToString(q.dtype()), " (q's dtype), got ",
             phi::DataTypeToString(mt));
    PD_CHECK(mask->place() == q.place(), kOp, ": the mask is on ", mask->place().DebugString(),
             " but q is on ", q.place().DebugString());
  } else {
    PD_CHECK(S >= Tq, kOp, ": without a mask the attention is causal and needs kv_len >= q_len, got kv_len=",
             S, " q_len=", Tq);
  }
}

void copy_strides(const paddle::Tensor& t, int64_t (&dst)[4]) {
  const auto& st = t.strides();
  const auto& d = t.dims();
  for (int i = 0; i < 4; ++i) dst[i] = d[i] == 1 ? 0 : st[i];  // size-1 dims broadcast
}

// Out, and Lse when `with_lse`.
std::vector<paddle::Tensor> run(const paddle::Tensor& q, const paddle::Tensor& k, const paddle::Tensor& v,
                                const paddle::optional<paddle::Tensor>& mask, float scale, bool with_lse) {
  check_inputs(q, k, v, mask, scale);
  pvt::DeviceGuard guard(q.place(), kOp);
  const auto& qd = q.dims();
  paddle::Tensor out = paddle::empty({qd[0], qd[1], qd[2], qd[3]}, q.dtype(), q.place());

  pvt::DecodeAttentionParams p;
  p.batch = qd[0];
  p.q_len = qd[1];
  p.q_heads = qd[2];
  p.head_dim = qd[3];
  p.kv_len = k.dims()[0];
  p.kv_heads = k.dims()[2];
  p.dtype = scalar_type(q.dtype(), "q");
  p.scale = scale;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.out = out.data();
  copy_strides(q, p.q_stride);
  copy_strides(k, p.k_stride);
  copy_strides(v, p.v_stride);
  copy_strides(out, p.out_stride);
  std::vector<paddle::Tensor> result = {out};
  if (with_lse) {
    result.push_back(paddle::empty({qd[0], qd[1], qd[2]}, phi::DataType::FLOAT32, q.place()));
    p.lse = result.back().data<float>();
  }
  if (mask) {
    p.mask = mask->data();
    p.mask_type = scalar_type(mask->dtype(), "the mask");
    copy_strides(*mask, p.mask_stride);
  }

  if (q.place().GetType() == phi::AllocationType::CPU) {
    pvt::throw_if_error(pvt::decode_attention_cpu(p), kOp);
    return result;
  }
#ifdef PADDLE_VTENSOR_WITH_CUDA
  PD_CHECK(p.head_dim <= pvt::kCudaMaxHeadDim, kOp, ": head_dim ", p.head_dim,
           " is larger than the CUDA kernel supports (", pvt::kCudaMaxHeadDim, ")");
  // Planned once: the plan sizes the workspace and is what the launch runs.
  pvt::decode_plan::Plan plan;
  pvt::throw_if_error(pvt::decode_attention_cuda_plan(p, &plan), kOp);
  const size_t ws = plan.workspace_bytes;
  paddle::Tensor workspace;
  if (ws > 0) {
    workspace = paddle::empty({static_cast<int64_t>(ws)}, phi::DataType::UINT8, q.place());
    p.workspace = workspace.data();
    p.workspace_bytes = ws;
  }
  void* stream = pvt::stream_of(q);
  // The splits merged in their last block where the plan can: the stream's counters, kept for the process.
  pvt::throw_if_error(pvt::attach_split_counters(plan, stream, &p), kOp);
  pvt::throw_if_error(pvt::decode_attention_cuda_run(p, plan, stream), kOp);
  // The kernel reads K and V where they lie: their caches must not be released before it ran.
  pvt::record_cache_use(p.k, q.place(), stream, kOp);
  pvt::record_cache_use(p.v, q.place(), stream, kOp);
  return result;
#else
  PD_THROW(kOp, ": this build of paddle_vtensor has no CUDA kernels (tensor on ", q.place().DebugString(), ")");
#endif
}

}  // namespace

std::vector<paddle::Tensor> VTensorDecodeAttention(const paddle::Tensor& q, const paddle::Tensor& k,
                                                   const paddle::Tensor& v,
                                                   const paddle::optional<paddle::Tensor>& mask,
                                                   float scale) {
  return run(q, k, v, mask, scale, /*with_lse=*/false);
}

std::vector<std::vector<int64_t>> VTensorDecodeAttentionInferShape(
    const std::vector<int64_t>& q_shape, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const paddle::optional<std::vector<int64_t>>&) {
  return {q_shape};
}

std::vector<paddle::DataType> VTensorDecodeAttentionInferDtype(const paddle::DataType& q_dtype,
                                                               const paddle::DataType&,
                                                               const paddle::DataType&,
                                                               const paddle::optional<paddle::DataType>&) {
  return {q_dtype};
}

PVT_BUILD_OP(PVT_OP_DECODE_ATTENTION)
    .Inputs({"Q", "K", "V", paddle::Optional("Mask")})
    .Outputs({"Out"})
    .Attrs({PVT_ATTR_SCALE ": float"})
    .SetKernelFn(PD_KERNEL(VTensorDecodeAttention))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorDecodeAttentionInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorDecodeAttentionInferDtype));

// ---- vtensor_decode_attention_lse: the same attention, plus the log-sum-exp.

std::vector<paddle::Tensor> VTensorDecodeAttentionLse(const paddle::Tensor& q, const paddle::Tensor& k,
                                                      const paddle::Tensor& v,
                                                      const paddle::optional<paddle::Tensor>& mask,
                                                      float scale) {
  return run(q, k, v, mask, scale, /*with_lse=*/true);
}

std::vector<std::vector<int64_t>> VTensorDecodeAttentionLseInferShape(
    const std::vector<int64_t>& q_shape, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const paddle::optional<std::vector<int64_t>>&) {
  std::vector<int64_t> lse(q_shape.begin(), q_shape.size() == 4 ? q_shape.end() - 1 : q_shape.end());
  return {q_shape, lse};
}

std::vector<paddle::DataType> VTensorDecodeAttentionLseInferDtype(const paddle::DataType& q_dtype,
                                                                  const paddle::DataType&,
                                                                  const paddle::DataType&,
                                                                  const paddle::optional<paddle::DataType>&) {
  return {q_dtype, paddle::DataType::FLOAT32};
}

PVT_BUILD_OP(PVT_OP_DECODE_ATTENTION_LSE)
    .Inputs({"Q", "K", "V", paddle::Optional("Mask")})
    .Outputs({"Out", "Lse"})
    .Attrs({PVT_ATTR_SCALE ": float"})
    .SetKernelFn(PD_KERNEL(VTensorDecodeAttentionLse))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorDecodeAttentionLseInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorDecodeAttentionLseInferDtype));

// vtensor_quant_decode_attention: decode attention over 8-bit K/V caches read in place, dequantized
// in registers (kernels/kv_quant_attention.h).
//   Q       [B, Tq, Hq, D] float32, float16 or bfloat16
//   K, V    [S, B, Hkv, D] codes (float8_e4m3fn or int8, the same for both), storage views of
//           8-bit VTensors; Hq % Hkv == 0
//   KScale, VScale  fp8: [Hkv] float32; int8: [S, B, Hkv, 1] float32 storage views
//   Mask    optional, as vtensor_decode_attention ([B or 1, Hq or 1, Tq or 1, S], bool or additive)
//   attr scale (finite)
//   Out [B, Tq, Hq, D] Q's dtype;  Lse [B, Tq, Hq] float32 (log-sum-exp of the scores, -inf: no key)
#include <cmath>

#include "../kernels/kv_quant_attention.h"
#include "quant_common.h"

namespace {

constexpr const char* kOp = pvt::names::kQuantDecodeAttention;
using pvt::dims_str;

void copy_strides(const paddle::Tensor& t, int64_t (&dst)[4]) {
  const auto& st = t.strides();
  const auto& d = t.dims();
  for (int i = 0; i < 4; ++i) dst[i] = d[i] == 1 ? 0 : st[i];  // size-1 dims broadcast
}

void set_scale(const paddle::Tensor& s, pvt::KvQuant kind, const float** ptr, int64_t (&stride)[3]) {
  *ptr = s.data<float>();
  if (kind == pvt::KvQuant::kFp8E4M3) {
    stride[0] = 0, stride[1] = 0, stride[2] = 1;
  } else {
    const auto& d = s.dims();  // [S, B, H, 1] contiguous
    stride[0] = d[1] * d[2], stride[1] = d[2], stride[2] = 1;
  }
}

}  // namespace

std::vector<paddle::Tensor> VTensorQuantDecodeAttention(const paddle::Tensor& q, const paddle::Tensor& k,
                                                        const paddle::Tensor& k_scale, const paddle::Tensor& v,
                                                        const paddle::Tensor& v_scale,
                                                        const paddle::optional<paddle::Tensor>& mask, float scale) {
  pvt::check_defined(q, kOp, "q");
  pvt::check_defined(k, kOp, "the key cache");
  pvt::check_defined(v, kOp, "the value cache");
  pvt::refuse_slot_cache(k, kOp, "the key cache");
  pvt::refuse_slot_cache(v, kOp, "the value cache");
  const pvt::KvQuant kind = pvt::quant_kind_of(k.dtype(), kOp, "the key cache");
  PD_CHECK(v.dtype() == k.dtype(), kOp, ": the value cache has dtype ", phi::DataTypeToString(v.dtype()),
           " but the key cache has ", phi::DataTypeToString(k.dtype()));
  PD_CHECK(std::isfinite(scale), kOp, ": scale must be finite, got ", scale);
  const auto& qd = q.dims();
  const auto& kd = k.dims();
  PD_CHECK(qd.size() == 4, kOp, ": q must have rank 4 [batch, q_len, q_heads, head_dim], got shape ", dims_str(qd));
  PD_CHECK(kd.size() == 4 && v.dims() == kd, kOp, ": the key and value caches (storage views [seq, batch, "
           "kv_heads, head_dim]) must have one rank-4 shape, got ", dims_str(kd), " and ", dims_str(v.dims()));
  PD_CHECK(q.place() == k.place() && q.place() == v.place(), kOp, ": q, k and v must share a place");
  const pvt::ScalarType qt = pvt::scalar_type_of(q.dtype(), kOp, "q");
  const int64_t B = qd[0], Tq = qd[1], Hq = qd[2], D = qd[3], S = kd[0], Hkv = kd[2];
  PD_CHECK(kd[1] == B && kd[3] == D && B > 0 && Tq > 0 && D > 0 && S > 0 && Hkv > 0 && Hq % Hkv == 0, kOp,
           ": q ", dims_str(qd), " and the cache [batch, seq, kv_heads, head_dim] = [", kd[1], ", ", S, ", ", Hkv,
           ", ", kd[3], "] must agree in batch and head_dim, be non-empty, and q_heads must be a multiple of kv_heads");
  pvt::check_scale_of(k, k_scale, kind, kOp, "k_scale");
  pvt::check_scale_of(v, v_scale, kind, kOp, "v_scale");
  if (mask) {
    const auto& md = mask->dims();
    PD_CHECK(md.size() == 4 && (md[0] == B || md[0] == 1) && (md[1] == Hq || md[1] == 1) &&
                 (md[2] == Tq || md[2] == 1) && md[3] == S && mask->place() == q.place(),
             kOp, ": the mask must broadcast to [batch, q_heads, q_len, kv_len] = [", B, ", ", Hq, ", ", Tq, ", ", S,
             "] on q's place, got ", dims_str(md));
    const phi::DataType mt = mask->dtype();
    PD_CHECK(mt == phi::DataType::BOOL || mt == phi::DataType::FLOAT32 || mt == q.dtype(), kOp,
             ": the mask must be bool, float32 or q's dtype, got ", phi::DataTypeToString(mt));
  } else {
    PD_CHECK(S >= Tq, kOp, ": without a mask the attention is causal and needs kv_len >= q_len, got kv_len=", S,
             " q_len=", Tq);
  }
  pvt::DeviceGuard guard(q.place(), kOp);
  paddle::Tensor out = paddle::empty({B, Tq, Hq, D}, q.dtype(), q.place());
  paddle::Tensor lse = paddle::empty({B, Tq, Hq}, phi::DataType::FLOAT32, q.place());
  pvt::QuantAttentionParams p;
  pvt::DecodeAttentionParams& a = p.attn;
  a.batch = B, a.q_len = Tq, a.q_heads = Hq, a.head_dim = D, a.kv_len = S, a.kv_heads = Hkv;
  a.dtype = qt;
  a.scale = scale;
  a.q = q.data(), a.k = k.data(), a.v = v.data(), a.out = out.data();
  copy_strides(q, a.q_stride);
  copy_strides(k, a.k_stride);
  copy_strides(v, a.v_stride);
  copy_strides(out, a.out_stride);
  a.lse = lse.data<float>();
  if (mask) {
    a.mask = mask->data();
    a.mask_type = pvt::scalar_type_of(mask->dtype(), kOp, "the mask", /*allow_bool=*/true);
    copy_strides(*mask, a.mask_stride);
  }
  p.kind = kind;
  set_scale(k_scale, kind, &p.k_scale, p.k_scale_stride);
  set_scale(v_scale, kind, &p.v_scale, p.v_scale_stride);
  if (q.place().GetType() == phi::AllocationType::CPU) {
    pvt::throw_if_error(pvt::quant_attention_cpu(p), kOp);
    return {out, lse};
  }
#ifdef PADDLE_VTENSOR_WITH_CUDA
  void* stream = pvt::stream_of(q);
  const size_t ws = pvt::quant_attention_cuda_workspace_bytes(p);
  paddle::Tensor workspace = paddle::empty({static_cast<int64_t>(ws > 0 ? ws : 1)}, phi::DataType::UINT8, q.place());
  a.workspace = workspace.data();
  a.workspace_bytes = ws;
  pvt::throw_if_error(pvt::quant_attention_cuda(p, stream), kOp);
  for (const void* read : {a.k, a.v, static_cast<const void*>(p.k_scale), static_cast<const void*>(p.v_scale)}) {
    pvt::record_cache_use(read, q.place(), stream, kOp);
  }
  return {out, lse};
#else
  PD_THROW(kOp, ": this build of paddle_vtensor has no CUDA kernels (tensor on ", q.place().DebugString(), ")");
#endif
}

std::vector<std::vector<int64_t>> VTensorQuantDecodeAttentionInferShape(
    const std::vector<int64_t>& q, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const paddle::optional<std::vector<int64_t>>&) {
  return {q, std::vector<int64_t>(q.begin(), q.size() == 4 ? q.end() - 1 : q.end())};
}

std::vector<paddle::DataType> VTensorQuantDecodeAttentionInferDtype(
    const paddle::DataType& q, const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::optional<paddle::DataType>&) {
  return {q, paddle::DataType::FLOAT32};
}

PVT_BUILD_OP(PVT_OP_QUANT_DECODE_ATTENTION)
    .Inputs({"Q", "K", "KScale", "V", "VScale", paddle::Optional("Mask")})
    .Outputs({"Out", "Lse"})
    .Attrs({PVT_ATTR_SCALE ": float"})
    .SetKernelFn(PD_KERNEL(VTensorQuantDecodeAttention))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorQuantDecodeAttentionInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorQuantDecodeAttentionInferDtype));

// vtensor_quant_slot_attention: attention_with_kvcache over 8-bit slot caches (causal, varlen).
//   Q                [total_q, Hq, D] packed new tokens of n sequences (float32/float16/bfloat16)
//   KCache, VCache   8-bit slot caches (float8_e4m3fn or int8): [slots, S, Hkv, D] one layer each, or
//                    the SAME model-wide cache [slots, S, L, 2, Hkv, D] twice with attr layer
//   KScale, VScale   int8: the scale slot caches (the codes' shape with head_dim 1, float32);
//                    fp8: [Hkv] (one layer) or the same [L, 2, Hkv] twice (model-wide), float32
//   CacheSeqlens, KNew, VNew, CuSeqlensQ, SlotIds, attrs: as vtensor_slot_attention (KNew/VNew float,
//                    quantized into their slots' rows with the scales above)
//   Out              [total_q, Hq, D], Q's dtype
// CPU only in this version: every length is checked on the host before anything is written.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../kernels/kv_quant_attention.h"
#include "quant_common.h"
#include "vtensor_slot_common.h"

namespace {

constexpr const char* kOp = pvt::names::kQuantSlotAttention;
using pvt::dims_str;

// One layer's K or V (codes, or int8 scales with row = 1) in a slot cache tensor: base pointer (in
// elements of `elem_bytes`) and (slot, token, head) strides in elements.
struct View {
  char* base = nullptr;
  int64_t stride[3] = {0, 0, 0};
  int64_t slots = 0, heads = 0, row = 0;
};

View view_of(const paddle::Tensor& t, int64_t layer, int kv, int64_t elem_bytes, const char* what) {
  const auto& d = t.dims();
  View v;
  v.base = static_cast<char*>(const_cast<void*>(t.data()));
  v.slots = d[0];
  if (d.size() == 4) {
    PD_CHECK(layer == -1, kOp, ": layer must be -1 for one-layer caches, got ", layer);
    v.heads = d[2], v.row = d[3];
    v.stride[0] = d[1] * d[2] * d[3], v.stride[1] = d[2] * d[3];
  } else {
    PD_CHECK(d.size() == 6 && d[3] == 2, kOp, ": ", what, " must be [slots, S, Hkv, D] or [slots, S, L, 2, Hkv, D], got ",
             dims_str(d));
    PD_CHECK(layer >= 0 && layer < d[2], kOp, ": layer ", layer, " is out of range [0, ", d[2], ")");
    v.heads = d[4], v.row = d[5];
    v.stride[1] = d[2] * 2 * d[4] * d[5], v.stride[0] = d[1] * v.stride[1];
    v.base += (2 * layer + kv) * d[4] * d[5] * elem_bytes;
  }
  v.stride[2] = v.row;
  return v;
}

void check_int32(const paddle::Tensor& t, const char* what, int64_t n, const phi::Place& place) {
  PD_CHECK(t.dtype() == phi::DataType::INT32 && t.dims().size() == 1 && t.dims()[0] == n && t.place() == place, kOp,
           ": ", what, " must be int32 [", n, "] on q's place, got ", phi::DataTypeToString(t.dtype()), " ",
           dims_str(t.dims()));
}

// Non-causal (the varlen fields take no mask): one host call per sequence over its slot's
// len + q_b keys with a broadcast all-true mask, as vtensor_slot_attention's host path does.
std::vector<pvt::QuantAttentionParams> per_sequence_calls(const pvt::QuantAttentionParams& p, int64_t n,
                                                          int64_t q_elem_bytes) {
  static const bool kAttendAll = true;
  const pvt::DecodeAttentionParams& a = p.attn;
  std::vector<pvt::QuantAttentionParams> calls(static_cast<size_t>(n), p);
  for (int64_t b = 0; b < n; ++b) {
    pvt::QuantAttentionParams& c = calls[static_cast<size_t>(b)];
    pvt::DecodeAttentionParams& e = c.attn;
    const int64_t s = a.kv_batch_index[b], first = a.cu_seqlens_q[b], qb = a.cu_seqlens_q[b + 1] - first;
    e.batch = 1, e.q_len = qb, e.kv_len = a.cache_seqlens[s] + qb;
    e.q = static_cast<const char*>(a.q) + first * a.q_stride[1] * q_elem_bytes;
    e.out = static_cast<char*>(a.out) + first * a.out_stride[1] * q_elem_bytes;
    e.k = static_cast<const char*>(a.k) + s * a.k_stride[1];  // codes: strides count bytes
    e.v = static_cast<const char*>(a.v) + s * a.v_stride[1];
    e.k_stride[1] = e.v_stride[1] = 0;
    e.cu_seqlens_q = nullptr, e.kv_batch_index = nullptr, e.cache_seqlens = nullptr, e.kv_mapped = nullptr;
    e.mask = &kAttendAll, e.mask_type = pvt::ScalarType::kBool;
    std::fill(e.mask_stride, e.mask_stride + 4, 0);
    c.k_scale += s * p.k_scale_stride[1], c.v_scale += s * p.v_scale_stride[1];  // fp8: stride 0
    c.k_scale_stride[1] = c.v_scale_stride[1] = 0;
  }
  return calls;
}

}  // namespace

std::vector<paddle::Tensor> VTensorQuantSlotAttention(
    const paddle::Tensor& q, const paddle::Tensor& k_cache, const paddle::Tensor& k_scale,
    const paddle::Tensor& v_cache, const paddle::Tensor& v_scale, const paddle::Tensor& cache_seqlens,
    const paddle::optional<paddle::Tensor>& k_new, const paddle::optional<paddle::Tensor>& v_new,
    const paddle::Tensor& cu_seqlens_q, const paddle::Tensor& slot_ids, int64_t layer, float scale, bool causal) {
  const phi::Place place = q.place();
  auto kc = pvt::slot_cache_of(k_cache, kOp, "k_cache");
  auto vc = pvt::slot_cache_of(v_cache, kOp, "v_cache");
  const pvt::KvQuant kind = pvt::quant_kind_of(k_cache.dtype(), kOp, "k_cache");
  PD_CHECK(v_cache.dtype() == k_cache.dtype(), kOp, ": v_cache has dtype ", phi::DataTypeToString(v_cache.dtype()),
           " but k_cache has ", phi::DataTypeToString(k_cache.dtype()));
  const bool model = k_cache.dims().size() == 6;
  PD_CHECK(model ? kc == vc : (kc != vc && k_cache.dims() == v_cache.dims()), kOp,
           ": pass one model-wide cache as both k_cache and v_cache, or two one-layer caches of one shape");
  PD_CHECK(place.GetType() == phi::AllocationType::CPU, kOp,
           ": 8-bit slot caches run on the CPU in this version (the GPU has the seq-major 8-bit caches)");
  PD_CHECK(q.dims().size() == 3, kOp, ": q must be packed [total_q, q_heads, head_dim], got ", dims_str(q.dims()));
  PD_CHECK(std::isfinite(scale), kOp, ": softmax_scale must be finite, got ", scale);
  const pvt::ScalarType qt = pvt::scalar_type_of(q.dtype(), kOp, "q");
  const View kv = view_of(k_cache, layer, 0, 1, "k_cache"), vv = view_of(v_cache, layer, 1, 1, "v_cache");
  const int64_t total = q.dims()[0], Hq = q.dims()[1], D = q.dims()[2], Hkv = kv.heads;
  const int64_t n = slot_ids.dims().size() == 1 ? slot_ids.dims()[0] : -1;
  PD_CHECK(D == kv.row && total > 0 && Hq % Hkv == 0, kOp, ": q [total_q, q_heads, head_dim] = ", dims_str(q.dims()),
           " must be non-empty with the cache's head_dim ", kv.row, " and q_heads a multiple of kv_heads ", Hkv);
  PD_CHECK(n > 0, kOp, ": slot_ids must be int32 [n], n >= 1");
  check_int32(cache_seqlens, "cache_seqlens", kv.slots, place);
  check_int32(slot_ids, "slot_ids", n, place);
  check_int32(cu_seqlens_q, "cu_seqlens_q", n + 1, place);
  // Scales: int8, slot caches of the codes' shape with row 1; fp8, [Hkv] or [L, 2, Hkv], positive.
  std::vector<std::shared_ptr<pvt::SlotCache>> caches = {kc, vc};
  View ks, vs;
  const float* kfp8 = nullptr;
  const float* vfp8 = nullptr;
  if (kind == pvt::KvQuant::kInt8) {
    caches.push_back(pvt::slot_cache_of(k_scale, kOp, "k_scale"));
    caches.push_back(pvt::slot_cache_of(v_scale, kOp, "v_scale"));
    // The scale caches' dimension 1 (rows per slot, padded to whole chunks) is their own.
    const auto& cd = k_cache.dims();
    for (const paddle::Tensor* s : {&k_scale, &v_scale}) {
      const auto& sd = s->dims();
      bool same = s->dtype() == phi::DataType::FLOAT32 && sd.size() == cd.size() && sd[sd.size() - 1] == 1;
      for (int i = 0; same && i + 1 < cd.size(); ++i) same = i == 1 || sd[i] == cd[i];
      PD_CHECK(same, kOp, ": the scales of an int8 slot cache are its scale slot caches (the codes' shape ",
               dims_str(cd), " with head_dim 1, float32), got ", dims_str(sd));
    }
    ks = view_of(k_scale, layer, 0, 4, "k_scale");
    vs = view_of(v_scale, layer, 1, 4, "v_scale");
  } else {
    const int64_t layers = model ? k_cache.dims()[2] : 1;
    for (const paddle::Tensor* s : {&k_scale, &v_scale}) {
      PD_CHECK(s->dtype() == phi::DataType::FLOAT32 && s->numel() == layers * (model ? 2 : 1) * Hkv &&
                   s->place() == place, kOp,
               ": the scale of a float8_e4m3fn slot cache is float32 ", model ? "[layers, 2, kv_heads]" : "[kv_heads]",
               ", got ", dims_str(s->dims()));
      const float* v = s->data<float>();
      for (int64_t i = 0; i < s->numel(); ++i) {
        PD_CHECK(std::isfinite(v[i]) && v[i] > 0.f, kOp, ": scales must be finite and positive, got ", v[i]);
      }
    }
    kfp8 = k_scale.data<float>() + (model ? 2 * layer * Hkv : 0);
    vfp8 = v_scale.data<float>() + (model ? (2 * layer + 1) * Hkv : 0);
  }
  PD_CHECK(k_new.is_initialized() == v_new.is_initialized(), kOp, ": give both k_new and v_new or neither");
  pvt::ScalarType new_type[2] = {qt, qt};  // of k_new and of v_new: each is read as its own dtype
  if (k_new) {
    for (int kvi = 0; kvi < 2; ++kvi) {
      const paddle::Tensor* t = kvi ? &*v_new : &*k_new;
      PD_CHECK(t->dims() == phi::make_ddim({total, Hkv, D}) && t->place() == place, kOp,
               ": k_new/v_new must be [total_q, kv_heads, head_dim] = [", total, ", ", Hkv, ", ", D, "], got ",
               dims_str(t->dims()));
      new_type[kvi] = pvt::quant_source_type(*t, place, kOp);
    }
  }
  // Lengths, read on the host, against what every cache (codes and scales) has mapped.
  pvt::SlotCacheHold hold(*kc, vc.get());
  const int32_t* cu = cu_seqlens_q.data<int32_t>();
  const int32_t* slots = slot_ids.data<int32_t>();
  const int32_t* lens = cache_seqlens.data<int32_t>();
  std::vector<int32_t> mapped(static_cast<size_t>(kv.slots));
  for (int64_t s = 0; s < kv.slots; ++s) {
    int64_t m = kc->mapped_tokens(s);
    for (const auto& c : caches) m = std::min<int64_t>(m, c->mapped_tokens(s));
    mapped[static_cast<size_t>(s)] = static_cast<int32_t>(m);
  }
  PD_CHECK(cu[0] == 0 && cu[n] == total, kOp, ": cu_seqlens_q must run from 0 to total_q = ", total);
  std::vector<char> seen(static_cast<size_t>(kv.slots), 0);
  int64_t max_q = 0, max_k = 0;
  for (int64_t b = 0; b < n; ++b) {
    PD_CHECK(cu[b + 1] > cu[b], kOp, ": cu_seqlens_q must be strictly increasing");
    const int64_t s = slots[b];
    PD_CHECK(s >= 0 && s < kv.slots && !seen[static_cast<size_t>(s)], kOp, ": slot_ids[", b, "] = ", s,
             " is out of range [0, ", kv.slots, ") or repeated");
    seen[static_cast<size_t>(s)] = 1;
    const int64_t need = lens[s] + cu[b + 1] - cu[b];
    PD_CHECK(lens[s] >= 0 && need <= mapped[static_cast<size_t>(s)], kOp, ": slot ", s, " needs ", need,
             " tokens but only ", mapped[static_cast<size_t>(s)], " are mapped (call reserve_slot first)");
    max_q = std::max<int64_t>(max_q, cu[b + 1] - cu[b]);
    max_k = std::max<int64_t>(max_k, need);
    if (k_new) {  // codes and int8 scales: the new tokens' rows must be this slot's own
      for (const auto& c : caches) pvt::check_private_rows(*c, s, lens[s], need, kOp);
    }
  }
  paddle::Tensor out = paddle::empty({total, Hq, D}, q.dtype(), place);
  pvt::QuantAttentionParams p;
  pvt::DecodeAttentionParams& a = p.attn;
  a.batch = n, a.q_len = max_q, a.q_heads = Hq, a.kv_heads = Hkv, a.head_dim = D, a.kv_len = max_k;
  a.dtype = qt;
  a.scale = scale;
  a.q = q.data(), a.out = out.data(), a.k = kv.base, a.v = vv.base;
  const int64_t qs[4] = {0, Hq * D, D, 1};
  const int64_t kst[4] = {kv.stride[1], kv.stride[0], kv.stride[2], 1}, vst[4] = {vv.stride[1], vv.stride[0], vv.stride[2], 1};
  std::copy(qs, qs + 4, a.q_stride), std::copy(qs, qs + 4, a.out_stride);
  std::copy(kst, kst + 4, a.k_stride), std::copy(vst, vst + 4, a.v_stride);
  a.cu_seqlens_q = cu, a.kv_batch_index = slots, a.cache_seqlens = lens, a.kv_mapped = mapped.data();
  p.kind = kind;
  if (kind == pvt::KvQuant::kInt8) {
    p.k_scale = reinterpret_cast<const float*>(ks.base), p.v_scale = reinterpret_cast<const float*>(vs.base);
    const int64_t kss[3] = {ks.stride[1], ks.stride[0], ks.stride[2]}, vss[3] = {vs.stride[1], vs.stride[0], vs.stride[2]};
    std::copy(kss, kss + 3, p.k_scale_stride), std::copy(vss, vss + 3, p.v_scale_stride);
  } else {
    p.k_scale = kfp8, p.v_scale = vfp8;
    p.k_scale_stride[2] = p.v_scale_stride[2] = 1;
  }
  std::vector<pvt::QuantAttentionParams> calls = {p};
  if (!causal) calls = per_sequence_calls(p, n, static_cast<int64_t>(phi::SizeOf(q.dtype())));
  for (const auto& c : calls) pvt::throw_if_error(pvt::check_quant_attention_params(c), kOp);  // before the append writes
  if (k_new) {
    for (int kvi = 0; kvi < 2; ++kvi) {
      const View& c = kvi ? vv : kv;
      const View& sc = kvi ? vs : ks;
      for (int64_t b = 0; b < n; ++b) {
        const int64_t s = slots[b], at = lens[s];
        pvt::QuantAppendParams ap;
        ap.kind = kind;
        ap.src_type = new_type[kvi];
        ap.outer = 1, ap.inner = cu[b + 1] - cu[b], ap.heads = Hkv, ap.head_dim = D;
        ap.src = static_cast<const char*>((kvi ? *v_new : *k_new).data()) +
                 cu[b] * Hkv * D * static_cast<int64_t>(phi::SizeOf((kvi ? *v_new : *k_new).dtype()));
        ap.src_stride[1] = Hkv * D, ap.src_stride[2] = D;
        ap.dst = c.base + s * c.stride[0] + at * c.stride[1];
        ap.dst_stride[1] = c.stride[1], ap.dst_stride[2] = c.stride[2];
        if (kind == pvt::KvQuant::kInt8) {
          ap.scale = reinterpret_cast<float*>(sc.base) + s * sc.stride[0] + at * sc.stride[1];
          ap.scale_stride[1] = sc.stride[1], ap.scale_stride[2] = sc.stride[2];
        } else {
          ap.scale = const_cast<float*>(kvi ? vfp8 : kfp8);
          ap.scale_stride[2] = 1;
        }
        pvt::launch_quant_append(ap, place, nullptr, kOp);
      }
    }
  }
  for (const auto& c : calls) pvt::throw_if_error(pvt::quant_attention_cpu(c), kOp);
  return {out};
}

std::vector<std::vector<int64_t>> VTensorQuantSlotAttentionInferShape(
    const std::vector<int64_t>& q, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const paddle::optional<std::vector<int64_t>>&, const paddle::optional<std::vector<int64_t>>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&) {
  return {q};
}

std::vector<paddle::DataType> VTensorQuantSlotAttentionInferDtype(
    const paddle::DataType& q, const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::optional<paddle::DataType>&,
    const paddle::optional<paddle::DataType>&, const paddle::DataType&, const paddle::DataType&) {
  return {q};
}

PVT_BUILD_OP(PVT_OP_QUANT_SLOT_ATTENTION)
    .Inputs({"Q", "KCache", "KScale", "VCache", "VScale", "CacheSeqlens", paddle::Optional("KNew"),
             paddle::Optional("VNew"), "CuSeqlensQ", "SlotIds"})
    .Outputs({"Out"})
    .Attrs({PVT_ATTR_LAYER ": int64_t", PVT_ATTR_SCALE ": float", PVT_ATTR_CAUSAL ": bool"})
    .SetKernelFn(PD_KERNEL(VTensorQuantSlotAttention))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorQuantSlotAttentionInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorQuantSlotAttentionInferDtype));

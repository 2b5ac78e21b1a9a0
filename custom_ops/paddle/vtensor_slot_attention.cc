// vtensor_slot_attention: flash-attn's attention_with_kvcache over a slot cache, varlen.
//   Q            [total_q, Hq, D] packed new tokens of n sequences (float32/float16/bfloat16)
//   KCache, VCache  slot caches [slots, S, Hkv, D] (one layer), or the SAME model-wide cache
//                [slots, S, L, 2, Hkv, D] twice with attr layer selecting (layer, K) and (layer, V)
//   CacheSeqlens int32 [slots]: each slot's length before this call (not modified)
//   KNew, VNew   optional [total_q, Hkv, D]: written in place at cache_seqlens[slot] + t of their slot.
//                Absent: the new tokens' K/V are already in the cache right after cache_seqlens.
//   CuSeqlensQ   int32 [n + 1]: sequence b owns rows cu[b] .. cu[b+1]-1 of Q (and KNew, VNew, Out)
//   SlotIds      int32 [n]: the slot sequence b lives in; distinct
//   attrs layer (-1 for a one-layer cache), scale, causal, max_seqlen_q / max_seqlen_k (host-known
//         upper bounds sizing the CUDA launch; 0: total_q / max_seq_len)
//   Out          [total_q, Hq, D]: sequence b attends over the first cache_seqlens[slot] + q_b tokens of
//                its slot, causal within its new tokens (query t sees keys < cache_seqlens + t + 1).
// k_cache / v_cache must be the tensors slot_cache / slot_kv_cache returned (not a reshape, slice or
// other view of them). Every check runs before the first write.
// CPU: the lengths are read on the host and every problem raises before anything is written; then
// the host varlen kernels run (append, attention with cu_seqlens_q / kv_batch_index / cache_seqlens).
// CUDA: nothing is read back; a sequence whose rows are not mapped is skipped (zeros) and sets the
// cache's error flag (check_slot_errors), see docs/SLOT_CACHE.md.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../op_names.h"
#include "vtensor_slot_common.h"
#include "../kernels/append_varlen.h"
#include "../kernels/decode_attention.h"
#ifdef PADDLE_VTENSOR_WITH_CUDA
#include "../kernels/decode_attention_plan.h"
#endif

namespace {

constexpr const char* kOp = pvt::names::kSlotAttention;

using pvt::dims_str;

pvt::ScalarType scalar_type(phi::DataType dtype) { return pvt::scalar_type_of(dtype, kOp, "q"); }

void check_int32(const paddle::Tensor& t, const char* what, int64_t want_len, const phi::Place& place) {
  PD_CHECK(t.dtype() == phi::DataType::INT32, kOp, ": ", what, " must be int32, got ",
           phi::DataTypeToString(t.dtype()));
  PD_CHECK(t.dims().size() == 1 && t.dims()[0] == want_len, kOp, ": ", what, " must have shape [", want_len,
           "], got ", dims_str(t.dims()));
  PD_CHECK(t.place() == place, kOp, ": ", what, " is on ", t.place().DebugString(), " but q is on ",
           place.DebugString());
}

// Where one layer's K or V lies in a cache tensor: base pointer and (slot, token, head) strides.
struct CacheView {
  char* base = nullptr;
  int64_t stride[3] = {0, 0, 0};
  int64_t num_slots = 0, max_seq_len = 0, heads = 0, head_dim = 0;
};

// The strides come from the tensor's dims (dims[1] is the slot's padded row stride); the rows a slot
// may hold, from the cache (its max_seq_len).
CacheView cache_view(const paddle::Tensor& t, const pvt::SlotCache& cache, int64_t layer, int kv, int64_t elem_bytes,
                     const char* what) {
  const auto& d = t.dims();
  CacheView v;
  v.base = static_cast<char*>(const_cast<void*>(t.data()));
  v.num_slots = d[0];
  v.max_seq_len = cache.shape().max_seq_len;
  if (d.size() == 4) {
    PD_CHECK(layer == -1, kOp, ": layer must be -1 for a one-layer cache [slots, max_seq_len, kv_heads, head_dim], got ",
             layer);
    v.heads = d[2];
    v.head_dim = d[3];
    v.stride[0] = d[1] * d[2] * d[3];
    v.stride[1] = d[2] * d[3];
  } else {
    PD_CHECK(d.size() == 6 && d[3] == 2, kOp, ": ", what,
             " must be [slots, max_seq_len, kv_heads, head_dim] or [slots, max_seq_len, layers, 2, kv_heads, "
             "head_dim], got ",
             dims_str(d));
    PD_CHECK(layer >= 0 && layer < d[2], kOp, ": layer ", layer, " is out of range [0, ", d[2], ")");
    v.heads = d[4];
    v.head_dim = d[5];
    v.stride[1] = d[2] * 2 * d[4] * d[5];
    v.stride[0] = d[1] * v.stride[1];
    v.base += (2 * layer + kv) * d[4] * d[5] * elem_bytes;
  }
  v.stride[2] = v.head_dim;
  return v;
}

// Writes k_new into K's rows and v_new into V's with `append` (the host or the CUDA varlen append).
template <typename Append>
void append_new_tokens(pvt::AppendVarlenParams ap, const CacheView& kv, const CacheView& vv,
                       const paddle::Tensor& k_new, const paddle::Tensor& v_new, Append append) {
  for (int kvi = 0; kvi < 2; ++kvi) {
    const CacheView& c = kvi ? vv : kv;
    ap.dst = c.base;
    std::copy(c.stride, c.stride + 3, ap.dst_stride);
    ap.src = (kvi ? v_new : k_new).data();
    pvt::throw_if_error(append(ap), kOp);
  }
}

// The sizes both backends use, from checked inputs.
struct Problem {
  int64_t n = 0, total = 0, q_heads = 0, kv_heads = 0, head_dim = 0, elem_bytes = 0;
  pvt::ScalarType dtype = pvt::ScalarType::kFloat32;
  float scale = 0.f;
};

// The CPU path's checks of the int32 tensors' values (read on the host), against `mapped` (each
// slot's mapped rows, read under the caller's SlotCacheHold).
void check_host_lengths(const Problem& pr, const CacheView& kv, const int32_t* cu, const int32_t* slots,
                        const int32_t* lens, const std::vector<int32_t>& mapped) {
  const int64_t n = pr.n, total = pr.total;
  PD_CHECK(cu[0] == 0 && cu[n] == total, kOp, ": cu_seqlens_q must start at 0 and end at total_q = ", total,
           " (q's rows), got ", cu[0], " .. ", cu[n]);
  std::vector<char> seen(static_cast<size_t>(kv.num_slots), 0);
  for (int64_t b = 0; b < n; ++b) {
    // With cu[0] == 0 and cu[n] == total, strictly increasing keeps every entry in [0, total].
    PD_CHECK(cu[b + 1] > cu[b], kOp, ": cu_seqlens_q must be strictly increasing (every sequence has a new token), "
             "got cu_seqlens_q[", b, "] = ", cu[b], " and [", b + 1, "] = ", cu[b + 1]);
    const int64_t s = slots[b];
    PD_CHECK(s >= 0 && s < kv.num_slots, kOp, ": slot_ids[", b, "] = ", s, " is out of range [0, ", kv.num_slots, ")");
    PD_CHECK(!seen[static_cast<size_t>(s)], kOp, ": slot ", s, " appears twice in slot_ids");
    seen[static_cast<size_t>(s)] = 1;
    const int64_t len = lens[s], need = len + cu[b + 1] - cu[b];
    PD_CHECK(len >= 0, kOp, ": cache_seqlens[", s, "] = ", len, " is negative");
    PD_CHECK(need <= kv.max_seq_len, kOp, ": slot ", s, " would hold ", need, " tokens, past max_seq_len = ",
             kv.max_seq_len);
    PD_CHECK(need <= mapped[static_cast<size_t>(s)], kOp, ": slot ", s, " needs ", need, " tokens but only ",
             mapped[static_cast<size_t>(s)], " are mapped (call reserve_slot first; a released slot has none)");
  }
}

// The host attention calls, built (and checked by the caller) before anything is written. Causal:
// one call with the varlen fields (the lengths were validated, so kv_len / q_len are exact bounds).
// Non-causal (no varlen mask exists): one call per sequence with a broadcast all-true mask over its
// len + q_b keys.
std::vector<pvt::DecodeAttentionParams> cpu_attention_calls(const Problem& pr, const CacheView& kv,
                                                            const CacheView& vv, const paddle::Tensor& q,
                                                            paddle::Tensor& out, const int32_t* cu,
                                                            const int32_t* slots, const int32_t* lens,
                                                            const std::vector<int32_t>& mapped, bool causal,
                                                            int32_t* flag) {
  static const bool kAttendAll = true;
  const int64_t n = pr.n, Hq = pr.q_heads, D = pr.head_dim, eb = pr.elem_bytes;
  const int64_t qs[4] = {0, Hq * D, D, 1};
  int64_t max_q = 0, max_k = 0;
  for (int64_t b = 0; b < n; ++b) {
    max_q = std::max<int64_t>(max_q, cu[b + 1] - cu[b]);
    max_k = std::max<int64_t>(max_k, lens[slots[b]] + cu[b + 1] - cu[b]);
  }
  std::vector<pvt::DecodeAttentionParams> calls(static_cast<size_t>(causal ? 1 : n));
  for (int64_t b = 0; b < static_cast<int64_t>(calls.size()); ++b) {
    pvt::DecodeAttentionParams& p = calls[static_cast<size_t>(b)];
    p.q_heads = Hq;
    p.kv_heads = pr.kv_heads;
    p.head_dim = D;
    p.dtype = pr.dtype;
    p.scale = pr.scale;
    std::copy(qs, qs + 4, p.q_stride);
    std::copy(qs, qs + 4, p.out_stride);
    if (causal) {
      p.batch = n;
      p.q_len = max_q;
      p.kv_len = max_k;
      p.q = q.data();
      p.out = out.data();
      p.k = kv.base;
      p.v = vv.base;
      const int64_t ks[4] = {kv.stride[1], kv.stride[0], kv.stride[2], 1};
      const int64_t vs[4] = {vv.stride[1], vv.stride[0], vv.stride[2], 1};
      std::copy(ks, ks + 4, p.k_stride);
      std::copy(vs, vs + 4, p.v_stride);
      p.cu_seqlens_q = cu;
      p.kv_batch_index = slots;
      p.cache_seqlens = lens;
      p.kv_mapped = mapped.data();
      p.error_flag = flag;
    } else {
      const int64_t s = slots[b], first = cu[b], qb = cu[b + 1] - cu[b];
      p.batch = 1;
      p.q_len = qb;
      p.kv_len = lens[s] + qb;
      p.q = static_cast<const char*>(q.data()) + first * Hq * D * eb;
      p.out = static_cast<char*>(out.data()) + first * Hq * D * eb;
      p.k = kv.base + s * kv.stride[0] * eb;
      p.v = vv.base + s * vv.stride[0] * eb;
      const int64_t ks[4] = {kv.stride[1], 0, kv.stride[2], 1};
      const int64_t vs[4] = {vv.stride[1], 0, vv.stride[2], 1};
      std::copy(ks, ks + 4, p.k_stride);
      std::copy(vs, vs + 4, p.v_stride);
      p.mask = &kAttendAll;
      p.mask_type = pvt::ScalarType::kBool;
    }
  }
  return calls;
}

}  // namespace

std::vector<paddle::Tensor> VTensorSlotAttention(
    const paddle::Tensor& q, const paddle::Tensor& k_cache, const paddle::Tensor& v_cache,
    const paddle::Tensor& cache_seqlens, const paddle::optional<paddle::Tensor>& k_new,
    const paddle::optional<paddle::Tensor>& v_new, const paddle::Tensor& cu_seqlens_q,
    const paddle::Tensor& slot_ids, int64_t layer, float scale, bool causal, int64_t max_seqlen_q,
    int64_t max_seqlen_k) {
  // Every check on shapes, attributes and (on the CPU) values runs before the first write: a refused
  // call leaves the cache as it was.
  const phi::Place place = q.place();
  auto kc = pvt::slot_cache_of(k_cache, kOp, "k_cache");
  auto vc = pvt::slot_cache_of(v_cache, kOp, "v_cache");
  const bool model_cache = k_cache.dims().size() == 6;
  if (model_cache) {
    PD_CHECK(kc == vc, kOp, ": with a model-wide cache [slots, S, L, 2, Hkv, D] pass it as both k_cache and v_cache");
  } else {
    PD_CHECK(kc != vc, kOp, ": k_cache and v_cache are the same one-layer cache; K and V need one cache each");
    PD_CHECK(k_cache.dims() == v_cache.dims(), kOp, ": v_cache has shape ", dims_str(v_cache.dims()),
             " but k_cache has ", dims_str(k_cache.dims()));
  }
  PD_CHECK(q.dims().size() == 3, kOp, ": q must be packed [total_q, q_heads, head_dim], got ", dims_str(q.dims()));
  pvt::refuse_slot_cache(q, kOp, "q");
  Problem pr;
  pr.dtype = scalar_type(q.dtype());
  PD_CHECK(k_cache.dtype() == q.dtype() && v_cache.dtype() == q.dtype(), kOp, ": q has dtype ",
           phi::DataTypeToString(q.dtype()), " but the cache has ", phi::DataTypeToString(k_cache.dtype()));
  PD_CHECK(k_cache.place() == place && v_cache.place() == place, kOp, ": the cache is on ",
           k_cache.place().DebugString(), " but q is on ", place.DebugString());
  // The attribute arrives as float32: a Python float past 3.4e38 is inf here.
  PD_CHECK(std::isfinite(scale), kOp, ": softmax_scale must be finite in float32 (|scale| < 3.4e38), got ", scale);
  PD_CHECK(max_seqlen_q >= 0 && max_seqlen_k >= 0, kOp, ": max_seqlen_q and max_seqlen_k must be >= 0 (0: unknown), "
           "got ", max_seqlen_q, " and ", max_seqlen_k);
  pr.scale = scale;
  pr.elem_bytes = static_cast<int64_t>(phi::SizeOf(q.dtype()));
  const CacheView kv = cache_view(k_cache, *kc, layer, 0, pr.elem_bytes, "k_cache");
  const CacheView vv = cache_view(v_cache, *vc, layer, 1, pr.elem_bytes, "v_cache");
  pr.total = q.dims()[0];
  pr.q_heads = q.dims()[1];
  pr.head_dim = q.dims()[2];
  pr.kv_heads = kv.heads;
  pr.n = slot_ids.dims().size() == 1 ? slot_ids.dims()[0] : -1;
  const int64_t total = pr.total, Hq = pr.q_heads, D = pr.head_dim, Hkv = pr.kv_heads, n = pr.n, eb = pr.elem_bytes;
  PD_CHECK(D == kv.head_dim, kOp, ": q has head_dim ", D, " but the cache has ", kv.head_dim);
  PD_CHECK(Hq > 0 && Hq % Hkv == 0, kOp, ": q_heads (", Hq, ") must be a multiple of the cache's kv_heads (", Hkv, ")");
  PD_CHECK(total > 0, kOp, ": q holds no tokens");
  check_int32(cache_seqlens, "cache_seqlens", kv.num_slots, place);
  PD_CHECK(n > 0, kOp, ": slot_ids must be int32 [n] with n >= 1, got shape ", dims_str(slot_ids.dims()));
  check_int32(slot_ids, "slot_ids", n, place);
  check_int32(cu_seqlens_q, "cu_seqlens_q", n + 1, place);
  PD_CHECK(k_new.is_initialized() == v_new.is_initialized(), kOp, ": give both k_new and v_new or neither");
  if (k_new) {
    for (const paddle::Tensor* t : {&*k_new, &*v_new}) {
      PD_CHECK(t->dims().size() == 3 && t->dims()[0] == total && t->dims()[1] == Hkv && t->dims()[2] == D, kOp,
               ": k_new/v_new must be [total_q, kv_heads, head_dim] = [", total, ", ", Hkv, ", ", D, "], got ",
               dims_str(t->dims()));
      PD_CHECK(t->dtype() == q.dtype() && t->place() == place, kOp, ": k_new/v_new must match q's dtype and place");
      pvt::refuse_slot_cache(*t, kOp, "k_new/v_new");
    }
  }

  paddle::Tensor out = paddle::empty({total, Hq, D}, q.dtype(), place);
  pvt::AppendVarlenParams ap;
  ap.num_seqs = n;
  ap.total_tokens = total;
  ap.heads = Hkv;
  ap.head_dim = D;
  ap.elem_bytes = eb;
  ap.num_slots = kv.num_slots;
  ap.max_seq_len = kv.max_seq_len;
  ap.src_stride[0] = Hkv * D;
  ap.src_stride[1] = D;
  ap.cu_seqlens = cu_seqlens_q.data<int32_t>();
  ap.slot_ids = slot_ids.data<int32_t>();
  ap.cache_seqlens = cache_seqlens.data<int32_t>();
  // Held until this function returns: a release_slot in another thread waits until the host kernels
  // ran (CPU) or were queued and recorded (CUDA); slot_cache.h says what that guarantees.
  pvt::SlotCacheHold hold(*kc, vc.get());

  if (place.GetType() == phi::AllocationType::CPU) {
    std::vector<int32_t> mapped(static_cast<size_t>(kv.num_slots));
    for (int64_t s = 0; s < kv.num_slots; ++s) mapped[s] = std::min(kc->mapped_tokens(s), vc->mapped_tokens(s));
    check_host_lengths(pr, kv, ap.cu_seqlens, ap.slot_ids, ap.cache_seqlens, mapped);
    if (k_new) {  // the new tokens' rows must be this slot's own (one check for a model-wide cache)
      for (int64_t b = 0; b < n; ++b) {
        const int64_t s = ap.slot_ids[b], at = ap.cache_seqlens[s], to = at + ap.cu_seqlens[b + 1] - ap.cu_seqlens[b];
        pvt::check_private_rows(*kc, s, at, to, kOp);
        if (vc != kc) pvt::check_private_rows(*vc, s, at, to, kOp);
      }
    }
    int32_t flag = 0;
    const std::vector<pvt::DecodeAttentionParams> calls = cpu_attention_calls(
        pr, kv, vv, q, out, ap.cu_seqlens, ap.slot_ids, ap.cache_seqlens, mapped, causal, &flag);
    for (const auto& p : calls) pvt::throw_if_error(pvt::check_decode_attention_params(p), kOp);
    if (k_new) {
      append_new_tokens(ap, kv, vv, *k_new, *v_new, [](const pvt::AppendVarlenParams& a) {
        return pvt::append_varlen_cpu(a);
      });
    }
    for (const auto& p : calls) pvt::throw_if_error(pvt::decode_attention_cpu(p), kOp);
    PD_CHECK(flag == 0, kOp, ": the attention kernel refused a sequence whose rows are not mapped");
    return {out};
  }
#ifdef PADDLE_VTENSOR_WITH_CUDA
  PD_CHECK(causal, kOp, ": causal=False is not supported on the GPU (the varlen kernel takes no mask)");
  PD_CHECK(D <= pvt::kCudaMaxHeadDim, kOp, ": head_dim ", D, " is larger than the CUDA kernel supports (",
           pvt::kCudaMaxHeadDim, ")");
  pvt::DeviceGuard guard(place, kOp);
  void* stream = pvt::stream_of(q);
  pvt::SlotDeviceTensors state = pvt::slot_device_state(kc, place);
  // One-layer caches: K and V are two caches; a slot is usable up to the smaller of their mappings.
  paddle::Tensor mapped = state.mapped;
  paddle::Tensor error_flag = state.error_flag;
  if (vc != kc) mapped = paddle::experimental::minimum(mapped, pvt::slot_device_state(vc, place).mapped);
  ap.kv_mapped = mapped.data<int32_t>();
  ap.error_flag = error_flag.data<int32_t>();
  pvt::DecodeAttentionParams p;
  p.batch = n;
  p.q_len = max_seqlen_q > 0 ? std::min(max_seqlen_q, total) : total;
  p.q_heads = Hq;
  p.kv_heads = Hkv;
  p.head_dim = D;
  p.kv_len = max_seqlen_k > 0 ? std::min(max_seqlen_k, kv.max_seq_len) : kv.max_seq_len;
  p.dtype = pr.dtype;
  p.scale = scale;
  p.q = q.data();
  p.out = out.data();
  p.k = kv.base;
  p.v = vv.base;
  const int64_t qs[4] = {0, Hq * D, D, 1};
  const int64_t ks[4] = {kv.stride[1], kv.stride[0], kv.stride[2], 1};
  const int64_t vs[4] = {vv.stride[1], vv.stride[0], vv.stride[2], 1};
  std::copy(qs, qs + 4, p.q_stride);
  std::copy(qs, qs + 4, p.out_stride);
  std::copy(ks, ks + 4, p.k_stride);
  std::copy(vs, vs + 4, p.v_stride);
  p.cu_seqlens_q = ap.cu_seqlens;
  p.kv_batch_index = ap.slot_ids;
  p.cache_seqlens = ap.cache_seqlens;
  p.kv_mapped = ap.kv_mapped;
  p.error_flag = ap.error_flag;
  pvt::throw_if_error(pvt::check_decode_attention_params(p), kOp);  // before the append is queued
  // Planned once: the plan sizes the workspace and is what the launch runs.
  pvt::decode_plan::Plan plan;
  pvt::throw_if_error(pvt::decode_attention_cuda_plan(p, &plan), kOp);
  const size_t ws = plan.workspace_bytes;
  paddle::Tensor workspace;
  if (ws > 0) {
    workspace = paddle::empty({static_cast<int64_t>(ws)}, phi::DataType::UINT8, place);
    p.workspace = workspace.data();
    p.workspace_bytes = ws;
  }
  if (k_new) {
    append_new_tokens(ap, kv, vv, *k_new, *v_new, [stream](const pvt::AppendVarlenParams& a) {
      return pvt::append_varlen_cuda(a, stream);
    });
  }
  pvt::throw_if_error(pvt::decode_attention_cuda_run(p, plan, stream), kOp);
  // The kernels read (and wrote) the caches where they lie: a release_slot must wait for them.
  pvt::throw_if_error(kc->record_use(stream), kOp);
  if (vc != kc) pvt::throw_if_error(vc->record_use(stream), kOp);
  return {out};
#else
  PD_THROW(kOp, ": this build of paddle_vtensor has no CUDA kernels (tensor on ", place.DebugString(), ")");
#endif
}

std::vector<std::vector<int64_t>> VTensorSlotAttentionInferShape(
    const std::vector<int64_t>& q_shape, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const paddle::optional<std::vector<int64_t>>&,
    const paddle::optional<std::vector<int64_t>>&, const std::vector<int64_t>&, const std::vector<int64_t>&) {
  return {q_shape};
}

std::vector<paddle::DataType> VTensorSlotAttentionInferDtype(
    const paddle::DataType& q_dtype, const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::optional<paddle::DataType>&, const paddle::optional<paddle::DataType>&, const paddle::DataType&,
    const paddle::DataType&) {
  return {q_dtype};
}

PVT_BUILD_OP(PVT_OP_SLOT_ATTENTION)
    .Inputs({"Q", "KCache", "VCache", "CacheSeqlens", paddle::Optional("KNew"), paddle::Optional("VNew"),
             "CuSeqlensQ", "SlotIds"})
    .Outputs({"Out"})
    .Attrs({PVT_ATTR_LAYER ": int64_t", PVT_ATTR_SCALE ": float", PVT_ATTR_CAUSAL ": bool", PVT_ATTR_MAX_SEQLEN_Q ": int64_t", PVT_ATTR_MAX_SEQLEN_K ": int64_t"})
    .SetKernelFn(PD_KERNEL(VTensorSlotAttention))
    .SetInferShapeFn(PD_INFER_SHAPE(VTensorSlotAttentionInferShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(VTensorSlotAttentionInferDtype));

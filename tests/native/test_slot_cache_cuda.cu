// Native GPU test of the slot cache (issue 7): SlotCache on CUDA memory (driver VMM), the varlen
// append kernel and the varlen decode attention (cu_seqlens_q, kv_batch_index, cache_seqlens,
// kv_mapped, error_flag) against an independent double-precision host reference, then the time of one
// inflight step (append K and V + attention) at 64 slots of mixed lengths.
//   Correctness: fp16/bf16/fp32 x (Hq/Hkv 32/8 GQA, 8/1 MQA, 4/4 MHA), head_dim 128 (and 64); steps
//   with new-token mixes [1, 1, 3, 1], a fresh prompt, empty slots, a slot at length 0, a slot filled to
//   max_seq_len, slot ids out of order; one-layer caches and the model-wide token-row layout (layer
//   views with strides); a sequence whose rows are not reserved (skipped: zeros, error flag, nothing
//   written) and a released slot; mapped bytes of per-slot reserve/release with 2 MiB chunks.
// Usage: test_slot_cache_cuda [--no-bench]. PASS/FAIL lines, "info bench ..." lines, "N passed, M failed".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/apis.h"
#include "gpu_mem.h"
#include "harness.h"
#include "kernels/append_varlen.h"
#include "kernels/decode_attention.h"

using namespace pvt;
using pvt_test::Report;

namespace {

const Device kGpu = Device::cuda(0);

int64_t esize(ScalarType t) { return t == ScalarType::kFloat32 ? 4 : 2; }

void put(std::vector<uint8_t>& buf, int64_t i, ScalarType t, float x) {
  switch (t) {
    case ScalarType::kFloat32: std::memcpy(buf.data() + i * 4, &x, 4); break;
    case ScalarType::kFloat16: { __half h = __float2half(x); std::memcpy(buf.data() + i * 2, &h, 2); break; }
    case ScalarType::kBFloat16: { __nv_bfloat16 h = __float2bfloat16(x); std::memcpy(buf.data() + i * 2, &h, 2); break; }
    default: break;
  }
}

float get(const std::vector<uint8_t>& buf, int64_t i, ScalarType t) {
  switch (t) {
    case ScalarType::kFloat32: { float x; std::memcpy(&x, buf.data() + i * 4, 4); return x; }
    case ScalarType::kFloat16: { __half h; std::memcpy(&h, buf.data() + i * 2, 2); return __half2float(h); }
    case ScalarType::kBFloat16: { __nv_bfloat16 h; std::memcpy(&h, buf.data() + i * 2, 2); return __bfloat162float(h); }
    default: return 0.f;
  }
}

float tolerance(ScalarType t) { return t == ScalarType::kFloat32 ? 2e-5f : t == ScalarType::kFloat16 ? 2e-3f : 1.6e-2f; }


template <typename T>
void upload(DevBuf& d, const std::vector<T>& h) { cudaMemcpy(d.ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice); }

// K and V of one layer: either two one-layer caches, or views of one token-row cache (layers L).
struct Caches {
  std::shared_ptr<SlotCache> k, v;  // v == k for the token-row layout
  int64_t slots, S, Hkv, D, L, layer;
  ScalarType dtype;
  char* kbase() const { return k->data() + (L > 1 ? 2 * layer * Hkv * D * esize(dtype) : 0); }
  char* vbase() const { return L > 1 ? k->data() + (2 * layer + 1) * Hkv * D * esize(dtype) : v->data(); }
  int64_t stride_tok() const { return L > 1 ? L * 2 * Hkv * D : Hkv * D; }
  int64_t stride_slot() const { return S * stride_tok(); }
  std::vector<int32_t> mapped() const {
    std::vector<int32_t> a = k->mapped_tokens_all(nullptr), b = v->mapped_tokens_all(nullptr);
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::min(a[i], b[i]);
    return a;
  }
  Status reserve(int64_t s, int64_t n) {
    PVT_RETURN_IF_ERROR(k->reserve(s, n, nullptr));
    return v == k ? Status::Ok() : v->reserve(s, n, nullptr);
  }
};

// Host mirror of a layer's K and V ([slots, S, Hkv, D] floats, rounded to the dtype).
struct Mirror {
  std::vector<float> k, v;
  std::vector<int32_t> lens;
};

// One step: counts[b] new tokens of sequence b into slot_ids[b]; append K, V then attend; compare the
// output with a double reference over the mirror, and the written rows with the mirror.
void run_step(Report& r, const std::string& name, Caches& c, Mirror& m, int64_t Hq,
              const std::vector<int32_t>& counts, const std::vector<int32_t>& slot_ids, std::mt19937& rng) {
  const ScalarType t = c.dtype;
  const int64_t eb = esize(t), D = c.D, Hkv = c.Hkv, n = static_cast<int64_t>(counts.size());
  std::vector<int32_t> cu(1, 0);
  for (int32_t x : counts) cu.push_back(cu.back() + x);
  const int64_t total = cu.back();
  std::normal_distribution<float> normal;
  std::vector<uint8_t> q(static_cast<size_t>(total * Hq * D * eb)), kn(static_cast<size_t>(total * Hkv * D * eb)), vn = kn;
  for (int64_t i = 0; i < total * Hq * D; ++i) put(q, i, t, normal(rng));
  for (int64_t i = 0; i < total * Hkv * D; ++i) { put(kn, i, t, normal(rng)); put(vn, i, t, normal(rng)); }
  const std::vector<int32_t> mapped = c.mapped();
  DevBuf dq(q.size()), dkn(kn.size()), dvn(vn.size()), dout(q.size()), dcu(cu.size() * 4), dslots(n * 4),
      dlens(c.slots * 4), dmapped(c.slots * 4), dflag(4);
  upload(dq, q); upload(dkn, kn); upload(dvn, vn); upload(dcu, cu); upload(dslots, slot_ids);
  upload(dlens, m.lens); upload(dmapped, mapped);
  cudaMemset(dflag.ptr, 0, 4);
  cudaMemset(dout.ptr, 0x7f, q.size());  // refused sequences must be written as zeros
  AppendVarlenParams ap;
  ap.src = dkn.ptr;
  ap.num_seqs = n;
  ap.total_tokens = total;
  ap.heads = Hkv;
  ap.head_dim = D;
  ap.elem_bytes = eb;
  ap.num_slots = c.slots;
  ap.max_seq_len = c.S;
  ap.dst_stride[0] = c.stride_slot(); ap.dst_stride[1] = c.stride_tok(); ap.dst_stride[2] = D;
  ap.src_stride[0] = Hkv * D; ap.src_stride[1] = D;
  ap.cu_seqlens = static_cast<int32_t*>(dcu.ptr);
  ap.slot_ids = static_cast<int32_t*>(dslots.ptr);
  ap.cache_seqlens = static_cast<int32_t*>(dlens.ptr);
  ap.kv_mapped = static_cast<int32_t*>(dmapped.ptr);
  ap.error_flag = static_cast<int32_t*>(dflag.ptr);
  ap.dst = c.kbase();
  Status st = append_varlen_cuda(ap, nullptr);
  ap.dst = c.vbase();
  ap.src = dvn.ptr;
  if (st.ok()) st = append_varlen_cuda(ap, nullptr);
  if (!r.ok(st, name + " append launch")) return;
  DecodeAttentionParams p;
  p.batch = n;
  p.q_len = *std::max_element(counts.begin(), counts.end());
  p.q_heads = Hq;
  p.kv_heads = Hkv;
  p.head_dim = D;
  p.kv_len = c.S;
  p.dtype = t;
  p.scale = 1.f / std::sqrt(static_cast<float>(D));
  p.q = dq.ptr;
  p.out = dout.ptr;
  p.k = c.kbase();
  p.v = c.vbase();
  const int64_t qs[4] = {0, Hq * D, D, 1}, ks[4] = {c.stride_tok(), c.stride_slot(), D, 1};
  std::copy(qs, qs + 4, p.q_stride);
  std::copy(qs, qs + 4, p.out_stride);
  std::copy(ks, ks + 4, p.k_stride);
  std::copy(ks, ks + 4, p.v_stride);
  p.cu_seqlens_q = ap.cu_seqlens;
  p.kv_batch_index = ap.slot_ids;
  p.cache_seqlens = ap.cache_seqlens;
  p.kv_mapped = ap.kv_mapped;
  p.error_flag = ap.error_flag;
  const size_t ws = decode_attention_cuda_workspace_bytes(p);
  DevBuf dws(ws);
  p.workspace = ws ? dws.ptr : nullptr;
  p.workspace_bytes = ws;
  if (!r.ok(decode_attention_cuda(p, nullptr), name + " attention launch")) return;
  if (!r.check(cudaDeviceSynchronize() == cudaSuccess, name + " sync", cudaGetErrorString(cudaGetLastError()))) return;
  std::vector<uint8_t> out(q.size());
  int32_t flag = 0;
  cudaMemcpy(out.data(), dout.ptr, out.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(&flag, dflag.ptr, 4, cudaMemcpyDeviceToHost);

  // Reference: mirror update for accepted sequences, then attention in double.
  std::vector<char> refused(static_cast<size_t>(n), 0);
  for (int64_t b = 0; b < n; ++b) {
    const int32_t s = slot_ids[b];
    refused[b] = m.lens[s] + counts[b] > mapped[s] || m.lens[s] + counts[b] > c.S;
    if (refused[b]) continue;
    for (int32_t i = 0; i < counts[b]; ++i)
      for (int64_t e = 0; e < Hkv * D; ++e) {
        m.k[((s * c.S + m.lens[s] + i) * Hkv) * D + e] = get(kn, (cu[b] + i) * Hkv * D + e, t);
        m.v[((s * c.S + m.lens[s] + i) * Hkv) * D + e] = get(vn, (cu[b] + i) * Hkv * D + e, t);
      }
  }
  double worst = 0;
  bool zeros_ok = true;
  const int64_t G = Hq / Hkv;
  for (int64_t b = 0; b < n; ++b) {
    const int32_t s = slot_ids[b];
    for (int32_t i = 0; i < counts[b]; ++i)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t row = (cu[b] + i) * Hq + h;
        if (refused[b]) {
          for (int64_t d = 0; d < D; ++d) zeros_ok &= get(out, row * D + d, t) == 0.f;
          continue;
        }
        const int64_t nk = m.lens[s] + i + 1;  // causal: keys < len + i + 1
        std::vector<double> w(static_cast<size_t>(nk));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < nk; ++j) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d)
            x += get(q, row * D + d, t) * static_cast<double>(m.k[((s * c.S + j) * Hkv + h / G) * D + d]);
          w[j] = x / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, w[j]);
        }
        for (auto& x : w) { x = std::exp(x - mx); sum += x; }
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < nk; ++j) acc += w[j] * m.v[((s * c.S + j) * Hkv + h / G) * D + d];
          worst = std::max(worst, std::fabs(acc / sum - get(out, row * D + d, t)));
        }
      }
  }
  r.check(worst <= tolerance(t), name + " attention matches the reference", "max abs error " + std::to_string(worst));
  const bool any_refused = std::find(refused.begin(), refused.end(), 1) != refused.end();
  r.eq(flag, any_refused ? 1 : 0, name + " error flag");
  if (any_refused) r.check(zeros_ok, name + " refused sequences output zeros");
  // Written rows (and every other mapped row of the touched slots) equal the mirror.
  bool rows_ok = true;
  std::vector<uint8_t> row(static_cast<size_t>(Hkv * D * eb));
  for (int64_t b = 0; b < n; ++b) {
    const int32_t s = slot_ids[b];
    const int32_t upto = refused[b] ? m.lens[s] : m.lens[s] + counts[b];
    for (int32_t j = 0; j < upto && j < mapped[s]; ++j)
      for (int kv = 0; kv < 2; ++kv) {
        const char* src = (kv ? c.vbase() : c.kbase()) + (s * c.stride_slot() + j * c.stride_tok()) * eb;
        cudaMemcpy(row.data(), src, row.size(), cudaMemcpyDeviceToHost);
        const std::vector<float>& mir = kv ? m.v : m.k;
        for (int64_t e = 0; e < Hkv * D; ++e) rows_ok &= get(row, e, t) == mir[((s * c.S + j) * Hkv) * D + e];
      }
  }
  r.check(rows_ok, name + " cache rows equal the mirror");
  for (int64_t b = 0; b < n; ++b)
    if (!refused[b]) m.lens[slot_ids[b]] += counts[b];
}

void test_varlen(Report& r, ScalarType t, int64_t Hq, int64_t Hkv, int64_t D, int64_t L) {
  const int64_t slots = 6, S = 300;
  const std::string name = std::string("varlen ") + scalar_type_name(t) + " " + std::to_string(Hq) + "/" +
                           std::to_string(Hkv) + " D" + std::to_string(D) + (L > 1 ? " token-rows" : " one-layer");
  Caches c{nullptr, nullptr, slots, S, Hkv, D, L, L > 1 ? L - 1 : 0, t};
  const int64_t row = (L > 1 ? L * 2 : 1) * Hkv * D * esize(t);
  if (!r.ok(SlotCache::create(kGpu, {slots, S, row}, 0, &c.k), name + " create")) return;
  if (L > 1) c.v = c.k;
  else if (!r.ok(SlotCache::create(kGpu, {slots, S, row}, 0, &c.v), name + " create v")) return;
  Mirror m{std::vector<float>(static_cast<size_t>(slots * S * Hkv * D)), {}, std::vector<int32_t>(slots, 0)};
  m.v = m.k;
  std::mt19937 rng(7);
  auto step = [&](const std::string& what, std::vector<int32_t> counts, std::vector<int32_t> ids, bool reserve = true) {
    if (reserve)
      for (size_t b = 0; b < ids.size(); ++b) r.ok(c.reserve(ids[b], m.lens[ids[b]] + counts[b]), name + " reserve");
    run_step(r, name + " " + what, c, m, Hq, counts, ids, rng);
  };
  step("prefill", {5, 40, 1, 200}, {0, 1, 5, 3});            // slot 2 and 4 empty, slot 5 at length 0
  step("mix [1,1,3,1]", {1, 1, 3, 1}, {1, 0, 2, 3});          // slot 2 takes a fresh 3-token prompt
  step("fill to max_seq_len", {static_cast<int32_t>(S - 201)}, {3});
  step("decode", {1, 1, 1, 1}, {5, 2, 1, 0});
  // Not reserved: slot 4 gets 2 tokens with no rows mapped: refused, the others still served.
  step("unreserved slot", {1, 2}, {0, 4}, false);
  // A released slot read with a non-zero length is refused too.
  r.ok(c.k->release(1, nullptr), name + " release");
  if (c.v != c.k) r.ok(c.v->release(1, nullptr), name + " release v");
  run_step(r, name + " released slot", c, m, Hq, {1}, {1}, rng);
  m.lens[1] = 0;
}

void test_mapping(Report& r) {
  // One-layer fp16 GQA cache rows of 2 KiB: a 2 MiB chunk holds 1024 tokens of one slot.
  std::shared_ptr<SlotCache> c;
  if (!r.ok(SlotCache::create(kGpu, {64, 4096, 2048}, 0, &c), "slot gpu create")) return;
  r.eq(c->chunk_bytes(), size_t(2) << 20, "slot gpu chunk is 2 MiB");
  for (int s = 0; s < 64; ++s) r.ok(c->reserve(s, 1 + (s * 37) % 1500, nullptr), "slot gpu reserve");
  int64_t need_chunks = 0;
  for (int s = 0; s < 64; ++s) need_chunks += ((1 + (s * 37) % 1500) * 2048 + (2 << 20) - 1) / (2 << 20);
  r.eq(c->mapped_bytes(), need_chunks * (2 << 20), "slot gpu maps each slot's own chunks (4096 rows = 4 chunks apart)");
  for (int s = 0; s < 64; s += 2) r.ok(c->release(s, nullptr), "slot gpu release");
  int64_t left = 0;
  for (int s = 1; s < 64; s += 2) left += ((1 + (s * 37) % 1500) * 2048 + (2 << 20) - 1) / (2 << 20);
  r.eq(c->mapped_bytes(), left * (2 << 20), "slot gpu release gives the chunks back");
}

void bench(Report& r, int64_t qn) {
  // One inflight step at 64 slots of mixed lengths (uniform 1..4095), Llama-3-8B attention shape
  // (32 q heads, 8 kv heads, 128, fp16), token-row layout of 32 layers (layer 31's view), with qn new
  // tokens per slot: 1 for a decode step, k+1 for a speculative verify step (causal within them).
  const int64_t slots = 64, S = 4096, Hq = 32, Hkv = 8, D = 128, L = 32;
  const ScalarType t = ScalarType::kFloat16;
  std::shared_ptr<SlotCache> c;
  if (!r.ok(SlotCache::create(kGpu, {slots, S, L * 2 * Hkv * D * 2}, 0, &c), "bench create")) return;
  std::mt19937 rng(11);
  std::vector<int32_t> lens(slots), cu(slots + 1, 0), ids(slots);
  int64_t ctx = 0;
  for (int s = 0; s < slots; ++s) {
    lens[s] = 1 + static_cast<int32_t>(rng() % (S - 1));
    ids[s] = s;
    cu[s + 1] = static_cast<int32_t>((s + 1) * qn);
    ctx += lens[s];
    if (!r.ok(c->reserve(s, lens[s] + qn, nullptr), "bench reserve")) return;
  }
  std::vector<int32_t> mapped = c->mapped_tokens_all(nullptr);
  const int64_t total = slots * qn;
  DevBuf dq(total * Hq * D * 2), dk(total * Hkv * D * 2), dout(total * Hq * D * 2), dcu(cu.size() * 4),
      dids(slots * 4), dlens(slots * 4), dmapped(slots * 4), dflag(4);
  cudaMemset(dq.ptr, 0, total * Hq * D * 2);
  cudaMemset(dk.ptr, 0, total * Hkv * D * 2);
  upload(dcu, cu); upload(dids, ids); upload(dlens, lens); upload(dmapped, mapped);
  cudaMemset(dflag.ptr, 0, 4);
  const int64_t tok = L * 2 * Hkv * D, layer = L - 1;
  AppendVarlenParams ap;
  ap.src = dk.ptr; ap.num_seqs = slots; ap.total_tokens = total; ap.heads = Hkv; ap.head_dim = D; ap.elem_bytes = 2;
  ap.num_slots = slots; ap.max_seq_len = S;
  ap.dst_stride[0] = S * tok; ap.dst_stride[1] = tok; ap.dst_stride[2] = D;
  ap.src_stride[0] = Hkv * D; ap.src_stride[1] = D;
  ap.cu_seqlens = static_cast<int32_t*>(dcu.ptr); ap.slot_ids = static_cast<int32_t*>(dids.ptr);
  ap.cache_seqlens = static_cast<int32_t*>(dlens.ptr); ap.kv_mapped = static_cast<int32_t*>(dmapped.ptr);
  ap.error_flag = static_cast<int32_t*>(dflag.ptr);
  DecodeAttentionParams p;
  p.batch = slots; p.q_len = qn; p.q_heads = Hq; p.kv_heads = Hkv; p.head_dim = D; p.kv_len = S; p.dtype = t;
  p.scale = 1.f / std::sqrt(128.f); p.q = dq.ptr; p.out = dout.ptr;
  char* kptr = c->data() + 2 * layer * Hkv * D * 2;
  char* vptr = c->data() + (2 * layer + 1) * Hkv * D * 2;
  p.k = kptr;
  p.v = vptr;
  const int64_t qs[4] = {0, Hq * D, D, 1}, ks[4] = {tok, S * tok, D, 1};
  std::copy(qs, qs + 4, p.q_stride); std::copy(qs, qs + 4, p.out_stride);
  std::copy(ks, ks + 4, p.k_stride); std::copy(ks, ks + 4, p.v_stride);
  p.cu_seqlens_q = ap.cu_seqlens; p.kv_batch_index = ap.slot_ids; p.cache_seqlens = ap.cache_seqlens;
  p.kv_mapped = ap.kv_mapped; p.error_flag = ap.error_flag;
  const size_t ws = decode_attention_cuda_workspace_bytes(p);
  DevBuf dws(ws);
  p.workspace = ws ? dws.ptr : nullptr;
  p.workspace_bytes = ws;
  auto one_step = [&]() {
    ap.dst = kptr;
    Status s1 = append_varlen_cuda(ap, nullptr);
    ap.dst = vptr;
    Status s2 = append_varlen_cuda(ap, nullptr);
    Status s3 = decode_attention_cuda(p, nullptr);
    return s1.ok() && s2.ok() && s3.ok();
  };
  bool ok = true;
  for (int i = 0; i < 10; ++i) ok &= one_step();
  cudaEvent_t a, b;
  cudaEventCreate(&a); cudaEventCreate(&b);
  const int iters = 200;
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) ok &= one_step();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  int32_t flag = 1;
  cudaMemcpy(&flag, dflag.ptr, 4, cudaMemcpyDeviceToHost);
  r.check(ok && flag == 0, "bench step launches and flags nothing");
  const double us = 1000.0 * ms / iters;
  const double kv_bytes = 2.0 * (ctx + total) * Hkv * D * 2;
  std::printf("info bench new_tokens_per_slot=%lld slots=%lld context_tokens=%lld (mean %lld) Hq=%lld Hkv=%lld D=%lld fp16 token-rows L=%lld: "
              "%.1f us/step (append K+V + attention, one layer), %.0f GB/s of K+V read\n",
              static_cast<long long>(qn), static_cast<long long>(slots), static_cast<long long>(ctx), static_cast<long long>(ctx / slots),
              static_cast<long long>(Hq), static_cast<long long>(Hkv), static_cast<long long>(D),
              static_cast<long long>(L), us, kv_bytes / (us * 1e3));
  cudaEventDestroy(a); cudaEventDestroy(b);
}

}  // namespace

int main(int argc, char** argv) {
  const bool run_bench = !(argc > 1 && std::string(argv[1]) == "--no-bench");
  Report r;
  test_mapping(r);
  for (ScalarType t : {ScalarType::kFloat16, ScalarType::kBFloat16, ScalarType::kFloat32}) {
    test_varlen(r, t, 32, 8, 128, 1);
    test_varlen(r, t, 8, 1, 128, 1);
    test_varlen(r, t, 4, 4, 64, 1);
  }
  test_varlen(r, ScalarType::kFloat16, 32, 8, 128, 4);  // token rows: 4 layers, layer 3's view
  if (run_bench) {
    bench(r, 1);  // decode
    bench(r, 5);  // speculative verify of k = 4 draft tokens
  }
  return r.finish();
}

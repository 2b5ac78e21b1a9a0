// 8-bit KV caches on the GPU against the host kernels (kv_quant_append.h, kv_quant_attention.h):
// the CUDA append writes the very bytes and scales the host append writes (fp8 and int8, float32 /
// float16 / bfloat16 tokens, with ties, NaN, infinities and all-zero tokens); the CUDA attention
// matches the host attention over the same codes (head_dim 64/128/256, query groups 1/2/3/4/8,
// the variable-length fields, a refused entry), with both kernels where both apply: the tensor-core
// one (float16/bfloat16 q, head_dim 64/128: query groups 1-32, three cache layouts, lengths around
// the 64-key tile) and the CUDA-core one; then, unless --no-bench, decode attention timed
// against our float16 kernel on the same shapes (Llama-3-8B GQA 32/8 and Llama-2-7B MHA 32/32,
// head_dim 128, B 1/8/32, S 4k-64k; CUDA-graph replay, cold L2), in GB/s of the bytes read.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graph_replay_cuda.h"
#include "harness.h"
#include "kernels/decode_attention.h"
#include "kernels/float_convert.h"
#include "kernels/kv_quant_append.h"
#include "kernels/kv_quant_attention.h"

using pvt::KvQuant;
using pvt::ScalarType;

namespace {

pvt_test::Report r;

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      std::printf("FAIL %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__);       \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) { CK(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T))); }
  ~Dev() { cudaFree(p); }
  void put(const std::vector<T>& h) { CK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

size_t elem_size(ScalarType t) { return t == ScalarType::kFloat32 ? 4 : 2; }

// Host float values as the bytes of `t` (float16 / bfloat16 rounded to nearest even).
std::vector<uint8_t> as_bytes(const std::vector<float>& x, ScalarType t) {
  std::vector<uint8_t> out(x.size() * elem_size(t));
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == ScalarType::kFloat32) {
      std::memcpy(&out[4 * i], &x[i], 4);
    } else {
      const uint16_t h = t == ScalarType::kFloat16 ? pvt::host_float::float_to_half(x[i]) : pvt::host_float::float_to_bf16(x[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

std::vector<float> from_bytes(const std::vector<uint8_t>& b, ScalarType t) {
  std::vector<float> out(b.size() / elem_size(t));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == ScalarType::kFloat32) {
      std::memcpy(&out[i], &b[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &b[2 * i], 2);
      out[i] = t == ScalarType::kFloat16 ? pvt::host_float::half_to_float(h) : pvt::host_float::bf16_to_float(h);
    }
  }
  return out;
}

const char* kind_name(KvQuant k) { return k == KvQuant::kInt8 ? "int8" : "fp8"; }
const char* type_name(ScalarType t) { return pvt::scalar_type_name(t); }

// ---- append: the CUDA bytes equal the host bytes.
void test_append(KvQuant kind, ScalarType t) {
  const int64_t B = 3, T = 7, H = 4, D = 96;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> x(B * T * H * D);
  for (auto& v : x) v = nd(rng);
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.5f, 1.5f, 2.5f, 448.f, 464.f, -500.f, 1e-3f, 0.f};
  for (size_t i = 0; i < sizeof(specials) / 4; ++i) x[i * 13] = specials[i];
  for (int64_t d = 0; d < D; ++d) x[(1 * T * H + 2 * H + 3) * D + d] = 0.f;  // an all-zero token
  const auto bytes = as_bytes(x, t);
  std::vector<float> fp8_scale = {0.5f, 0.01f, 2.f, 1.f};
  pvt::QuantAppendParams p;
  p.kind = kind;
  p.src_type = t;
  p.outer = B, p.inner = T, p.heads = H, p.head_dim = D;
  const int64_t ss[3] = {T * H * D, H * D, D}, ds[3] = {H * D, B * H * D, D}, sc[3] = {H, B * H, 1};
  std::copy(ss, ss + 3, p.src_stride);
  std::copy(ds, ds + 3, p.dst_stride);
  // Host run.
  std::vector<uint8_t> hcodes(B * T * H * D);
  std::vector<float> hscale(kind == KvQuant::kInt8 ? B * T * H : H);
  if (kind == KvQuant::kInt8) std::copy(sc, sc + 3, p.scale_stride); else p.scale_stride[2] = 1;
  if (kind != KvQuant::kInt8) hscale = fp8_scale;
  pvt::QuantAppendParams hp = p;
  hp.src = bytes.data(), hp.dst = hcodes.data(), hp.scale = hscale.data();
  r.ok(pvt::quant_append_cpu(hp), std::string("append.host.") + kind_name(kind) + "." + type_name(t));
  // Device run.
  Dev<uint8_t> src(bytes.size()), dst(hcodes.size());
  Dev<float> scale(hscale.size());
  src.put(bytes);
  if (kind != KvQuant::kInt8) scale.put(fp8_scale);
  pvt::QuantAppendParams dp = p;
  dp.src = src.p, dp.dst = dst.p, dp.scale = scale.p;
  r.ok(pvt::quant_append_cuda(dp, nullptr), std::string("append.cuda.launch.") + kind_name(kind));
  CK(cudaDeviceSynchronize());
  const std::string name = std::string("append.bytes.") + kind_name(kind) + "." + type_name(t);
  r.check(dst.get() == hcodes, name, "CUDA codes differ from the host codes");
  if (kind == KvQuant::kInt8) r.check(scale.get() == hscale, name + ".scales", "CUDA scales differ");
}

// ---- attention: CUDA against the host kernel over the same codes.
// Cache layouts (the int8 scales alike, without head_dim): seq-major [S, rows, Hkv, D] (a VTensor),
// batch-major [rows, S, Hkv, D], head-major [rows, Hkv, S, D].
enum Layout { kSeqMajor = 0, kBatchMajor = 1, kHeadMajor = 2 };

struct AttnCase {
  KvQuant kind;
  ScalarType t;
  int64_t B, Hq, Hkv, D, S;
  bool varlen;
  Layout layout = kSeqMajor;
  int64_t splits = 0;  // > 0: DecodeOptions::splits (the merge of more than one chunk of partials)
  int warps = 0;       // > 0: DecodeOptions::mma_warps (the tensor-core kernel's blocks of 4 or 8 warps)
  int warp_keys = 0;   // > 0: QuantAttentionParams::warp_keys (16 or 32 keys a warp of every tile)
  int keys_on_m = 0;   // QuantAttentionParams::keys_on_m (1: mma_keys_kernel forced; -1: mma_split_kernel)
  bool rising = false;  // seq-major only: K grows along the keys (int8: its scales; fp8: its codes' exponents), so
                        // a row's maximum keeps moving past later tiles (the keys kernel's conditional rescale)
};

// Whether quant_attention_cuda takes the tensor-core kernel for c (kv_quant_attention_cuda.cuh's
// mma_takes, on a device of compute capability 8.0+).
bool tensor_core_case(const AttnCase& c) {
  return c.t != ScalarType::kFloat32 && (c.D == 64 || c.D == 128);
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

void test_attention(const AttnCase& c) {
  const int64_t B = c.B, Hq = c.Hq, Hkv = c.Hkv, D = c.D, S = c.S, rows = B + 1;  // one spare cache row
  std::mt19937 rng(static_cast<unsigned>(B * 7 + Hq + D + S));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> uni(-1.f, 1.f), pos(0.005f, 0.05f);
  // Codes [S, rows, Hkv, D]; NaN codes of fp8 (0x7F / 0xFF) are never written by an append.
  std::vector<uint8_t> k(S * rows * Hkv * D), v(k.size());
  for (auto* buf : {&k, &v}) {
    for (auto& x : *buf) {
      x = static_cast<uint8_t>(byte(rng));
      if (c.kind == KvQuant::kFp8E4M3 && (x & 0x7F) == 0x7F) x = 0x7E;
      if (c.kind == KvQuant::kInt8 && x == 0x80) x = 0x81;  // -128 is never written either
    }
  }
  const bool per_token = c.kind == KvQuant::kInt8;
  std::vector<float> ks(per_token ? S * rows * Hkv : Hkv), vs(ks.size());
  for (auto& x : ks) x = per_token ? pos(rng) : pos(rng) * 0.2f;
  for (auto& x : vs) x = pos(rng) * (per_token ? 1.f : 0.2f);
  if (c.rising) {  // token t of [S, rows, Hkv, D] codes / [S, rows, Hkv] scales
    if (per_token) {
      for (size_t i = 0; i < ks.size(); ++i) ks[i] *= 1.f + 8.f * static_cast<float>(i / (rows * Hkv)) / S;
    } else {
      for (size_t i = 0; i < k.size(); ++i) {  // exponent field 1 .. 14 (no NaN code): 2^-6 .. 2^7 along the keys
        const int e = 1 + static_cast<int>(13 * static_cast<int64_t>(i / (rows * Hkv * D)) / S);
        k[i] = static_cast<uint8_t>((k[i] & 0x87) | (e << 3));
      }
    }
  }
  std::vector<float> q(B * Hq * D);
  for (auto& x : q) x = uni(rng) * 4.f;
  const auto qbytes = as_bytes(q, c.t);
  std::vector<int32_t> seqlens(rows), index(B), mapped(rows);
  for (int64_t i = 0; i < rows; ++i) seqlens[i] = static_cast<int32_t>((S - 1) - (i * 37) % std::max<int64_t>(1, S / 2));
  for (int64_t b = 0; b < B; ++b) index[b] = static_cast<int32_t>((b + 1) % rows);
  for (int64_t i = 0; i < rows; ++i) mapped[i] = static_cast<int32_t>(S);
  if (c.varlen && B > 1) mapped[index[1]] = seqlens[index[1]];  // entry 1 reads one row past its mapping

  pvt::QuantAttentionParams p;
  pvt::DecodeAttentionParams& a = p.attn;
  a.batch = B, a.q_len = 1, a.q_heads = Hq, a.kv_heads = Hkv, a.head_dim = D, a.kv_len = S;
  a.dtype = c.t;
  a.scale = 1.f / std::sqrt(static_cast<float>(D));
  const int64_t qs[4] = {Hq * D, Hq * D, D, 1};
  const int64_t kvs[3][4] = {{rows * Hkv * D, Hkv * D, D, 1}, {Hkv * D, S * Hkv * D, D, 1}, {D, Hkv * S * D, S * D, 1}};
  const int64_t scs[3][3] = {{rows * Hkv, Hkv, 1}, {Hkv, S * Hkv, 1}, {1, Hkv * S, S}};
  std::copy(qs, qs + 4, a.q_stride);
  std::copy(qs, qs + 4, a.out_stride);
  std::copy(kvs[c.layout], kvs[c.layout] + 4, a.k_stride);
  std::copy(kvs[c.layout], kvs[c.layout] + 4, a.v_stride);
  p.kind = c.kind;
  const int64_t* st = scs[c.layout];
  if (per_token) std::copy(st, st + 3, p.k_scale_stride), std::copy(st, st + 3, p.v_scale_stride);
  else p.k_scale_stride[2] = p.v_scale_stride[2] = 1;

  const std::string name = std::string("attention.") + kind_name(c.kind) + "." + type_name(c.t) + ".B" +
                           std::to_string(B) + ".Hq" + std::to_string(Hq) + ".Hkv" + std::to_string(Hkv) + ".D" +
                           std::to_string(D) + ".S" + std::to_string(S) + (c.varlen ? ".varlen" : "") +
                           (c.layout == kBatchMajor ? ".batch_major" : c.layout == kHeadMajor ? ".head_major" : "") +
                           (c.splits > 0 ? ".splits" + std::to_string(c.splits) : "") +
                           (c.warps > 0 ? ".w" + std::to_string(c.warps) : "") +
                           (c.warp_keys > 0 ? ".k" + std::to_string(c.warp_keys) : "") + (c.keys_on_m == 1 ? ".keys_on_m" : c.keys_on_m == -1 ? ".heads_on_m" : "") +
                           (c.rising ? ".rising" : "");
  pvt::DecodeOptions opts;
  opts.splits = c.splits;
  opts.mma_warps = c.warps;
  if (c.splits > 0 || c.warps > 0) a.options = &opts;
  p.warp_keys = c.warp_keys;
  p.keys_on_m = c.keys_on_m;
  // Host.
  std::vector<uint8_t> hout(B * Hq * D * elem_size(c.t));
  std::vector<float> hlse(B * Hq);
  pvt::QuantAttentionParams hp = p;
  hp.attn.q = qbytes.data(), hp.attn.k = k.data(), hp.attn.v = v.data(), hp.attn.out = hout.data();
  hp.attn.lse = hlse.data();
  hp.k_scale = ks.data(), hp.v_scale = vs.data();
  std::vector<int32_t> hmapped = mapped;
  if (c.varlen) {
    hp.attn.cache_seqlens = seqlens.data(), hp.attn.kv_batch_index = index.data();
    if (B > 1) hmapped[index[1]] = S;  // the host refuses the whole call: compare the others only
  }
  if (!r.ok(pvt::quant_attention_cpu(hp), name + ".host")) return;
  // Device: each kernel that applies (the tensor-core one first).
  Dev<uint8_t> dq(qbytes.size()), dk(k.size()), dv(v.size()), dout(hout.size());
  Dev<float> dks(ks.size()), dvs(vs.size()), dlse(hlse.size());
  Dev<int32_t> dseq(rows), didx(B), dmap(rows), dflag(1);
  dq.put(qbytes), dk.put(k), dv.put(v), dks.put(ks), dvs.put(vs);
  dseq.put(seqlens), didx.put(index), dmap.put(mapped);
  // A bound on |V|: the tensor-core kernel rounds P to 16 bits (as the float16 kernels do), an
  // error of at most the unit roundoff u times sum_k p_k |v_k| / l <= u max|V| in each output.
  float code_max = 0.f;
  for (const uint8_t x : v) {
    code_max = std::max(code_max, std::fabs(c.kind == KvQuant::kInt8 ? static_cast<float>(static_cast<int8_t>(x))
                                                                     : pvt::kv_quant::fp8_e4m3_decode(x)));
  }
  const float vmax = code_max * *std::max_element(vs.begin(), vs.end());
  for (const bool tensor_cores : {true, false}) {
    if (tensor_cores && !tensor_core_case(c)) continue;
    const std::string dname = name + (tensor_cores ? ".tc" : ".cc");
    dflag.put({0});
    CK(cudaMemset(dout.p, 0xff, dout.n));  // NaN bytes: what a kernel does not write shows
    pvt::QuantAttentionParams dp = p;
    dp.tensor_cores = tensor_cores;
    dp.attn.q = dq.p, dp.attn.k = dk.p, dp.attn.v = dv.p, dp.attn.out = dout.p, dp.attn.lse = dlse.p;
    dp.k_scale = dks.p, dp.v_scale = dvs.p;
    if (c.varlen) {
      dp.attn.cache_seqlens = dseq.p, dp.attn.kv_batch_index = didx.p, dp.attn.kv_mapped = dmap.p;
      dp.attn.error_flag = dflag.p;
    }
    const size_t ws_bytes = pvt::quant_attention_cuda_workspace_bytes(dp);
    Dev<uint8_t> ws(ws_bytes);
    CK(cudaMemset(ws.p, 0xa5, ws.n));
    dp.attn.workspace = ws.p, dp.attn.workspace_bytes = ws_bytes;
    if (!r.ok(pvt::quant_attention_cuda(dp, nullptr), dname + ".launch")) continue;
    CK(cudaDeviceSynchronize());
    // Which path ran, seen from the workspace: one forced split of the tensor-core kernel writes the rows
    // itself and leaves it untouched; more splits write their partials there for merge_kernel.
    if (tensor_cores && c.splits > 0) {
      bool untouched = true;
      for (const uint8_t x : ws.get()) untouched = untouched && x == 0xa5;
      const bool own = c.splits == 1;
      r.check(untouched == own, dname + ".rows_written_by_split_kernel",
              own ? "the workspace was written: merge_kernel's path" : "the workspace was not written");
    }
    auto got = from_bytes(dout.get(), c.t), want = from_bytes(hout, c.t);
    auto glse = dlse.get();
    std::vector<float> wlse = hlse;
    if (c.varlen && B > 1) {  // entry 1 refused: zeros and -inf from the GPU, flagged; left out of the comparison
      bool zeros = true;
      for (int64_t i = Hq * D; i < 2 * Hq * D; ++i) zeros = zeros && got[i] == 0.f;
      r.check(zeros && std::isinf(glse[Hq]) && dflag.get()[0] == 1, dname + ".refused_entry", "not zeros/-inf/flagged");
      std::fill(got.begin() + Hq * D, got.begin() + 2 * Hq * D, 0.f);
      std::fill(want.begin() + Hq * D, want.begin() + 2 * Hq * D, 0.f);
      std::fill(glse.begin() + Hq, glse.begin() + 2 * Hq, 0.f);
      std::fill(wlse.begin() + Hq, wlse.begin() + 2 * Hq, 0.f);
    }
    // The output's own rounding: a fixed floor, plus one unit in the last place at the largest output
    // (host and device sum in different orders, so they may round to neighbours: one float16 ulp,
    // 2^-8 at |out| in [4, 8), failed the fixed 2e-3 alone on the H200, 2026-12-01); plus P's
    // rounding on tensor cores.
    const float u = c.t == ScalarType::kFloat32 ? 0x1p-24f : c.t == ScalarType::kFloat16 ? 0x1p-11f : 0x1p-8f;
    float out_max = 0.f;
    for (const float x : want) out_max = std::max(out_max, std::fabs(x));
    float tol = (c.t == ScalarType::kFloat32 ? 2e-4f : c.t == ScalarType::kFloat16 ? 2e-3f : 1.6e-2f) + 2.f * u * out_max;
    if (tensor_cores) tol += u * vmax;
    const float err = max_abs_diff(got, want), lerr = max_abs_diff(glse, wlse);
    r.check(err <= tol && lerr <= 1e-3f, dname,
            "max |out diff| " + std::to_string(err) + " (tolerance " + std::to_string(tol) + "), |lse diff| " + std::to_string(lerr));
  }
}

// ---- benchmark against our float16 kernel.
__global__ void fill_kernel(uint8_t* p, size_t n, uint32_t seed, bool fp8) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * static_cast<size_t>(blockDim.x)) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    uint8_t b = static_cast<uint8_t>(h >> 24);
    if (fp8) b = (b & 0x80) | (0x28 + (b & 0x1F));  // |value| in [0.125, 1): a sane fp8 range
    p[i] = b;
  }
}

void fill(void* p, size_t bytes, uint32_t seed, bool fp8 = false) {
  fill_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), bytes, seed, fp8);
  CK(cudaGetLastError());
}

__global__ void half_fill_kernel(__half* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * static_cast<size_t>(blockDim.x)) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    p[i] = __float2half(static_cast<float>(h & 0xffff) / 32768.f - 1.f);
  }
}

using pvt_test::graph_us;  // graph_replay_cuda.h

// The benchmark's call on B entries, Hkv kv heads, S keys (32 query heads, head_dim 128, float16 q
// and out, seq-major caches), without K/V, workspace or options.
// The bench's and the sweep's model: Llama-3-8B (32 query heads on 8 kv heads) and Llama-2-7B (32 on 32) at
// head_dim 128, or one given by --model HQ,HKV,D.
int64_t g_model_hq = 32, g_model_hkv = 0, g_model_d = 128;
std::vector<int64_t> bench_kv_heads() { return g_model_hkv > 0 ? std::vector<int64_t>{g_model_hkv} : std::vector<int64_t>{8, 32}; }
std::string bench_model_name(int64_t Hkv) {
  if (g_model_hkv > 0) {
    return "model-" + std::to_string(g_model_hq) + "/" + std::to_string(Hkv) + "-d" + std::to_string(g_model_d);
  }
  return Hkv == 8 ? "llama3-8b-gqa" : "llama2-7b-mha";
}

pvt::DecodeAttentionParams bench_attn(int64_t B, int64_t Hkv, int64_t S, void* q, void* out) {
  const int64_t Hq = g_model_hq, D = g_model_d;
  pvt::DecodeAttentionParams a;
  a.batch = B, a.q_len = 1, a.q_heads = Hq, a.kv_heads = Hkv, a.head_dim = D, a.kv_len = S;
  a.dtype = ScalarType::kFloat16;
  a.scale = 1.f / std::sqrt(static_cast<float>(D));
  const int64_t qs[4] = {Hq * D, Hq * D, D, 1}, kvs[4] = {B * Hkv * D, Hkv * D, D, 1};
  std::copy(qs, qs + 4, a.q_stride), std::copy(qs, qs + 4, a.out_stride);
  std::copy(kvs, kvs + 4, a.k_stride), std::copy(kvs, kvs + 4, a.v_stride);
  a.q = q, a.out = out;
  return a;
}

bool g_scale_tokens_inner = false;  // --scale-tokens-inner: the bench's int8 scales as [B][Hkv][S] (set_bench_kind)

// The 8-bit kind of the benchmark's call (kind 0: fp8 with per-head scales fp8_scale; 1: int8 with the
// per-token scales ks / vs) over the codes k / v.
void set_bench_kind(pvt::QuantAttentionParams* p, int kind, const float* fp8_scale, void* k, void* v, void* ks,
                    void* vs) {
  p->kind = kind == 0 ? KvQuant::kFp8E4M3 : KvQuant::kInt8;
  if (kind == 0) {
    p->k_scale = p->v_scale = fp8_scale;
    p->k_scale_stride[2] = p->v_scale_stride[2] = 1;
  } else {
    // The caches' own order, [S][B][Hkv] (a token's scales of every head together), or with --scale-tokens-inner
    // [B][Hkv][S] (a head's scales of consecutive tokens together: what the scale loads would cost if they were
    // not one 32-byte sector a token and head; not a layout the caches have).
    const int64_t S = p->attn.kv_len, B = p->attn.batch, H = p->attn.kv_heads;
    int64_t st[3] = {B * H, H, 1};
    if (g_scale_tokens_inner) st[0] = 1, st[1] = H * S, st[2] = S;
    std::copy(st, st + 3, p->k_scale_stride), std::copy(st, st + 3, p->v_scale_stride);
    p->k_scale = static_cast<float*>(ks), p->v_scale = static_cast<float*>(vs);
  }
  p->attn.k = k, p->attn.v = v;
}

// --sweep: the tensor-core kernel's time against forced split counts on bench()'s rows (the planner's own
// count first, as "auto"), graph replay, cold L2, as bench() times them. --profile: one plain call of
// the planner's count on GQA B = 32 S = 32k and B = 1 S = 4k, each kind (what Nsight Compute looks at).
bool g_sweep_auto = false;  // --auto: the sweep's rows at the planner's count only
int g_warps = 0;            // --warps N: the 8-bit tensor-core blocks of N warps in the sweep and bench
int g_warp_keys = 0;        // --warp-keys N: ... of warps taking N keys of every tile (16 or 32)
int64_t g_batch = 0;        // --batch N: the sweep's and the bench's rows of batch N only
int g_merge_chunk = 0;      // --merge-chunk N: DecodeOptions::merge_chunk in the sweep and the bench
int g_keys_on_m = 0;        // --keys-on-m N: QuantAttentionParams::keys_on_m in the sweep and the bench
int g_prefetch = 0;         // --prefetch N: DecodeOptions::prefetch_tiles in the sweep and the bench (float16 too)
int64_t g_min_iters = 8;    // --min-iters N: at least N calls a graph in the sweep and the bench (the graph's
                            // own launch is shared by fewer calls the fewer there are)

void sweep(bool profile) {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  int l2 = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const int64_t Hq = g_model_hq, D = g_model_d;
  struct Row { int64_t Hkv, B, S; };
  std::vector<Row> rows = profile ? std::vector<Row>{Row{8, 32, 32768}, Row{8, 1, 4096}}
                                        : std::vector<Row>{};
  if (!profile) {  // bench()'s rows
    for (int64_t Hkv : bench_kv_heads()) {
      for (int64_t B : {1, 8, 32}) {
        if (g_batch > 0 && B != g_batch) continue;
        for (int64_t S : {4096, 16384, 32768, 65536}) rows.push_back(Row{Hkv, B, S});
      }
    }
  }
  for (const Row row : rows) {
    const int64_t Hkv = row.Hkv, B = row.B, S = row.S;
    const size_t elems = static_cast<size_t>(S) * B * Hkv * D;
    const int cp = static_cast<int>(std::min<size_t>(8, std::max<size_t>(1, (3 * size_t(l2) + elems - 1) / elems)));
    std::vector<void*> k(cp), v(cp), ks(cp), vs(cp);
    for (int i = 0; i < cp; ++i) {
      CK(cudaMalloc(&k[i], elems)); CK(cudaMalloc(&v[i], elems));
      CK(cudaMalloc(&ks[i], elems / D * 4)); CK(cudaMalloc(&vs[i], elems / D * 4));
      fill(k[i], elems, 3 + i, true), fill(v[i], elems, 4 + i, true);
      CK(cudaMemset(ks[i], 0, elems / D * 4));
      CK(cudaMemset(vs[i], 0, elems / D * 4));
    }
    Dev<__half> q(B * Hq * D), out(B * Hq * D);
    half_fill_kernel<<<64, 256>>>(q.p, q.n, 9);
    Dev<float> fp8_scale(Hkv);
    fp8_scale.put(std::vector<float>(Hkv, 0.01f));
    const int iters = static_cast<int>(std::max<int64_t>(g_min_iters, std::min<int64_t>(100, int64_t(2e9 / (2 * elems)))));
    for (int kind = 0; kind < 2; ++kind) {
      std::string line = "SWEEP " + bench_model_name(Hkv) + " B" + std::to_string(B) + " S" +
                         std::to_string(S) + (kind == 0 ? " fp8" : " int8");
      for (int64_t n : profile || g_sweep_auto ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64}) {
        pvt::DecodeOptions opts;
        opts.splits = n;
        opts.mma_warps = g_warps;
        opts.merge_chunk = g_merge_chunk;
        opts.prefetch_tiles = g_prefetch;
        pvt::QuantAttentionParams p;
        p.attn = bench_attn(B, Hkv, S, q.p, out.p);
        p.attn.options = &opts;
        p.warp_keys = g_warp_keys;
        p.keys_on_m = g_keys_on_m;
        set_bench_kind(&p, kind, fp8_scale.p, k[0], v[0], ks[0], vs[0]);  // the size asks for valid params
        pvt::DecodeAttentionParams& a = p.attn;
        const size_t wsq = pvt::quant_attention_cuda_workspace_bytes(p);
        Dev<uint8_t> w(wsq);
        a.workspace = w.p, a.workspace_bytes = wsq;
        auto call = [&](int i, cudaStream_t st) {
          pvt::QuantAttentionParams c = p;
          c.attn.k = k[i], c.attn.v = v[i];
          if (kind == 1) c.k_scale = static_cast<float*>(ks[i]), c.v_scale = static_cast<float*>(vs[i]);
          pvt::Status e = pvt::quant_attention_cuda(c, st);
          if (!e.ok()) std::printf("FAIL sweep launch: %s\n", e.to_string().c_str());
        };
        float us = 0.f;
        if (profile) {
          call(0, s);
          CK(cudaStreamSynchronize(s));
        } else {
          us = graph_us(call, cp, iters, s);
        }
        char buf[64];
        std::snprintf(buf, sizeof buf, " %s:%.1f", n == 0 ? "auto" : std::to_string(n).c_str(), us);
        line += buf;
      }
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    for (int i = 0; i < cp; ++i) {
      for (void* x : {k[i], v[i], ks[i], vs[i]}) cudaFree(x);
    }
  }
  cudaStreamDestroy(s);
}

void bench() {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  int l2 = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  std::printf("BENCH l2_bytes=%d (graph replay, cold L2; GB/s of the K/V bytes read, scales included)\n", l2);
  {  // The copy rate, the ceiling the GB/s below are read against: 4 GB device to device, read + write.
    const size_t n = size_t(2) << 30;
    Dev<uint8_t> from(n), to(n);
    CK(cudaMemset(from.p, 1, n));
    const float us = graph_us([&](int, cudaStream_t st) { CK(cudaMemcpyAsync(to.p, from.p, n, cudaMemcpyDeviceToDevice, st)); },
                              1, 10, s);
    std::printf("BENCH copy %.0f GBps (bytes read + written)\n", 2.0 * n / us / 1e3);
  }
  std::printf("BENCH model B S us_fp16 us_fp8 us_int8 GBps_fp16 GBps_fp8 GBps_int8 fp8_vs_fp16 int8_vs_fp16\n");
  const int64_t Hq = g_model_hq, D = g_model_d;
  for (int64_t Hkv : bench_kv_heads()) {
    for (int64_t B : {1, 8, 32}) {
      if (g_batch > 0 && B != g_batch) continue;
      for (int64_t S : {4096, 16384, 32768, 65536}) {
        const size_t elems = static_cast<size_t>(S) * B * Hkv * D;
        const size_t f16_bytes = 2 * elems * 2;  // K and V
        if (f16_bytes > (size_t(48) << 30)) continue;
        const int copies = static_cast<int>(std::max<size_t>(1, (3 * size_t(l2) + f16_bytes / 2 - 1) / (f16_bytes / 2)));
        const int cp = std::min(copies, 8);
        std::vector<void*> k16(cp), v16(cp), k8(cp), v8(cp), ki(cp), vi(cp), ksc(cp), vsc(cp);
        for (int i = 0; i < cp; ++i) {
          CK(cudaMalloc(&k16[i], elems * 2)); CK(cudaMalloc(&v16[i], elems * 2));
          CK(cudaMalloc(&k8[i], elems)); CK(cudaMalloc(&v8[i], elems));
          CK(cudaMalloc(&ki[i], elems)); CK(cudaMalloc(&vi[i], elems));
          CK(cudaMalloc(&ksc[i], elems / D * 4)); CK(cudaMalloc(&vsc[i], elems / D * 4));
          half_fill_kernel<<<1024, 256>>>(static_cast<__half*>(k16[i]), elems, 1 + i);
          half_fill_kernel<<<1024, 256>>>(static_cast<__half*>(v16[i]), elems, 2 + i);
          fill(k8[i], elems, 3 + i, true), fill(v8[i], elems, 4 + i, true);
          fill(ki[i], elems, 5 + i), fill(vi[i], elems, 6 + i);
          CK(cudaMemset(ksc[i], 0, elems / D * 4));  // scales 0.0: values all zero, bytes still read
          CK(cudaMemset(vsc[i], 0, elems / D * 4));
        }
        Dev<__half> q(B * Hq * D), out(B * Hq * D);
        half_fill_kernel<<<64, 256>>>(q.p, q.n, 9);
        Dev<float> fp8_scale(Hkv), lse(B * Hq);
        fp8_scale.put(std::vector<float>(Hkv, 0.01f));
        pvt::DecodeAttentionParams a = bench_attn(B, Hkv, S, q.p, out.p);
        a.k = k16[0], a.v = v16[0];
        pvt::DecodeOptions fopts;  // our float16 kernel: the plan's, but for --prefetch
        fopts.prefetch_tiles = g_prefetch;
        if (g_prefetch != 0) a.options = &fopts;
        const size_t ws16 = pvt::decode_attention_cuda_workspace_bytes(a);
        Dev<uint8_t> w16(ws16);
        a.workspace = w16.p, a.workspace_bytes = ws16;
        const int iters = static_cast<int>(std::max<int64_t>(g_min_iters, std::min<int64_t>(100, int64_t(2e9 / f16_bytes))));
        const float t16 = graph_us([&](int i, cudaStream_t st) {
          pvt::DecodeAttentionParams c = a;
          c.k = k16[i], c.v = v16[i];
          pvt::Status e = pvt::decode_attention_cuda(c, st);
          if (!e.ok()) std::printf("FAIL fp16 launch: %s\n", e.to_string().c_str());
        }, cp, iters, s);
        float tq[2];
        for (int kind = 0; kind < 2; ++kind) {
          pvt::QuantAttentionParams p;
          p.attn = a;
          p.attn.workspace = nullptr, p.attn.workspace_bytes = 0;
          pvt::DecodeOptions qopts;
          qopts.mma_warps = g_warps;
          qopts.merge_chunk = g_merge_chunk;
          qopts.prefetch_tiles = g_prefetch;
          if (g_warps > 0 || g_merge_chunk > 0 || g_prefetch != 0) p.attn.options = &qopts;
          p.warp_keys = g_warp_keys;
          p.keys_on_m = g_keys_on_m;
          set_bench_kind(&p, kind, fp8_scale.p, kind == 0 ? k8[0] : ki[0], kind == 0 ? v8[0] : vi[0], ksc[0], vsc[0]);
          const size_t wsq = pvt::quant_attention_cuda_workspace_bytes(p);
          Dev<uint8_t> w(wsq);
          p.attn.workspace = w.p, p.attn.workspace_bytes = wsq;
          tq[kind] = graph_us([&](int i, cudaStream_t st) {
            pvt::QuantAttentionParams c = p;
            c.attn.k = kind == 0 ? k8[i] : ki[i];
            c.attn.v = kind == 0 ? v8[i] : vi[i];
            if (kind == 1) c.k_scale = static_cast<float*>(ksc[i]), c.v_scale = static_cast<float*>(vsc[i]);
            pvt::Status e = pvt::quant_attention_cuda(c, st);
            if (!e.ok()) std::printf("FAIL quant launch: %s\n", e.to_string().c_str());
          }, cp, iters, s);
        }
        const double b16 = double(f16_bytes), b8 = double(elems) * 2, bi = b8 + double(elems / D) * 8;
        std::printf("BENCH %s %lld %lld %.1f %.1f %.1f %.0f %.0f %.0f %.2f %.2f\n", bench_model_name(Hkv).c_str(),
                    (long long)B, (long long)S, t16, tq[0], tq[1], b16 / t16 / 1e3, b8 / tq[0] / 1e3, bi / tq[1] / 1e3,
                    t16 / tq[0], t16 / tq[1]);
        std::fflush(stdout);
        for (int i = 0; i < cp; ++i) {
          for (void* x : {k16[i], v16[i], k8[i], v8[i], ki[i], vi[i], ksc[i], vsc[i]}) cudaFree(x);
        }
      }
    }
  }
  cudaStreamDestroy(s);
}

// The tensor-core kernel's cases: every query-group size up to two chunks of 16 heads (20: a partial
// chunk), lengths around the 64-key tile and across splits, the three layouts, slots with a refused
// entry. `types`: the 16-bit q types to run them with.
// Each with every block shape: 4 warps of 16 keys (64-key tiles), 8 of 16 and 4 of 32 (128-key tiles).
void test_tensor_core_cases(KvQuant kind, std::initializer_list<ScalarType> types) {
  struct Shape { int warps, warp_keys; };
  for (ScalarType t : types) {
    for (int64_t D : {64, 128}) {
      for (const Shape sh : {Shape{4, 16}, Shape{8, 16}, Shape{4, 32}}) {
        const int w = sh.warps, k = sh.warp_keys;
        // Each with the query heads on M forced (mma_split_kernel; for groups over 8 the rule's kernel) and with
        // the keys on M forced (mma_keys_kernel, groups of at most 8: the rule's kernel there).
        for (int km : {-1, 1}) {
          for (int64_t G : {1, 2, 3, 4, 5, 7, 8, 16, 20, 32}) {
            if (km == -1 || G <= 8) test_attention({kind, t, 2, 2 * G, 2, D, 333, false, kSeqMajor, 0, w, k, km});
          }
          for (int64_t S : {1, 63, 64, 65, 127, 128, 129, 4097}) test_attention({kind, t, 3, 8, 2, D, S, false, kSeqMajor, 0, w, k, km});
          for (Layout lay : {kBatchMajor, kHeadMajor}) test_attention({kind, t, 2, 8, 2, D, 1000, false, lay, 0, w, k, km});
          test_attention({kind, t, 5, 32, 8, D, 3000, true, kHeadMajor, 0, w, k, km});
          // Forced split counts: one chunk of the merge (5), two (20), three (40 asked: 33 of 128 keys),
          // a partial last chunk each time; with lengths that end some splits early.
          for (int64_t n : {5, 20, 40}) test_attention({kind, t, 3, 8, 2, D, 4097, true, kSeqMajor, n, w, k, km});
          // One split: the block writes its rows, no merge kernel (a refused entry among them); and 2 splits.
          for (int64_t n : {1, 2}) test_attention({kind, t, 3, 8, 2, D, 4097, true, kSeqMajor, n, w, k, km});
          test_attention({kind, t, 5, 32, 8, D, 3000, true, kHeadMajor, 1, w, k, km});
          test_attention({kind, t, 4, 28, 4, D, 2000, true, kSeqMajor, 0, w, k, km});  // Qwen2's group of 7
        }
      }
    }
    // One split of 20000 keys (313 tiles of 64; 157 of 128 with 32 keys a warp): int8's bias (+1152 a
    // code under float16 q) is folded out of O every 64 warp steps of 16 keys; this is where the MMA's
    // truncated float32 sums would show if it were not.
    for (int km : {-1, 1}) {
      test_attention({kind, t, 1, 8, 2, 128, 20000, false, kSeqMajor, 1, 4, 16, km});
      test_attention({kind, t, 1, 8, 2, 128, 20000, false, kSeqMajor, 1, 4, 32, km});
    }
    // Scores that keep growing along the keys: a row's maximum moves past later tiles of one long split, so O and
    // l are rescaled mid-split (the keys kernel skips that where no score passes the maximum by 2^8).
    for (int km : {-1, 1}) {
      for (int64_t D : {64, 128}) {
        for (int kpw : {16, 32}) {
          for (int64_t n : {1, 0}) test_attention({kind, t, 2, 8, 2, D, 3000, false, kSeqMajor, n, 4, kpw, km, true});
        }
      }
    }
  }
}

// A forced block shape the kernel does not have is refused before anything runs: warp_keys other than
// 0, 16 or 32, or 32 keys with blocks of 8 warps (kInvalidArgument, the output untouched).
void test_bad_warp_keys() {
  const int64_t B = 1, Hq = 8, Hkv = 2, D = 128, S = 256;
  Dev<__half> q(B * Hq * D), out(B * Hq * D);
  Dev<uint8_t> k(S * B * Hkv * D), v(k.n), ws(1 << 20);
  Dev<float> sc(Hkv);
  CK(cudaMemset(out.p, 0x7b, out.n * 2));
  pvt::QuantAttentionParams p;
  p.attn = bench_attn(B, Hkv, S, q.p, out.p);
  p.attn.q_heads = Hq;
  const int64_t qs[4] = {Hq * D, Hq * D, D, 1};
  std::copy(qs, qs + 4, p.attn.q_stride), std::copy(qs, qs + 4, p.attn.out_stride);
  set_bench_kind(&p, 0, sc.p, k.p, v.p, nullptr, nullptr);
  p.attn.workspace = ws.p, p.attn.workspace_bytes = ws.n;
  pvt::DecodeOptions opts;
  p.attn.options = &opts;
  struct Bad { int warps, warp_keys; const char* name; };
  for (const Bad bad : {Bad{0, 24, "24"}, Bad{0, -32, "negative"}, Bad{8, 32, "32_with_8_warps"}}) {
    opts.mma_warps = bad.warps;
    p.warp_keys = bad.warp_keys;
    r.code(pvt::quant_attention_cuda(p, nullptr), pvt::Code::kInvalidArgument, std::string("warp_keys.") + bad.name);
  }
  // keys on M forced where the group is over 8 (here 16), or a value other than -1, 0, 1: refused by name.
  opts.mma_warps = 0, p.warp_keys = 0;
  Dev<__half> wide_q(B * 16 * Hkv * D), wide_out(wide_q.n);
  pvt::QuantAttentionParams wide = p;
  wide.attn.q = wide_q.p, wide.attn.out = wide_out.p;
  wide.attn.q_heads = 16 * Hkv;
  const int64_t wq[4] = {16 * Hkv * D, 16 * Hkv * D, D, 1};
  std::copy(wq, wq + 4, wide.attn.q_stride), std::copy(wq, wq + 4, wide.attn.out_stride);
  r.ok(pvt::quant_attention_cuda(wide, nullptr), "keys_on_m.group_16_plan");  // the same call, not forced: runs
  CK(cudaDeviceSynchronize());
  struct BadKeys { pvt::QuantAttentionParams* params; int km; const char* name; };
  for (const BadKeys bad : {BadKeys{&p, 2, "2"}, BadKeys{&p, -2, "minus_2"}, BadKeys{&wide, 1, "group_16"}}) {
    bad.params->keys_on_m = bad.km;
    const pvt::Status st = pvt::quant_attention_cuda(*bad.params, nullptr);
    r.code(st, pvt::Code::kInvalidArgument, std::string("keys_on_m.") + bad.name);
    r.check(st.to_string().find("keys_on_m") != std::string::npos, std::string("keys_on_m.") + bad.name + ".named",
            st.to_string());
    bad.params->keys_on_m = 0;
  }
  CK(cudaDeviceSynchronize());
  bool untouched = true;
  for (const __half x : out.get()) untouched = untouched && *reinterpret_cast<const uint16_t*>(&x) == 0x7b7b;
  r.check(untouched, "warp_keys.refused_output_untouched", "a refused call wrote the output");
  opts.mma_warps = 0, p.warp_keys = 32;  // the plan's warps, 32 keys a warp: runs
  r.ok(pvt::quant_attention_cuda(p, nullptr), "warp_keys.32_plan_warps");
  CK(cudaDeviceSynchronize());
}

}  // namespace

// --no-bench: the checks only; --bench-only: the timings only; --tc-only: the tensor-core cases with
// float16 q only (what compute-sanitizer runs: the kernel's memory accesses, at a memcheck's pace); --bad-only:
// the refused forced block shapes, warp keys and head clusters only;
// --sweep: the split-count sweep only (with --auto: the planner's count only); --profile: sweep's plain calls for a profiler;
// --warps 4|8: the 8-bit tensor-core kernel's blocks forced to that many warps in the sweep and the bench;
// --warp-keys 16|32: ... to warps of that many keys of every tile; --batch N: the sweep's and the bench's rows
// of batch N only; --merge-chunk 16|32: the merge's splits a round trip forced in both; --keys-on-m 1|-1: mma_keys_kernel
// forced on / off in both; --model HQ,HKV,D: the bench's and the sweep's rows of that model only; --min-iters N:
// at least N calls captured a graph (default 8) in both; --prefetch N: DecodeOptions::prefetch_tiles (-1 none, N forced)
// in both and for the bench's float16 kernel; --scale-tokens-inner: int8's scales in another order in both
// (set_bench_kind).
int main(int argc, char** argv) {
  bool no_bench = false, bench_only = false, tc_only = false, sweep_only = false, profile = false, bad_only = false;
  bool& sweep_auto = g_sweep_auto;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    no_bench = no_bench || arg == "--no-bench";
    bench_only = bench_only || arg == "--bench-only";
    tc_only = tc_only || arg == "--tc-only";
    bad_only = bad_only || arg == "--bad-only";
    sweep_only = sweep_only || arg == "--sweep";
    profile = profile || arg == "--profile";
    sweep_auto = sweep_auto || arg == "--auto";
    if (arg == "--warps" && i + 1 < argc) g_warps = std::atoi(argv[++i]);
    if (arg == "--warp-keys" && i + 1 < argc) g_warp_keys = std::atoi(argv[++i]);
    if (arg == "--batch" && i + 1 < argc) g_batch = std::atoll(argv[++i]);
    g_scale_tokens_inner = g_scale_tokens_inner || arg == "--scale-tokens-inner";
    if (arg == "--min-iters" && i + 1 < argc) g_min_iters = std::max<int64_t>(1, std::atoll(argv[++i]));
    if (arg == "--merge-chunk" && i + 1 < argc) g_merge_chunk = std::atoi(argv[++i]);
    if (arg == "--keys-on-m" && i + 1 < argc) g_keys_on_m = std::atoi(argv[++i]);
    if (arg == "--prefetch" && i + 1 < argc) g_prefetch = std::atoi(argv[++i]);
    if (arg == "--model" && i + 1 < argc) {
      long long hq = 0, hkv = 0, d = 0;
      if (std::sscanf(argv[++i], "%lld,%lld,%lld", &hq, &hkv, &d) != 3 || hkv <= 0 || hq % hkv != 0 || (d != 64 && d != 128)) {
        std::fprintf(stderr, "--model HQ,HKV,D: HQ a multiple of HKV, D 64 or 128\n");
        return 2;
      }
      g_model_hq = hq, g_model_hkv = hkv, g_model_d = d;
    }
  }
  if (sweep_only || profile) {
    sweep(profile);
    return r.finish();
  }
  if (bad_only) {
    test_bad_warp_keys();
    return r.finish();
  }
  if (tc_only) {
    for (KvQuant kind : {KvQuant::kFp8E4M3, KvQuant::kInt8}) test_tensor_core_cases(kind, {ScalarType::kFloat16});
  } else if (!bench_only) {
    for (KvQuant kind : {KvQuant::kFp8E4M3, KvQuant::kInt8}) {
      for (ScalarType t : {ScalarType::kFloat32, ScalarType::kFloat16, ScalarType::kBFloat16}) test_append(kind, t);
    }
    for (KvQuant kind : {KvQuant::kFp8E4M3, KvQuant::kInt8}) {
      for (ScalarType t : {ScalarType::kFloat32, ScalarType::kFloat16, ScalarType::kBFloat16}) {
        test_attention({kind, t, 2, 8, 2, 128, 300, false});
      }
      for (int64_t D : {64, 256}) test_attention({kind, ScalarType::kFloat16, 3, 4, 4, D, 1000, false});
      test_attention({kind, ScalarType::kFloat32, 1, 8, 1, 128, 5000, false});   // group 8: two passes of 4
      test_attention({kind, ScalarType::kFloat32, 2, 6, 2, 64, 77, false});      // group 3
      test_attention({kind, ScalarType::kFloat32, 1, 2, 1, 128, 1, false});      // one key
      test_attention({kind, ScalarType::kFloat16, 4, 8, 2, 128, 2000, true});    // slots, lengths, a refused entry
      test_tensor_core_cases(kind, {ScalarType::kFloat16, ScalarType::kBFloat16});
    }
    test_bad_warp_keys();
  }
  if (!no_bench && !tc_only) bench();
  return r.finish();
}

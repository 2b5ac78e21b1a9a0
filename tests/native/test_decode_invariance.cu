// Batch-invariant decode attention (DecodeOptions::split_keys) on the GPU: a query row's output and lse
// are the same BITS whatever else the call holds. Call A: three entries of a seq-major cache [S, B, Hkv, D]
// with their own lengths (cache_seqlens) and Tq causal queries each. Call B, for every row (j, t) of A:
// another batch (two entries, a per-slot cache [B, S, Hkv, D]), another kv_len bound, the same keys for
// entry 0 and the same q vectors at another query index t' (so its past is A's + t - t'), and a second
// entry of random keys and length. Row (0, t') of B must equal row (j, t) of A in every byte of out and
// lse, for every query head. A is also checked against the host kernel (decode_attention_cpu) within
// the dtype's tolerance, so the invariant path is attention, not merely repeatable.
// Shapes: each kernel family the planner can pick (tensor cores with 1, 2 and 4 M-tiles, 4 and 8 warps,
// head_dim 64/128/256; the one-row kernel; the row-per-warp kernel for fp32), fp16/bf16/fp32.
// Usage: test_decode_invariance [--break]. --break runs the same checks with the default options
// (split_keys 0): its bitwise checks must FAIL, which shows that they can.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_mem.h"
#include "harness.h"
#include "kernels/decode_attention.h"

using namespace pvt;
using pvt_test::Report;

namespace {

int64_t elem_bytes(ScalarType t) { return t == ScalarType::kFloat32 ? 4 : 2; }

void put(std::vector<uint8_t>& buf, int64_t i, ScalarType t, float x) {
  if (t == ScalarType::kFloat32) {
    std::memcpy(buf.data() + i * 4, &x, 4);
  } else if (t == ScalarType::kFloat16) {
    const __half h = __float2half(x);
    std::memcpy(buf.data() + i * 2, &h, 2);
  } else {
    const __nv_bfloat16 h = __float2bfloat16(x);
    std::memcpy(buf.data() + i * 2, &h, 2);
  }
}

float get(const std::vector<uint8_t>& buf, int64_t i, ScalarType t) {
  if (t == ScalarType::kFloat32) {
    float x;
    std::memcpy(&x, buf.data() + i * 4, 4);
    return x;
  }
  if (t == ScalarType::kFloat16) {
    __half h;
    std::memcpy(&h, buf.data() + i * 2, 2);
    return __half2float(h);
  }
  __nv_bfloat16 h;
  std::memcpy(&h, buf.data() + i * 2, 2);
  return __bfloat162float(h);
}


bool to_dev(DevBuf& d, const void* h, size_t n) { return d.ptr && cudaMemcpy(d.ptr, h, n, cudaMemcpyHostToDevice) == cudaSuccess; }
bool to_host(void* h, const DevBuf& d, size_t n) { return cudaMemcpy(h, d.ptr, n, cudaMemcpyDeviceToHost) == cudaSuccess; }

struct Shape {
  const char* name;
  ScalarType dtype;
  int64_t Hq, Hkv, D, Tq, split_keys;
};

// One call's host-side buffers and its run on the device (and, for A, on the host).
struct Call {
  int64_t B = 0, S = 0, Tq = 0, Hq = 0, Hkv = 0, D = 0, kv_len = 0;
  ScalarType dtype = ScalarType::kFloat16;
  bool per_slot = false;  // K/V [B, S, Hkv, D], else [S, B, Hkv, D]
  std::vector<uint8_t> q, k, v, out;
  std::vector<int32_t> past;
  std::vector<float> lse;

  void alloc() {
    const int64_t eb = elem_bytes(dtype);
    q.assign(B * Tq * Hq * D * eb, 0);
    k.assign(B * S * Hkv * D * eb, 0);
    v.assign(k.size(), 0);
    out.assign(q.size(), 0);
    lse.assign(B * Tq * Hq, 0.f);
    past.assign(B, 0);
  }
  int64_t kv_at(int64_t s, int64_t b, int64_t h) const {  // element index of (s, b, h, 0)
    return per_slot ? ((b * S + s) * Hkv + h) * D : ((s * B + b) * Hkv + h) * D;
  }
  int64_t q_at(int64_t b, int64_t t, int64_t h) const { return ((b * Tq + t) * Hq + h) * D; }

  DecodeAttentionParams params(const void* qp, const void* kp, const void* vp, void* op, const int32_t* lens,
                               float* lsep) const {
    DecodeAttentionParams p;
    p.batch = B; p.q_len = Tq; p.q_heads = Hq; p.kv_heads = Hkv; p.head_dim = D; p.kv_len = kv_len;
    p.dtype = dtype;
    p.scale = 1.f / std::sqrt(static_cast<float>(D));
    p.q = qp; p.k = kp; p.v = vp; p.out = op; p.lse = lsep;
    p.cache_seqlens = lens;
    const int64_t qs[4] = {Tq * Hq * D, Hq * D, D, 1};
    const int64_t seq[4] = {B * Hkv * D, Hkv * D, D, 1};
    const int64_t slot[4] = {Hkv * D, S * Hkv * D, D, 1};
    for (int i = 0; i < 4; ++i) {
      p.q_stride[i] = p.out_stride[i] = qs[i];
      p.k_stride[i] = p.v_stride[i] = per_slot ? slot[i] : seq[i];
    }
    return p;
  }

  Status run_cuda(const DecodeOptions& o) {
    DevBuf dq(q.size()), dk(k.size()), dv(v.size()), dout(out.size()), dlens(past.size() * 4), dlse(lse.size() * 4);
    if (!to_dev(dq, q.data(), q.size()) || !to_dev(dk, k.data(), k.size()) || !to_dev(dv, v.data(), v.size()) ||
        !to_dev(dlens, past.data(), past.size() * 4) || !dout.ptr || !dlse.ptr) {
      return Status(Code::kDriver, "test: device buffers");
    }
    DecodeAttentionParams p = params(dq.ptr, dk.ptr, dv.ptr, dout.ptr, static_cast<const int32_t*>(dlens.ptr),
                                     static_cast<float*>(dlse.ptr));
    p.options = &o;
    DevBuf ws(decode_attention_cuda_workspace_bytes(p));
    p.workspace = ws.ptr;
    p.workspace_bytes = decode_attention_cuda_workspace_bytes(p);
    PVT_RETURN_IF_ERROR(decode_attention_cuda(p, nullptr));
    if (cudaDeviceSynchronize() != cudaSuccess || !to_host(out.data(), dout, out.size()) ||
        !to_host(lse.data(), dlse, lse.size() * 4)) {
      return Status(Code::kDriver, "test: CUDA error after the call");
    }
    return Status::Ok();
  }

  Status run_host(std::vector<uint8_t>* host_out, std::vector<float>* host_lse) const {
    host_out->assign(out.size(), 0);
    host_lse->assign(lse.size(), 0.f);
    const DecodeAttentionParams p = params(q.data(), k.data(), v.data(), host_out->data(), past.data(), host_lse->data());
    return decode_attention_cpu(p);
  }
};

void fill(std::vector<uint8_t>& buf, ScalarType t, std::mt19937& rng, float amp) {
  std::normal_distribution<float> nd(0.f, amp);
  for (int64_t i = 0; i < static_cast<int64_t>(buf.size() / elem_bytes(t)); ++i) put(buf, i, t, nd(rng));
}

void test_shape(Report& r, const Shape& sh, bool broken, std::mt19937& rng) {
  const int64_t eb = elem_bytes(sh.dtype);
  DecodeOptions o;
  o.split_keys = broken ? 0 : sh.split_keys;
  const std::string n0 = std::string(broken ? "break." : "") + sh.name;
  // A: three entries, lengths near the bound, in the middle and short.
  Call a;
  a.B = 3; a.S = 4608; a.Tq = sh.Tq; a.Hq = sh.Hq; a.Hkv = sh.Hkv; a.D = sh.D; a.dtype = sh.dtype;
  a.kv_len = a.S;
  a.alloc();
  fill(a.q, sh.dtype, rng, 1.f);
  fill(a.k, sh.dtype, rng, 1.f);
  fill(a.v, sh.dtype, rng, 1.f);
  // Entry 0 near the bound, with room for B's copy of its last row at t' = 0 (past + Tq - 1 more keys).
  a.past = {static_cast<int32_t>(a.S - 2 * sh.Tq - 3), 1500, 37};
  if (!r.ok(a.run_cuda(o), n0 + ".a.cuda")) return;
  // A against the host kernel.
  std::vector<uint8_t> host_out;
  std::vector<float> host_lse;
  if (!r.ok(a.run_host(&host_out, &host_lse), n0 + ".a.host")) return;
  const float tol = sh.dtype == ScalarType::kFloat32 ? 2e-5f : sh.dtype == ScalarType::kFloat16 ? 2e-3f : 1.6e-2f;
  float worst = 0.f, worst_lse = 0.f;
  for (size_t i = 0; i < a.out.size() / eb; ++i) {
    const float want = get(host_out, i, sh.dtype);
    worst = std::fmax(worst, std::fabs(get(a.out, i, sh.dtype) - want) / (1.f + std::fabs(want)));
  }
  for (size_t i = 0; i < a.lse.size(); ++i) worst_lse = std::fmax(worst_lse, std::fabs(a.lse[i] - host_lse[i]));
  r.check(worst <= tol, n0 + ".a_vs_host", "max rel err " + std::to_string(worst));
  r.check(worst_lse <= 1e-3f, n0 + ".a_lse_vs_host", "max err " + std::to_string(worst_lse));

  // B for each row (j, t) of A: the same keys and q at index t', another batch, layout and bound.
  int64_t rows_differing = 0, rows = 0;
  for (int64_t j = 0; j < a.B; ++j) {
    for (int64_t t = 0; t < sh.Tq; ++t) {
      const int64_t t2 = (t + 1) % sh.Tq;
      const int64_t past2 = a.past[j] + t - t2;
      Call b;
      b.B = 2; b.S = a.S; b.Tq = sh.Tq; b.Hq = sh.Hq; b.Hkv = sh.Hkv; b.D = sh.D; b.dtype = sh.dtype;
      b.per_slot = true;
      b.kv_len = std::min<int64_t>(b.S, past2 + sh.Tq + 77);
      b.alloc();
      fill(b.q, sh.dtype, rng, 1.f);
      fill(b.k, sh.dtype, rng, 1.f);
      fill(b.v, sh.dtype, rng, 1.f);
      b.past = {static_cast<int32_t>(past2), static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, b.kv_len - sh.Tq)(rng))};
      for (int64_t s = 0; s < a.past[j] + sh.Tq; ++s) {
        for (int64_t h = 0; h < sh.Hkv; ++h) {
          std::memcpy(b.k.data() + b.kv_at(s, 0, h) * eb, a.k.data() + a.kv_at(s, j, h) * eb, sh.D * eb);
          std::memcpy(b.v.data() + b.kv_at(s, 0, h) * eb, a.v.data() + a.kv_at(s, j, h) * eb, sh.D * eb);
        }
      }
      for (int64_t h = 0; h < sh.Hq; ++h) {
        std::memcpy(b.q.data() + b.q_at(0, t2, h) * eb, a.q.data() + a.q_at(j, t, h) * eb, sh.D * eb);
      }
      const std::string n = n0 + ".row_" + std::to_string(j) + "_" + std::to_string(t);
      if (!r.ok(b.run_cuda(o), n + ".b.cuda")) continue;
      bool same = true;
      for (int64_t h = 0; h < sh.Hq; ++h) {
        same = same && std::memcmp(b.out.data() + b.q_at(0, t2, h) * eb, a.out.data() + a.q_at(j, t, h) * eb, sh.D * eb) == 0;
        same = same && std::memcmp(&b.lse[b.q_at(0, t2, h) / sh.D], &a.lse[a.q_at(j, t, h) / sh.D], 4) == 0;
      }
      rows_differing += !same;
      ++rows;
      r.check(same, n + ".bitwise", "out or lse differs from A's row");
    }
  }
  std::printf("info %s: %ld of %ld rows differ bit for bit (split_keys %ld)\n", n0.c_str(), static_cast<long>(rows_differing),
              static_cast<long>(rows), static_cast<long>(o.split_keys));
}

}  // namespace

int main(int argc, char** argv) {
  const bool broken = argc > 1 && std::string(argv[1]) == "--break";
  Report r;
  std::mt19937 rng(20261202);
  const Shape shapes[] = {
      {"gqa32_8_d128_tq5_fp16", ScalarType::kFloat16, 32, 8, 128, 5, 256},   // 2 M-tiles, 8 warps
      {"qwen28_4_d128_tq5_fp16", ScalarType::kFloat16, 28, 4, 128, 5, 384},  // 35 rows: 4 M-tiles
      {"mha8_d128_tq5_bf16", ScalarType::kBFloat16, 8, 8, 128, 5, 512},      // 1 M-tile, 4 warps
      {"mha8_d128_tq1_fp16", ScalarType::kFloat16, 8, 8, 128, 1, 256},       // the one-row kernel
      {"mqa16_1_d64_tq3_fp16", ScalarType::kFloat16, 16, 1, 64, 3, 128},     // 48 rows: 4 M-tiles
      {"gemma8_1_d256_tq2_bf16", ScalarType::kBFloat16, 8, 1, 256, 2, 256},  // head_dim 256
      {"fp32_gqa8_2_d128_tq4", ScalarType::kFloat32, 8, 2, 128, 4, 256},     // the row-per-warp kernel
  };
  for (const Shape& s : shapes) test_shape(r, s, broken, rng);
  return r.finish();
}

// Native GPU test of decode_attention_cuda against decode_attention_cpu (the reference), then its
// bandwidth on a decode-shaped workload.
//   Correctness: batch {1, 8} x heads {MHA 4/4, GQA 8/2, MQA 8/1} x S {1, 100, 4096} x
//   {fp16, bf16, fp32}, head_dim 128; plus Tq > 1 (causal and masked), bool/float masks, other
//   head dims (the 16-byte path with idle lanes, two chunks per lane, the scalar fallback), strided
//   K/V, a K/V read straight from a SeqMajorCache (VM-mapped memory), the error statuses, and the
//   split count's multiply-and-shift division (SplitCount), balanced splits over skewed per-slot lengths
//   (test_balanced; --balanced-only runs them and the per-slot cases balanced). Each case runs in several
//   passes (the plan, forced split counts and block sizes, and with its inputs written late by the kernel
//   ahead: the programmatic launch's wait). The tensor-core kernel's families: 17-128 rows per kv head (row groups
//   of 1 or 2 M-tiles as planned; 2, 4, 8 M-tiles a block forced) and head_dim 64, 80, 96, 128, 256,
//   seq-major and per slot, each plan checked to be that kernel.
//   Bandwidth: context {1k, 4k, 16k, 64k} x batch {1, 8}, 32 heads x 128 head_dim fp16, K/V in
//   SeqMajorCaches; bytes of K+V read / kernel time, next to a device-to-device copy's bandwidth.
// Usage: test_decode_attention [--no-bench | --bench-only | --families-only | --balanced-only]. Prints PASS/FAIL
// lines, "info bench ..." lines, and "N passed, M failed"; exits non-zero on any failure.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/apis.h"
#include "gpu_mem.h"
#include "harness.h"
#include "kernels/append_tokens.h"
#include "kernels/decode_attention.h"
#include "kernels/decode_attention_plan.h"
#include "kernels/decode_attention_common_cuda.cuh"
#include "kernels/programmatic_launch_cuda.cuh"

using namespace pvt;
using pvt_test::Report;

namespace {

const Device kGpu = Device::cuda(0);

// Prefix of the case names: which way the kernels finish their splits in this pass (see main), and the
// options (splits, warps, cluster) that pass forces on every call.
std::string g_mode;
DecodeOptions g_options;
// Calls whose plan merged through merge_splits_wide_kernel / merge_splits_kernel or merge_splits_warp_kernel
// (count_plan; g_warp_merges: those of the row merges that took the warp kernel): a pass meant for one of them
// must have run it.
int64_t g_wide_merges = 0, g_row_merges = 0, g_warp_merges = 0;
// Calls planned on a key-slice instance of 32 keys a warp (Plan::mma_warp_keys), by its head dim and M-tiles
// (index: 0 = head_dim 64 one M-tile, 1-4 = head_dim 64, 80, 96, 128 two M-tiles): the warp_keys32 pass must run
// every one of them.
int64_t g_warp_keys32[5] = {0, 0, 0, 0, 0};
// Whether test_mma_families checks each case's planned M-tiles and row groups: not under the merge passes' 100
// forced splits, with which the planner takes other (valid) row tiles.
bool g_check_plans = true;

// Counts the merge kernel the plan of call p launches (none with one split or a cluster), and its instance of 32
// keys a warp.
void count_plan(const DecodeAttentionParams& p) {
  decode_plan::Plan plan;
  if (!decode_attention_cuda_plan(p, &plan).ok()) return;
  if (plan.mma_kernel && !plan.mma_rows && plan.mma_warp_keys == 32) {
    const int d = static_cast<int>(p.head_dim);
    ++g_warp_keys32[plan.mma_tiles == 1 ? 0 : d == 64 ? 1 : d == 80 ? 2 : d == 96 ? 3 : 4];
  }
  if (plan.splits <= 1 || plan.cluster) return;
  ++(plan.merge_wide ? g_wide_merges : g_row_merges);
  g_warp_merges += decode_plan::merge_warp_of(p, plan) ? 1 : 0;
}

int64_t elem_bytes(ScalarType t) { return t == ScalarType::kFloat32 ? 4 : t == ScalarType::kBool ? 1 : 2; }

// Host-side conversions from the CUDA headers: independent of the kernels' own.
void put(std::vector<uint8_t>& buf, int64_t i, ScalarType t, float x) {
  switch (t) {
    case ScalarType::kFloat32: std::memcpy(buf.data() + i * 4, &x, 4); break;
    case ScalarType::kFloat16: { __half h = __float2half(x); std::memcpy(buf.data() + i * 2, &h, 2); break; }
    case ScalarType::kBFloat16: { __nv_bfloat16 h = __float2bfloat16(x); std::memcpy(buf.data() + i * 2, &h, 2); break; }
    case ScalarType::kBool: buf[i] = x != 0.f; break;
  }
}

float get(const std::vector<uint8_t>& buf, int64_t i, ScalarType t) {
  switch (t) {
    case ScalarType::kFloat32: { float x; std::memcpy(&x, buf.data() + i * 4, 4); return x; }
    case ScalarType::kFloat16: { __half h; std::memcpy(&h, buf.data() + i * 2, 2); return __half2float(h); }
    case ScalarType::kBFloat16: { __nv_bfloat16 h; std::memcpy(&h, buf.data() + i * 2, 2); return __bfloat162float(h); }
    case ScalarType::kBool: return buf[i] ? 1.f : 0.f;
  }
  return 0.f;
}

float tolerance(ScalarType t) {
  return t == ScalarType::kFloat32 ? 2e-5f : t == ScalarType::kFloat16 ? 2e-3f : 1.6e-2f;
}


// Inputs written late: with g_late_inputs, Inputs::upload stages each input in device memory, zeroes the
// attention's own buffers, and queues late_copy_kernel on the stream, which lets the next kernel be placed
// at once (allow_next_grid) and writes the inputs only after kLateDelayNs. The attention, queued right
// behind it with a programmatic launch, must wait for it (wait_for_previous_grid in each of its kernels);
// one that read q, K/V, a mask or a length before would see zeros and fail the comparison.
bool g_late_inputs = false;
// Elements run_case's output starts past a 16-byte boundary: 1 makes every row misaligned, so finish_block writes
// element by element (out_in_pieces false), not in 16-byte pieces.
int64_t g_out_offset = 0;
constexpr long long kLateDelayNs = 200000;
constexpr int kMaxLateCopies = 8;

struct LateCopies {
  const unsigned char* src[kMaxLateCopies];
  unsigned char* dst[kMaxLateCopies];
  size_t bytes[kMaxLateCopies];
  int n;
};

__global__ void late_copy_kernel(LateCopies c, long long delay_ns) {
  cuda_launch::allow_next_grid();
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < delay_ns);
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (int j = 0; j < c.n; ++j)
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < c.bytes[j]; i += step) c.dst[j][i] = c.src[j][i];
}

class Inputs {
 public:
  void add(void* dev, const void* host, size_t bytes) { items_.push_back({dev, host, bytes}); }
  // cudaMemcpy each input, or (g_late_inputs) the late copy above on `stream`. False on a CUDA error.
  bool upload(cudaStream_t stream) {
    if (!g_late_inputs) {
      for (const Item& it : items_)
        if (it.bytes && cudaMemcpy(it.dev, it.host, it.bytes, cudaMemcpyHostToDevice) != cudaSuccess) return false;
      return true;
    }
    if (items_.size() > kMaxLateCopies) return false;
    LateCopies c{};
    for (const Item& it : items_) {
      staging_.push_back(std::make_unique<DevBuf>(it.bytes));
      if (!staging_.back()->ptr || cudaMemcpy(staging_.back()->ptr, it.host, it.bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
          cudaMemset(it.dev, 0, it.bytes) != cudaSuccess) {
        return false;
      }
      c.src[c.n] = static_cast<const unsigned char*>(staging_.back()->ptr);
      c.dst[c.n] = static_cast<unsigned char*>(it.dev);
      c.bytes[c.n++] = it.bytes;
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return false;  // the zeros land before the late copy
    late_copy_kernel<<<64, 256, 0, stream>>>(c, kLateDelayNs);
    return cudaGetLastError() == cudaSuccess;
  }

 private:
  struct Item { void* dev; const void* host; size_t bytes; };
  std::vector<Item> items_;
  std::vector<std::unique_ptr<DevBuf>> staging_;
};

struct Case {
  std::string name;
  int64_t B, Tq, Hq, Hkv, D, S;
  ScalarType dtype;
  ScalarType mask_type = ScalarType::kBool;
  bool mask = false;        // [B, 1, Tq, S], random holes (never a whole row)
  int64_t kv_pad = 0;       // extra elements after each head row of K/V (strided storage)
  bool misalign = false;    // K/V start one element into the buffer: forces the scalar path
};

// Runs one case on both implementations; compares element by element.
void run_case(Report& r, const Case& c, std::mt19937& rng, cudaStream_t stream) {
  const int64_t eb = elem_bytes(c.dtype);
  const int64_t Dp = c.D + c.kv_pad;  // K/V physical row
  const int64_t off = c.misalign ? 1 : 0;
  const int64_t q_n = c.B * c.Tq * c.Hq * c.D, kv_n = c.S * c.B * c.Hkv * Dp + off;
  const int64_t out_n = q_n, mask_n = c.B * c.Tq * c.S;
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  std::vector<uint8_t> q(q_n * eb), k(kv_n * eb), v(kv_n * eb), mask(mask_n * elem_bytes(c.mask_type));
  for (int64_t i = 0; i < q_n; ++i) put(q, i, c.dtype, 2.f * U(rng));  // sharper softmax than U(-1,1)
  for (int64_t i = 0; i < kv_n; ++i) { put(k, i, c.dtype, U(rng)); put(v, i, c.dtype, U(rng)); }
  if (c.mask) {
    std::bernoulli_distribution hole(0.3);
    for (int64_t i = 0; i < mask_n; ++i) {
      const bool keep = (i % c.S) == c.S - 1 || !hole(rng);  // the newest key always visible
      put(mask, i, c.mask_type, c.mask_type == ScalarType::kBool ? (keep ? 1.f : 0.f) : (keep ? 0.f : -3.0e38f));
    }
  }

  DecodeAttentionParams p;
  p.batch = c.B; p.q_len = c.Tq; p.q_heads = c.Hq; p.kv_heads = c.Hkv; p.head_dim = c.D; p.kv_len = c.S;
  p.options = &g_options;
  p.dtype = c.dtype;
  p.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  const int64_t qs[4] = {c.Tq * c.Hq * c.D, c.Hq * c.D, c.D, 1};
  const int64_t ks[4] = {c.B * c.Hkv * Dp, c.Hkv * Dp, Dp, 1};
  std::copy(qs, qs + 4, p.q_stride);
  std::copy(ks, ks + 4, p.k_stride);
  std::copy(ks, ks + 4, p.v_stride);
  std::copy(qs, qs + 4, p.out_stride);
  const int64_t ms[4] = {c.Tq * c.S, 0, c.S, 1};
  if (c.mask) {
    p.mask_type = c.mask_type;
    std::copy(ms, ms + 4, p.mask_stride);
  }

  // Reference on the host.
  std::vector<uint8_t> ref(out_n * eb);
  DecodeAttentionParams hp = p;
  hp.q = q.data(); hp.k = k.data() + off * eb; hp.v = v.data() + off * eb; hp.out = ref.data();
  hp.mask = c.mask ? mask.data() : nullptr;
  if (!r.ok(decode_attention_cpu(hp), c.name + ".reference")) return;

  const int64_t out_off = g_out_offset * eb;
  DevBuf dq(q.size()), dk(k.size()), dv(v.size()), dout(ref.size() + out_off), dmask(mask.size());
  if (!r.check(dq.ptr && dk.ptr && dv.ptr && dout.ptr && dmask.ptr, c.name + ".alloc")) return;
  cudaMemset(dout.ptr, 0xff, ref.size() + out_off);  // NaN fill: an unwritten output cannot pass
  Inputs in;
  in.add(dq.ptr, q.data(), q.size());
  in.add(dk.ptr, k.data(), k.size());
  in.add(dv.ptr, v.data(), v.size());
  in.add(dmask.ptr, mask.data(), mask.size());
  if (!r.check(in.upload(stream), c.name + ".upload")) return;
  DecodeAttentionParams dp = p;
  dp.q = dq.ptr; dp.k = static_cast<char*>(dk.ptr) + off * eb; dp.v = static_cast<char*>(dv.ptr) + off * eb;
  dp.out = static_cast<char*>(dout.ptr) + out_off;
  dp.mask = c.mask ? dmask.ptr : nullptr;
  const size_t ws_bytes = decode_attention_cuda_workspace_bytes(dp);
  DevBuf ws(ws_bytes);
  dp.workspace = ws_bytes ? ws.ptr : nullptr;
  dp.workspace_bytes = ws_bytes;
  count_plan(dp);
  if (!r.ok(decode_attention_cuda(dp, stream), c.name + ".launch")) return;
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (!r.check(e == cudaSuccess, c.name + ".sync", cudaGetErrorString(e))) return;
  std::vector<uint8_t> got(ref.size());
  cudaMemcpy(got.data(), static_cast<char*>(dout.ptr) + out_off, got.size(), cudaMemcpyDeviceToHost);

  float worst = 0.f, ref_mag = 0.f;
  int64_t worst_at = -1;
  for (int64_t i = 0; i < out_n; ++i) {
    const float a = get(got, i, c.dtype), b = get(ref, i, c.dtype);
    const float err = std::isfinite(a) ? std::fabs(a - b) : INFINITY;
    ref_mag = std::max(ref_mag, std::fabs(b));
    if (!(err <= worst)) { worst = err; worst_at = i; }
  }
  const float tol = tolerance(c.dtype) * std::max(1.f, ref_mag);
  char why[256];
  std::snprintf(why, sizeof(why), "max |cuda - cpu| = %.3g at %lld (tolerance %.3g, max |ref| %.3g, splits ws %zu B)",
                worst, static_cast<long long>(worst_at), tol, ref_mag, ws_bytes);
  r.check(worst <= tol && ref_mag > 0.f, c.name, why);
}

const char* dname(ScalarType t) { return scalar_type_name(t); }

// The plan of a seq-major case on this device takes the tensor-core kernel with `tiles` M-tiles a block
// and `groups` row groups a kv head (the planner reads no memory: placeholder, 16-byte aligned pointers).
// rows: whether the plan must be the row-owning kernel (decode_attention_mma_rows_cuda.cuh; tiles are
// then its warps) or the key-slice one.
void expect_mma_plan(Report& r, const Case& c, int tiles, int64_t groups, bool rows) {
  DecodeAttentionParams p;
  p.batch = c.B; p.q_len = c.Tq; p.q_heads = c.Hq; p.kv_heads = c.Hkv; p.head_dim = c.D; p.kv_len = c.S;
  p.dtype = c.dtype;
  p.scale = 1.f;
  p.options = &g_options;
  p.q = reinterpret_cast<void*>(0x100000);
  p.out = reinterpret_cast<void*>(0x200000);
  p.k = reinterpret_cast<void*>(0x300000);
  p.v = reinterpret_cast<void*>(0x400000);
  const int64_t qs[4] = {c.Tq * c.Hq * c.D, c.Hq * c.D, c.D, 1}, ks[4] = {c.B * c.Hkv * c.D, c.Hkv * c.D, c.D, 1};
  std::copy(qs, qs + 4, p.q_stride);
  std::copy(qs, qs + 4, p.out_stride);
  std::copy(ks, ks + 4, p.k_stride);
  std::copy(ks, ks + 4, p.v_stride);
  decode_plan::Plan plan;
  if (!r.ok(decode_attention_cuda_plan(p, &plan), c.name + ".plan")) return;
  char why[160];
  std::snprintf(why, sizeof(why), "mma_kernel %d, mma_rows %d, mma_tiles %d, row_groups %lld (want 1, %d, %d, %lld)",
                plan.mma_kernel, plan.mma_rows, plan.mma_tiles, static_cast<long long>(plan.row_groups), rows, tiles,
                static_cast<long long>(groups));
  r.check(plan.mma_kernel && plan.mma_rows == rows && plan.mma_tiles == tiles && plan.row_groups == groups,
          c.name + ".plan_is_mma", why);
  // 32 keys a warp wherever the pass asks for them and the key-slice kernel has such an instance; 16 where it asks
  // for 16 (the plan's own rule is test_decode_plan's).
  const bool k32 = g_options.mma_warp_keys == 32 && !rows && g_options.split_keys == 0 && g_options.balance == 0 &&
                   g_options.mma_warps != 8 && decode_plan::mma_instance_exists(static_cast<int>(c.D), 4, tiles, 32);
  if (g_options.mma_warp_keys != 0) r.eq(plan.mma_warp_keys, k32 ? 32 : 16, c.name + ".plan_warp_keys");
}

void test_matrix(Report& r, std::mt19937& rng, cudaStream_t stream) {
  struct Heads { const char* name; int64_t hq, hkv; };
  const Heads heads[] = {{"mha", 4, 4}, {"gqa", 8, 2}, {"mqa", 8, 1}};
  for (ScalarType dt : {ScalarType::kFloat16, ScalarType::kBFloat16, ScalarType::kFloat32})
    for (int64_t B : {1, 8})
      for (const Heads& h : heads)
        for (int64_t S : {1, 100, 4096}) {
          Case c{g_mode + "matrix." + dname(dt) + ".b" + std::to_string(B) + "." + h.name + ".s" + std::to_string(S),
                 B, 1, h.hq, h.hkv, 128, S, dt};
          run_case(r, c, rng, stream);
        }
}

// --families-only: only the tensor-core families' cases (test_mma_families, the family cases of
// test_varlen), in the plan's own pass: what a copy with one of those paths broken on purpose runs
// (tests/gpu/break_mma_families.sh).
bool g_families_only = false;

void test_variants(Report& r, std::mt19937& rng, cudaStream_t stream) {
  const ScalarType f16 = ScalarType::kFloat16, bf16 = ScalarType::kBFloat16, f32 = ScalarType::kFloat32;
  std::vector<Case> cs = {
      // Tq > 1: causal (no mask) and with a mask, one block of rows and several.
      {"tq4.causal.fp16", 2, 4, 8, 2, 128, 300, f16},
      {"tq4.causal.gqa8_rows32.bf16", 2, 4, 32, 4, 128, 1000, bf16},
      {"tq3.mask_bool.fp32", 3, 3, 6, 3, 64, 77, f32, ScalarType::kBool, true},
      {"tq1.mask_f32.fp16", 3, 1, 8, 8, 128, 2000, f16, ScalarType::kFloat32, true},
      {"tq1.mask_same_dtype.bf16", 8, 1, 8, 2, 128, 513, bf16, ScalarType::kBFloat16, true},
      {"tq5.mask_f16.fp16", 2, 5, 4, 1, 64, 70, f16, ScalarType::kFloat16, true},
      {"tq_eq_s.causal.fp32", 2, 6, 4, 2, 32, 6, f32},
      // Head dims: partial lane groups, two chunks per lane (fp32 > 128), scalar fallback.
      {"d80.fp16", 2, 1, 4, 4, 80, 333, f16},
      {"d64.bf16.gqa", 2, 1, 8, 2, 64, 4096, bf16},
      {"d16.fp32", 3, 1, 4, 2, 16, 129, f32},
      {"d256.fp32.gqa", 2, 1, 8, 2, 256, 700, f32},
      {"d256.fp16", 1, 2, 4, 4, 256, 1500, f16},
      {"d192.fp32", 1, 1, 2, 2, 192, 65, f32},
      {"d33.fp32.fallback", 2, 1, 4, 2, 33, 150, f32},
      {"d100.fp16.fallback", 2, 3, 4, 4, 100, 90, f16},
      // Strided storage: padded rows (still 16-byte aligned), odd pad and misalignment (fallback).
      {"pad8.fp16", 2, 1, 8, 4, 128, 400, f16, ScalarType::kBool, false, 8},
      {"pad3.bf16.fallback", 2, 1, 4, 2, 64, 300, bf16, ScalarType::kBool, false, 3},
      {"misaligned.fp32.fallback", 1, 1, 4, 4, 128, 5000, f32, ScalarType::kBool, false, 0, true},
      // The tensor-core kernel (16-bit, head_dim 64/128, 2-16 rows per kv head): 12 and 5 rows,
      // all 16 rows at head_dim 64, and GQA 32/8 over a long context with many splits.
      {"mma.tq3.gqa4_rows12.fp16", 2, 3, 8, 2, 128, 1500, f16},
      {"mma.tq5.mha_rows5.bf16", 3, 5, 4, 4, 128, 257, bf16},
      {"mma.d64.tq2.rows16.fp16", 2, 2, 16, 2, 64, 999, f16},
      {"mma.gqa32_8.s20000.bf16", 1, 1, 32, 8, 128, 20000, bf16},
      // 1100 keys plan 9 splits, re-split into one cluster of 8 (138 keys a split: not whole tiles).
      {"mma.gqa4.s1100.recluster.fp16", 1, 1, 8, 2, 128, 1100, f16},
      // 4160 keys: 16 splits of 256 (whole tiles), the last one takes the other 64.
      {"mma.gqa32_8.s4160.last_split_longer.bf16", 1, 1, 32, 8, 128, 4160, bf16},
      // MHA where batch x kv heads fills one wave of the tensor-core kernel (more than one block per SM,
      // at most two, on a 132-SM H200) over a short context: the plan takes that kernel for one row.
      {"mma.mha_one_wave.fp16", 40, 1, 4, 4, 128, 1000, f16},
      {"mma.mha_one_wave.d64.bf16", 20, 1, 8, 8, 64, 3000, bf16},
      // Long context, batch 1: many splits.
      {"s65536.b1.fp16", 1, 1, 4, 4, 128, 65536, f16},
  };
  for (Case& c : cs) {
    c.name = g_mode + "variant." + c.name;
    run_case(r, c, rng, stream);
  }
}

void test_mma_families(Report& r, std::mt19937& rng, cudaStream_t stream) {
  const ScalarType f16 = ScalarType::kFloat16, bf16 = ScalarType::kBFloat16;
  // The tensor-core kernel past 16 rows per kv head (MQA, GQA x Tq) and at head_dim 80, 96 and 256; each
  // case's plan is checked to be that kernel with those M-tiles a block and row groups a kv head. The
  // planner spreads a large group over row groups of one M-tile (few blocks) or two (a full grid:
  // falcon71.b48); `force` sets DecodeOptions::mma_row_tiles, so the 2-, 4- and 8-M-tile blocks (all
  // rows of a kv head in one block, or in fewer groups) stay checked. `rows`: -1, the key-slice kernel
  // (DecodeOptions::mma_row_warps -1, as every case above the row-owning kernel's); 0, the plan's own
  // choice, which must be the row-owning kernel with `tiles` warps; 2, 4, 5 or 8, that kernel forced.
  struct MmaCase { Case c; int force, tiles; int64_t groups; int rows = -1; };
  const std::vector<MmaCase> mma = {
      {{"mma.gqa32_8.tiles1.fp16", 2, 1, 32, 8, 128, 1000, f16}, 0, 1, 1},  // the measured kernel of the tables
      {{"mma.mqa32.groups2.fp16", 2, 1, 32, 1, 128, 1500, f16}, 0, 1, 2},
      {{"mma.mqa32.tiles2.fp16", 2, 1, 32, 1, 128, 1500, f16}, 8, 2, 1},
      {{"mma.d64.rows17.groups2.fp16", 1, 1, 17, 1, 64, 333, f16}, 0, 1, 2},
      {{"mma.d64.rows17.tiles2.fp16", 1, 1, 17, 1, 64, 333, f16}, 2, 2, 1},
      {{"mma.starcoder48.groups3.bf16", 2, 1, 48, 1, 128, 900, bf16}, 0, 1, 3},
      {{"mma.starcoder48.tiles4.bf16", 2, 1, 48, 1, 128, 900, bf16}, 4, 4, 1},
      {{"mma.starcoder48.tiles2_groups2.fp16", 3, 1, 48, 1, 128, 700, f16}, 2, 2, 2},
      {{"mma.gqa8_tq8.rows64.groups4.bf16", 1, 8, 16, 2, 128, 600, bf16}, 0, 1, 4},
      {{"mma.gqa8_tq8.rows64.tiles4.bf16", 1, 8, 16, 2, 128, 600, bf16}, 8, 4, 1},
      {{"mma.falcon71.d64.groups5.bf16", 1, 1, 71, 1, 64, 700, bf16}, 0, 1, 5},
      {{"mma.falcon71.d64.tiles8.bf16", 1, 1, 71, 1, 64, 700, bf16}, 8, 8, 1},
      {{"mma.falcon71.d64.b48.tiles2_groups3.fp16", 48, 1, 71, 1, 64, 300, f16}, 0, 2, 3},
      {{"mma.tq8.rows128.groups8.fp16", 1, 8, 32, 2, 128, 400, f16}, 0, 1, 8},
      {{"mma.tq8.rows128.tiles8.fp16", 1, 8, 32, 2, 128, 400, f16}, 8, 8, 1},
      {{"mma.tq8.rows128.tiles4_groups2.bf16", 1, 8, 32, 2, 128, 400, bf16}, 4, 4, 2},
      {{"mma.tq3.rows99.groups7.bf16", 1, 3, 33, 1, 128, 260, bf16}, 0, 1, 7},
      {{"mma.tq3.rows99.tiles8.bf16", 1, 3, 33, 1, 128, 260, bf16}, 8, 8, 1},
      {{"mma.gemma8.d256.bf16", 2, 1, 8, 1, 256, 2100, bf16}, 0, 1, 1},
      {{"mma.d256.tq4.rows32.groups2.fp16", 1, 4, 8, 1, 256, 800, f16}, 0, 1, 2},
      {{"mma.d256.tq4.rows32.tiles2.fp16", 1, 4, 8, 1, 256, 800, f16}, 2, 2, 1},
      {{"mma.d256.tq2.rows48.groups3.bf16", 1, 2, 24, 1, 256, 500, bf16}, 0, 1, 3},
      {{"mma.d256.tq2.rows48.tiles4.bf16", 1, 2, 24, 1, 256, 500, bf16}, 4, 4, 1},
      {{"mma.d256.tq4.rows128.tiles8.bf16", 1, 4, 64, 2, 256, 300, bf16}, 8, 8, 1},
      {{"mma.d80.gqa8.fp16", 2, 1, 16, 2, 80, 1000, f16}, 0, 1, 1},
      {{"mma.d80.tq5.rows40.groups3.bf16", 1, 5, 16, 2, 80, 500, bf16}, 0, 1, 3},
      {{"mma.d80.tq5.rows40.tiles4.bf16", 1, 5, 16, 2, 80, 500, bf16}, 4, 4, 1},
      {{"mma.d80.tq5.rows40.tiles2_groups2.fp16", 1, 5, 16, 2, 80, 500, f16}, 2, 2, 2},
      // One row a kv head (MHA) on the tensor-core kernel, 4 warps: batches of 2+ entries within one wave of one block
      // an SM over at most 2304 keys (plan_kernel's one_wave_batch), head dims 64-128, one split and several.
      {{"mma.mha32.b4.one_wave.fp16", 4, 1, 32, 32, 128, 600, f16}, 0, 1, 1},
      {{"mma.mha8.d96.b3.one_wave.bf16", 3, 1, 8, 8, 96, 2100, bf16}, 0, 1, 1},
      {{"mma.mha16.d64.b4.one_wave.fp16", 4, 1, 16, 16, 64, 513, f16}, 0, 1, 1},
      {{"mma.mha4.d80.b2.one_wave.bf16", 2, 1, 4, 4, 80, 1999, bf16}, 0, 1, 1},
      {{"mma.tq4.rows32.tiles2.bf16", 3, 4, 8, 1, 128, 333, bf16}, 2, 2, 1},
      {{"mma.d96.tq3.mha_rows3.bf16", 2, 3, 8, 8, 96, 700, bf16}, 0, 1, 1},
      {{"mma.d96.mqa24.groups2.fp16", 1, 1, 24, 1, 96, 2000, f16}, 0, 1, 2},
      {{"mma.d96.mqa24.tiles2.fp16", 1, 1, 24, 1, 96, 2000, f16}, 2, 2, 1},
      {{"mma.d96.rows128.tiles8.fp16", 1, 2, 64, 1, 96, 350, f16}, 8, 8, 1},
      // The row-owning kernel (warps own 16 rows each over whole K/V tiles): the plan's own choice (48-64
      // rows a kv head over a long context: StarCoder B=32 S=9000, 4 warps), and 2, 4 or 8 warps forced;
      // idle warps (rows past the group), causal Tq rows, head dims 64-256, many splits.
      {{"mma.rows.starcoder48.b32.s9000.plan.fp16", 32, 1, 48, 1, 128, 9000, f16}, 0, 4, 1, 0},
      {{"mma.rows.mqa32.w2.fp16", 2, 1, 32, 1, 128, 1500, f16}, 0, 2, 1, 2},
      {{"mma.rows.mqa32.s20000.w2.bf16", 1, 1, 32, 1, 128, 20000, bf16}, 0, 2, 1, 2},
      {{"mma.rows.falcon71.d64.w4_groups2.bf16", 1, 1, 71, 1, 64, 700, bf16}, 0, 4, 2, 4},
      {{"mma.rows.falcon71.d64.s9000.w4_groups2.fp16", 2, 1, 71, 1, 64, 9000, f16}, 0, 4, 2, 4},
      {{"mma.rows.falcon71.d64.w8.fp16", 1, 1, 71, 1, 64, 700, f16}, 0, 8, 1, 8},
      // 5 warps (80 rows, head_dim 64 only; 128 of its 160 threads load the tiles): forced, over many
      // splits, causal Tq rows filling all 80 (16 heads x Tq 5), and the plan's own choice (Falcon, 16
      // entries over 8k+ keys).
      {{"mma.rows.falcon71.d64.w5.fp16", 1, 1, 71, 1, 64, 700, f16}, 0, 5, 1, 5},
      {{"mma.rows.falcon71.d64.s9000.w5.bf16", 2, 1, 71, 1, 64, 9000, bf16}, 0, 5, 1, 5},
      {{"mma.rows.d64.tq5.rows80.w5.fp16", 1, 5, 16, 1, 64, 500, f16}, 0, 5, 1, 5},
      {{"mma.rows.falcon71.d64.b16.s8200.plan.bf16", 16, 1, 71, 1, 64, 8200, bf16}, 0, 5, 1, 0},
      {{"mma.rows.falcon71.d64.b48.w2_groups3.bf16", 48, 1, 71, 1, 64, 300, bf16}, 0, 2, 3, 2},
      {{"mma.rows.starcoder48.w4.bf16", 2, 1, 48, 1, 128, 900, bf16}, 0, 4, 1, 4},
      {{"mma.rows.starcoder48.w2_groups2.fp16", 3, 1, 48, 1, 128, 700, f16}, 0, 2, 2, 2},
      {{"mma.rows.tq8.rows128.w4_groups2.fp16", 1, 8, 32, 2, 128, 400, f16}, 0, 4, 2, 4},
      {{"mma.rows.tq8.rows128.w8.bf16", 1, 8, 32, 2, 128, 400, bf16}, 0, 8, 1, 8},
      {{"mma.rows.tq3.rows99.w4_groups2.bf16", 1, 3, 33, 1, 128, 260, bf16}, 0, 4, 2, 4},
      {{"mma.rows.gqa8_tq8.rows64.w4.fp16", 1, 8, 16, 2, 128, 600, f16}, 0, 4, 1, 4},
      {{"mma.rows.gemma8.d256.w2.bf16", 2, 1, 8, 1, 256, 2100, bf16}, 0, 2, 1, 2},
      {{"mma.rows.d256.tq4.rows32.w2.fp16", 1, 4, 8, 1, 256, 800, f16}, 0, 2, 1, 2},
      {{"mma.rows.d256.tq2.rows48.w4.bf16", 1, 2, 24, 1, 256, 500, bf16}, 0, 4, 1, 4},
      {{"mma.rows.d256.tq4.rows128.w8.bf16", 1, 4, 64, 2, 256, 300, bf16}, 0, 8, 1, 8},
      {{"mma.rows.d80.tq5.rows40.w4.bf16", 1, 5, 16, 2, 80, 500, bf16}, 0, 4, 1, 4},
      {{"mma.rows.d96.mqa24.w2.fp16", 1, 1, 24, 1, 96, 2000, f16}, 0, 2, 1, 2},
      {{"mma.rows.d96.rows128.w8.fp16", 1, 2, 64, 1, 96, 350, f16}, 0, 8, 1, 8},
  };
  const DecodeOptions pass = g_options;
  for (MmaCase m : mma) {
    m.c.name = g_mode + "variant." + m.c.name;
    g_options.mma_row_tiles = m.force;
    g_options.mma_row_warps = m.rows;
    if (!g_options.no_mma && g_check_plans) expect_mma_plan(r, m.c, m.tiles, m.groups, m.rows != -1);
    run_case(r, m.c, rng, stream);
    g_options = pass;
  }
}

// Variable lengths (slot caches): entries read slots through kv_batch_index, per-slot lengths in
// cache_seqlens, packed queries through cu_seqlens_q, mapped-token limits through kv_mapped, and the
// lse output. The reference is independent of those fields: each entry is cut out on the host as a
// dense problem (its slot's first n_b keys, its q_b queries, causal) and run through
// decode_attention_cpu; the lse is summed in double here.
struct VarlenCase {
  std::string name;
  int64_t slots, Smax, Hq, Hkv, D;
  ScalarType dtype;
  std::vector<int32_t> slot_of;   // kv_batch_index (empty: entry b reads slot b)
  std::vector<int32_t> seqlens;   // cache_seqlens per slot (before this step's queries)
  std::vector<int32_t> q_counts;  // queries per entry (packed when any differs from q_len)
  int64_t q_len, kv_len;          // host-known upper bounds
  std::vector<int32_t> mapped;    // kv_mapped per slot (empty: none given)
  bool slot_major = true;         // [slots, Smax, H, D] storage; false: seq-major [Smax, slots, H, D]
  int row_tiles = 0;              // DecodeOptions::mma_row_tiles for this case (0: the plan's)
  int row_warps = 0;              // DecodeOptions::mma_row_warps for this case (0: the plan's)
  int want_balanced = -1;         // 1 / 0: the plan must (not) be balanced (Plan::balance_blocks); -1: either
  int want_choice = -1;           // 1 / 0: a balanced grid's blocks must take balanced splits / the plain plan
                                  // (the split size they leave after the partials; 0: plain); -1: unchecked
};

void run_varlen(Report& r, const VarlenCase& c, std::mt19937& rng, cudaStream_t stream) {
  const int64_t eb = elem_bytes(c.dtype), B = static_cast<int64_t>(c.q_counts.size());
  const bool packed = std::any_of(c.q_counts.begin(), c.q_counts.end(), [&](int32_t n) { return n != c.q_len; });
  std::vector<int32_t> cu(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) cu[b + 1] = cu[b] + c.q_counts[b];
  const int64_t q_rows = packed ? cu[B] : B * c.q_len;
  const int64_t kv_n = c.slots * c.Smax * c.Hkv * c.D, q_n = q_rows * c.Hq * c.D;
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  std::vector<uint8_t> q(q_n * eb), k(kv_n * eb), v(kv_n * eb);
  for (int64_t i = 0; i < q_n; ++i) put(q, i, c.dtype, 2.f * U(rng));
  for (int64_t i = 0; i < kv_n; ++i) { put(k, i, c.dtype, U(rng)); put(v, i, c.dtype, U(rng)); }
  int64_t ks[4];
  if (c.slot_major) {
    const int64_t st[4] = {c.Hkv * c.D, c.Smax * c.Hkv * c.D, c.D, 1};
    std::copy(st, st + 4, ks);
  } else {
    const int64_t st[4] = {c.slots * c.Hkv * c.D, c.Hkv * c.D, c.D, 1};
    std::copy(st, st + 4, ks);
  }
  auto slot = [&](int64_t b) { return c.slot_of.empty() ? b : static_cast<int64_t>(c.slot_of[b]); };

  // Expected output (NaN where nothing is to be written is never compared: every row is an entry's).
  std::vector<uint8_t> ref(q_n * eb, 0);
  std::vector<double> ref_lse(q_rows * c.Hq, -INFINITY);
  std::vector<bool> refused(B, false);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = slot(b), qb = c.q_counts[b], n = c.seqlens[s] + qb;
    refused[b] = n > c.kv_len || (!c.mapped.empty() && n > c.mapped[s]);
    if (qb == 0 || refused[b]) continue;  // refused: zeros, lse -inf
    // Dense sub-problem: K/V [n, 1, Hkv, D] at the slot's storage, q [1, qb, Hq, D].
    DecodeAttentionParams hp;
    hp.batch = 1; hp.q_len = qb; hp.q_heads = c.Hq; hp.kv_heads = c.Hkv; hp.head_dim = c.D; hp.kv_len = n;
    hp.dtype = c.dtype; hp.scale = 1.f / std::sqrt(static_cast<float>(c.D));
    const int64_t row0 = packed ? cu[b] : b * c.q_len;
    const int64_t qs[4] = {0, c.Hq * c.D, c.D, 1};
    std::copy(qs, qs + 4, hp.q_stride);
    std::copy(qs, qs + 4, hp.out_stride);
    std::copy(ks, ks + 4, hp.k_stride);
    std::copy(ks, ks + 4, hp.v_stride);
    hp.q = q.data() + row0 * c.Hq * c.D * eb;
    hp.out = ref.data() + row0 * c.Hq * c.D * eb;
    hp.k = k.data() + s * ks[1] * eb;
    hp.v = v.data() + s * ks[1] * eb;
    if (!r.ok(decode_attention_cpu(hp), c.name + ".reference")) return;
    for (int64_t t = 0; t < qb; ++t)
      for (int64_t h = 0; h < c.Hq; ++h) {
        const int64_t hk = h / (c.Hq / c.Hkv);
        std::vector<double> sc;
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.seqlens[s] + t + 1; ++j) {
          double x = 0;
          for (int64_t d = 0; d < c.D; ++d)
            x += static_cast<double>(get(q, ((row0 + t) * c.Hq + h) * c.D + d, c.dtype)) *
                 get(k, s * ks[1] + j * ks[0] + hk * ks[2] + d, c.dtype);
          x /= std::sqrt(static_cast<double>(c.D));
          sc.push_back(x);
          mx = std::max(mx, x);
        }
        double sum = 0;
        for (double x : sc) sum += std::exp(x - mx);
        ref_lse[(row0 + t) * c.Hq + h] = mx + std::log(sum);
      }
  }

  DevBuf dq(q.size()), dk(k.size()), dv(v.size()), dout(ref.size()), dlse(ref_lse.size() * 4);
  DevBuf dcu(cu.size() * 4), dslot(std::max<size_t>(1, c.slot_of.size()) * 4), dlen(c.seqlens.size() * 4);
  DevBuf dmapped(std::max<size_t>(1, c.mapped.size()) * 4), dflag(4);
  cudaMemset(dout.ptr, 0xff, ref.size());  // NaN: an unwritten output cannot pass
  cudaMemset(dlse.ptr, 0xff, ref_lse.size() * 4);
  cudaMemset(dflag.ptr, 0, 4);
  Inputs in;
  in.add(dq.ptr, q.data(), q.size());
  in.add(dk.ptr, k.data(), k.size());
  in.add(dv.ptr, v.data(), v.size());
  in.add(dcu.ptr, cu.data(), cu.size() * 4);
  in.add(dslot.ptr, c.slot_of.data(), c.slot_of.size() * 4);
  in.add(dlen.ptr, c.seqlens.data(), c.seqlens.size() * 4);
  in.add(dmapped.ptr, c.mapped.data(), c.mapped.size() * 4);
  if (!r.check(in.upload(stream), c.name + ".upload")) return;

  DecodeAttentionParams p;
  p.batch = B; p.q_len = c.q_len; p.q_heads = c.Hq; p.kv_heads = c.Hkv; p.head_dim = c.D; p.kv_len = c.kv_len;
  DecodeOptions options = g_options;
  if (c.row_tiles != 0) options.mma_row_tiles = c.row_tiles;
  if (c.row_warps != 0) options.mma_row_warps = c.row_warps;
  if (c.row_warps > 0) options.balance = 0;  // balanced grids are the key-slice kernel's (--balanced-only reruns)
  p.options = &options;
  p.dtype = c.dtype; p.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  const int64_t qs[4] = {c.q_len * c.Hq * c.D, c.Hq * c.D, c.D, 1};
  std::copy(qs, qs + 4, p.q_stride);
  std::copy(qs, qs + 4, p.out_stride);
  std::copy(ks, ks + 4, p.k_stride);
  std::copy(ks, ks + 4, p.v_stride);
  p.q = dq.ptr; p.k = dk.ptr; p.v = dv.ptr; p.out = dout.ptr;
  p.cu_seqlens_q = packed ? static_cast<int32_t*>(dcu.ptr) : nullptr;
  p.kv_batch_index = c.slot_of.empty() ? nullptr : static_cast<int32_t*>(dslot.ptr);
  p.cache_seqlens = static_cast<int32_t*>(dlen.ptr);
  p.kv_mapped = c.mapped.empty() ? nullptr : static_cast<int32_t*>(dmapped.ptr);
  p.error_flag = static_cast<int32_t*>(dflag.ptr);
  p.lse = static_cast<float*>(dlse.ptr);
  const size_t wsb = decode_attention_cuda_workspace_bytes(p);
  DevBuf ws(wsb);
  p.workspace = wsb ? ws.ptr : nullptr;
  p.workspace_bytes = wsb;
  decode_plan::Plan plan;
  if (c.want_balanced >= 0 || c.want_choice >= 0) {
    if (!r.ok(decode_attention_cuda_plan(p, &plan), c.name + ".plan")) return;
    if (!r.check((plan.balance_blocks > 0) == (c.want_balanced == 1), c.name + ".balanced_plan",
                 "balance_blocks " + std::to_string(plan.balance_blocks))) {
      return;
    }
  }
  count_plan(p);
  if (!r.ok(decode_attention_cuda(p, stream), c.name + ".launch")) return;
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (!r.check(e == cudaSuccess, c.name + ".sync", cudaGetErrorString(e))) return;
  std::vector<uint8_t> got(ref.size());
  std::vector<float> got_lse(ref_lse.size());
  int32_t flag = -1;
  cudaMemcpy(got.data(), dout.ptr, got.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(got_lse.data(), dlse.ptr, got_lse.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(&flag, dflag.ptr, 4, cudaMemcpyDeviceToHost);
  if (c.want_choice >= 0) {  // the split size after the partials (decode_attention_cuda.cu), written by block 0
    int32_t chunk = -1;
    const size_t at = static_cast<size_t>(plan.splits * plan.rows_total * (c.D + 2)) * sizeof(float);
    const bool held = plan.balance_blocks > 0 && plan.splits > 1 && at + 4 <= wsb;
    if (held) cudaMemcpy(&chunk, static_cast<char*>(ws.ptr) + at, 4, cudaMemcpyDeviceToHost);
    r.check(held && (chunk > 0) == (c.want_choice == 1) && chunk >= 0, c.name + ".device_choice",
            "split size " + std::to_string(chunk) + " (0: the plain plan), plain splits " +
                std::to_string(plan.balance_plain_splits));
  }

  float worst = 0.f, ref_mag = 0.f;
  for (int64_t i = 0; i < q_n; ++i) {
    const float a = get(got, i, c.dtype), b = get(ref, i, c.dtype);
    ref_mag = std::max(ref_mag, std::fabs(b));
    worst = std::max(worst, std::isfinite(a) ? std::fabs(a - b) : INFINITY);
  }
  double lse_worst = 0;
  for (size_t i = 0; i < ref_lse.size(); ++i) {
    const double a = got_lse[i], b = ref_lse[i];
    const double err = std::isinf(b) ? (a == b ? 0.0 : INFINITY) : (std::isfinite(a) ? std::fabs(a - b) : INFINITY);
    lse_worst = std::max(lse_worst, err);
  }
  const bool any_refused = std::any_of(refused.begin(), refused.end(), [](bool x) { return x; });
  const float tol = tolerance(c.dtype) * std::max(1.f, ref_mag);
  char why[256];
  std::snprintf(why, sizeof(why), "max |cuda - ref| = %.3g (tol %.3g), lse max err %.3g, error_flag %d (want %d), ws %zu B",
                worst, tol, lse_worst, flag, any_refused ? 1 : 0, wsb);
  r.check(worst <= tol && lse_worst <= 2e-3 && flag == (any_refused ? 1 : 0), c.name, why);
}

void test_varlen(Report& r, std::mt19937& rng, cudaStream_t stream) {
  const ScalarType f16 = ScalarType::kFloat16, bf16 = ScalarType::kBFloat16, f32 = ScalarType::kFloat32;
  std::vector<VarlenCase> cs = {
      // Decode (one query per entry): slots read out of order, lengths 0 .. 4999 under a bound of 5000.
      {"decode.slots.gqa.fp16", 5, 5000, 8, 2, 128, f16, {3, 0, 4, 1}, {700, 4999 - 1, 0, 37, 2500}, {1, 1, 1, 1}, 1, 5000, {}, true},
      {"decode.slots.mha.bf16", 4, 3000, 4, 4, 128, bf16, {}, {2999, 1, 1500, 64}, {1, 1, 1, 1}, 1, 3000, {}, true},
      {"decode.seq_major.fp32", 3, 900, 4, 2, 64, f32, {}, {899, 10, 450}, {1, 1, 1}, 1, 900, {}, false},
      // Packed queries (chunked prefill / speculative verify): 3, 0, 2 and 4 new tokens per entry.
      {"packed.gqa.fp16", 4, 2048, 8, 2, 128, f16, {2, 0, 3, 1}, {100, 2000, 7, 1000}, {3, 0, 2, 4}, 4, 2048, {}, true},
      {"packed.mha.bf16.d64", 3, 600, 4, 4, 64, bf16, {}, {0, 300, 590}, {5, 1, 3}, 5, 600, {}, true},
      // Refusals: entry 1 reads past its slot's mapped tokens, entry 2 past the host's bound.
      {"refused.mapped_and_bound.fp16", 3, 1024, 4, 2, 128, f16, {}, {500, 900, 1023}, {1, 1, 2}, 2, 1024,
       {1024, 512, 1024}, true},
      // Bounds a little past whole tiles / steps: an entry's last, partial step goes with its last split
      // (split_range; on the H200, one-row kernel, 32 heads: 16 splits, 8 of 9 steps and 8 of 8 + 31 keys).
      {"decode.bound_past_whole_tiles.gqa.fp16", 2, 1100, 8, 2, 128, f16, {}, {1099, 1050}, {1, 1}, 1, 1100, {}, true},
      {"decode.bound_past_whole_steps.mha.fp16", 1, 4351, 32, 32, 128, f16, {}, {4350}, {1}, 1, 4351, {}, true},
      // Few blocks: the one-row kernel takes splits shorter than kMinKeysPerSplit (balance_splits; 11 of one step).
      {"decode.balanced_splits.mha.bf16", 2, 333, 4, 4, 128, bf16, {}, {332, 300}, {1, 1}, 1, 333, {}, true},
      // A bound far above the lengths (a cache planned for its capacity, as a captured graph is): every
      // entry spreads its own keys over the bound's splits; one entry has fewer steps than splits.
      {"decode.capacity_bound.mha.fp16", 3, 8192, 32, 32, 128, f16, {}, {1000, 4, 3001}, {1, 1, 1}, 1, 8192, {}, true},
      {"decode.capacity_bound.gqa.bf16", 2, 4000, 32, 8, 128, bf16, {}, {1023, 77}, {1, 1}, 1, 4000, {}, true},
      {"packed.capacity_bound.gqa.fp16", 2, 4096, 8, 2, 64, f16, {}, {500, 130}, {3, 2}, 3, 4096, {}, true},
      // The tensor-core kernel's M-tiles and head dims (test_variants' mma.* cases) per slot: MQA, Falcon
      // 71/1, speculative verify of 8 / 3 / 5 tokens at GQA 32/4 (64 rows), Gemma 8/1 at 256, 80 and 96.
      {"family.decode.slots.mqa32.fp16", 3, 3000, 32, 1, 128, f16, {2, 0, 1}, {1500, 2998, 40}, {1, 1, 1}, 1, 3000, {}, true},
      {"family.decode.slots.falcon71.d64.bf16", 2, 1200, 71, 1, 64, bf16, {}, {1199, 300}, {1, 1}, 1, 1200, {}, true},
      {"family.packed.spec_verify.rows64.fp16", 3, 2048, 32, 4, 128, f16, {}, {100, 2000, 700}, {8, 3, 5}, 8, 2048, {}, true},
      {"family.decode.slots.gemma.d256.bf16", 2, 2500, 8, 1, 256, bf16, {}, {2400, 17}, {1, 1}, 1, 2500, {}, true},
      {"family.packed.seq_major.d256.rows32.fp16", 2, 900, 8, 1, 256, f16, {}, {800, 50}, {4, 2}, 4, 900, {}, false},
      {"family.decode.slots.d80.bf16", 2, 800, 16, 2, 80, bf16, {}, {799, 5}, {1, 1}, 1, 800, {}, true},
      {"family.decode.slots.d96.mqa32.fp16", 2, 1000, 32, 1, 96, f16, {1, 0}, {600, 999}, {1, 1}, 1, 1000, {}, true},
      // The same per slot with all rows of a kv head in one block (mma_row_tiles 8: the plan before row
      // groups), and with two M-tiles a block (Falcon: groups of 32, 32 and 7 rows).
      {"family.decode.slots.mqa32.tiles2.fp16", 3, 3000, 32, 1, 128, f16, {2, 0, 1}, {1500, 2998, 40}, {1, 1, 1}, 1, 3000, {}, true, 8},
      {"family.decode.slots.falcon71.d64.tiles8.bf16", 2, 1200, 71, 1, 64, bf16, {}, {1199, 300}, {1, 1}, 1, 1200, {}, true, 8},
      {"family.decode.slots.falcon71.d64.tiles2.fp16", 2, 1200, 71, 1, 64, f16, {1, 0}, {700, 1199}, {1, 1}, 1, 1200, {}, true, 2},
      {"family.packed.spec_verify.rows64.tiles4.bf16", 3, 2048, 32, 4, 128, bf16, {}, {100, 2000, 700}, {8, 3, 5}, 8, 2048, {}, true, 8},
      // The key-slice kernel's row groups per slot forced (mma_row_warps -1: what the plan takes above
      // too, short contexts), the row-owning kernel with 8 and 2 warps forced (one row group of 71 rows;
      // 3 of 32, 32 and 7), and the plan's own choice of it: Qwen2 28/4 verifying 8 tokens (56 rows) per
      // slot over a long context (8 slots x 4 kv heads, 8 splits of about 1k keys).
      {"family.decode.slots.mqa32.keyslice.fp16", 3, 3000, 32, 1, 128, f16, {2, 0, 1}, {1500, 2998, 40}, {1, 1, 1}, 1, 3000, {}, true, 0, -1},
      {"family.decode.slots.falcon71.d64.keyslice.bf16", 2, 1200, 71, 1, 64, bf16, {}, {1199, 300}, {1, 1}, 1, 1200, {}, true, 0, -1},
      {"family.decode.slots.falcon71.d64.rows8.fp16", 2, 1200, 71, 1, 64, f16, {1, 0}, {700, 1199}, {1, 1}, 1, 1200, {}, true, 0, 8},
      {"family.decode.slots.falcon71.d64.rows2.bf16", 2, 5000, 71, 1, 64, bf16, {}, {4999, 2100}, {1, 1}, 1, 5000, {}, false, 0, 2},
      {"family.decode.slots.falcon71.d64.rows5.fp16", 3, 5000, 71, 1, 64, f16, {2, 0, 1}, {4999, 1, 2100}, {1, 1, 1}, 1, 5000, {}, true, 0, 5},
      {"family.packed.spec_verify.rows64.rows8.fp16", 3, 2048, 32, 4, 128, f16, {}, {100, 2000, 700}, {8, 3, 5}, 8, 2048, {}, true, 0, 8},
      {"family.decode.slots.gemma.d256.rows2.fp16", 2, 2500, 8, 1, 256, f16, {}, {2400, 17}, {1, 1}, 1, 2500, {}, true, 0, 2},
      {"family.decode.slots.spec_verify.qwen2.long.plan.bf16", 8, 8300, 28, 4, 128, bf16, {}, {8291, 5000, 8200, 100, 8291, 7000, 3, 8000},
       {8, 8, 8, 8, 8, 8, 8, 8}, 8, 8300, {}, true},
  };
  for (VarlenCase& c : cs) {
    if (g_families_only && c.name.find("family.") != 0) continue;
    c.name = g_mode + "varlen." + c.name;
    run_varlen(r, c, rng, stream);
  }
}

// Balanced splits (decode_attention_balance_cuda.cuh): per-slot batches of skewed lengths, most short, a few
// long, with empty and one-key slots, out-of-order slots, packed causal queries (Tq up to 4, entries with no
// query), a slot refused past its mapped tokens, row groups (Falcon 71/1) and head dims 64-256, fp16 and bf16;
// each under the rule (kBalanceRule), balanced with budgets of 1 and 4 blocks an SM (1: split sizes above the
// least, found by the device's bisection) and off (the default), against the host kernel (run_varlen).
VarlenCase skewed(std::mt19937& rng, const std::string& name, int64_t slots, int64_t Smax, int64_t Hq, int64_t Hkv,
                  int64_t D, ScalarType dt, int64_t q_len) {
  VarlenCase c{name, slots, Smax, Hq, Hkv, D, dt, {}, {}, {}, q_len, Smax, {}, true};
  std::uniform_int_distribution<int32_t> shortlen(2, 700), longlen(static_cast<int32_t>(Smax / 2),
                                                                   static_cast<int32_t>(Smax - q_len));
  std::uniform_int_distribution<int32_t> queries(q_len > 1 ? 0 : 1, static_cast<int32_t>(q_len));
  for (int64_t b = 0; b < slots; ++b) {
    c.seqlens.push_back(b == 0 ? 0 : b == 1 ? 1 : b % 4 == 3 ? longlen(rng) : shortlen(rng));
    c.slot_of.push_back(static_cast<int32_t>(b));
    c.q_counts.push_back(b < 2 ? 1 : queries(rng));
  }
  std::shuffle(c.slot_of.begin(), c.slot_of.end(), rng);  // every slot once, out of order
  return c;
}

// The device's choice under the rule (kBalanceRule): shapes the rule balances (per-slot GQA, 64 or more blocks
// a split, a bound of 8192 keys) whose plain grid (one split: 136 entries x kv heads) is larger than the SMs,
// so that the grid holds the plain plan too, with lengths even (the blocks must take the plain plan) and skewed
// (balanced splits); and where the plain grid would keep one block an SM (16 x 4, 8 x 8: 2 splits each), which
// the rule balances whatever the lengths. Against the host kernel, and which grid the blocks took.
VarlenCase chosen(std::mt19937& rng, const std::string& name, int64_t slots, int64_t Hq, int64_t Hkv, int64_t D,
                  ScalarType dt, bool skew, bool plain_held = true) {
  const int64_t Smax = 8192;
  VarlenCase c{name, slots, Smax, Hq, Hkv, D, dt, {}, {}, {}, 1, Smax, {}, true};
  std::uniform_int_distribution<int32_t> even(1400, 1500), shortlen(1, 600), longlen(5000, 8000);
  for (int64_t b = 0; b < slots; ++b) {
    c.seqlens.push_back(!skew ? even(rng) : b % 4 == 1 ? longlen(rng) : shortlen(rng));
    c.slot_of.push_back(static_cast<int32_t>(slots - 1 - b));
    c.q_counts.push_back(1);
  }
  c.want_balanced = 1;
  c.want_choice = skew || !plain_held ? 1 : 0;
  return c;
}

void test_balanced(Report& r, std::mt19937& rng, cudaStream_t stream) {
  g_options = DecodeOptions{};
  g_options.balance = kBalanceRule;  // the rule, the device choosing
  for (bool skew : {false, true}) {
    const std::string how = skew ? "balanced.choice.skewed." : "balanced.choice.even.";
    const ScalarType f16 = ScalarType::kFloat16, bf16 = ScalarType::kBFloat16;
    for (VarlenCase c : {chosen(rng, how + "qwen28_4.b34.d128.fp16", 34, 28, 4, 128, f16, skew),
                         chosen(rng, how + "llama32_8.b17.d128.bf16", 17, 32, 8, 128, bf16, skew),
                         chosen(rng, how + "gqa32_8.b17.d64.fp16", 17, 32, 8, 64, f16, skew),
                         chosen(rng, how + "no_plain.qwen28_4.b16.d128.fp16", 16, 28, 4, 128, f16, skew, false),
                         chosen(rng, how + "no_plain.llama32_8.b8.d128.bf16", 8, 32, 8, 128, bf16, skew, false)}) {
      run_varlen(r, c, rng, stream);
    }
  }
  const ScalarType f16 = ScalarType::kFloat16, bf16 = ScalarType::kBFloat16;
  std::vector<VarlenCase> cs = {
      skewed(rng, "qwen28_4.d128.fp16", 29, 4100, 28, 4, 128, f16, 1),
      skewed(rng, "llama32_8.d128.bf16", 21, 3000, 32, 8, 128, bf16, 1),
      skewed(rng, "causal_tq4.gqa16_2.d96.fp16", 14, 2600, 16, 2, 96, f16, 4),
      skewed(rng, "gqa8_2.d64.bf16", 37, 2300, 8, 2, 64, bf16, 1),
      skewed(rng, "gemma8_1.d256.bf16", 9, 2200, 8, 1, 256, bf16, 1),
      skewed(rng, "falcon71_1.d64.fp16", 6, 2100, 71, 1, 64, f16, 1),
      skewed(rng, "causal_tq2.gqa32_4.d80.bf16", 11, 2050, 32, 4, 80, bf16, 2),
  };
  VarlenCase refused = skewed(rng, "refused_mapped.gqa8_2.d128.fp16", 10, 2500, 8, 2, 128, f16, 1);
  refused.mapped.assign(10, 2500);
  refused.mapped[refused.slot_of[3]] = refused.seqlens[refused.slot_of[3]];  // its one new key is not mapped
  cs.push_back(refused);
  struct Pass { const char* prefix; int balance, want; };
  for (const Pass& pass : {Pass{"rule.", kBalanceRule, -1}, Pass{"budget1.", 1, 1}, Pass{"budget4.", 4, 1},
                           Pass{"off.", 0, 0}}) {
    g_options = DecodeOptions{};
    g_options.balance = pass.balance;
    for (VarlenCase c : cs) {
      c.name = std::string("balanced.") + pass.prefix + c.name;
      c.want_balanced = pass.want;
      run_varlen(r, c, rng, stream);
    }
  }
  g_options = DecodeOptions{};
}

// K/V that live in SeqMajorCaches (VM-mapped, filled by append_tokens_cuda), checked against the
// host reference over the same tokens.
void test_in_cache(Report& r, std::mt19937& rng, cudaStream_t stream) {
  const int64_t B = 3, S = 777, Hq = 8, Hkv = 2, D = 128;
  const ScalarType dt = ScalarType::kFloat16;
  const CacheShape shape{B, Hkv, D, 2};
  std::shared_ptr<SeqMajorCache> kc, vc;
  if (!r.ok(SeqMajorCache::create(kGpu, shape, CacheConfig{4096, 0}, &kc), "cache.create_k")) return;
  if (!r.ok(SeqMajorCache::create(kGpu, shape, CacheConfig{4096, 0}, &vc), "cache.create_v")) return;
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  const int64_t n = B * S * Hkv * D, qn = B * Hq * D;
  std::vector<uint8_t> k(n * 2), v(n * 2), q(qn * 2);  // k, v as [B, S, H, D] (what append takes)
  for (int64_t i = 0; i < n; ++i) { put(k, i, dt, U(rng)); put(v, i, dt, U(rng)); }
  for (int64_t i = 0; i < qn; ++i) put(q, i, dt, 2.f * U(rng));
  DevBuf dk(k.size()), dv(v.size()), dq(q.size()), dout(q.size());
  cudaMemcpy(dk.ptr, k.data(), k.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dv.ptr, v.data(), v.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dq.ptr, q.data(), q.size(), cudaMemcpyHostToDevice);
  for (auto [cache, src] : {std::make_pair(kc.get(), dk.ptr), std::make_pair(vc.get(), dv.ptr)}) {
    if (!r.ok(cache->begin_append(0, S), "cache.begin_append")) return;
    AppendParams a;
    a.dst = cache->data(); a.src = src; a.batch = B; a.tokens = S; a.heads = Hkv; a.head_dim = D;
    a.dst_pos = 0; a.elem_bytes = 2;
    const int64_t st[4] = {S * Hkv * D, Hkv * D, D, 1};
    std::copy(st, st + 4, a.src_stride);
    if (!r.ok(append_tokens_cuda(a, stream), "cache.append")) return;
  }
  DecodeAttentionParams p;
  p.batch = B; p.q_len = 1; p.q_heads = Hq; p.kv_heads = Hkv; p.head_dim = D; p.kv_len = S;
  p.options = &g_options;
  p.dtype = dt; p.scale = 1.f / std::sqrt(128.f);
  const int64_t qs[4] = {Hq * D, Hq * D, D, 1};
  std::copy(qs, qs + 4, p.q_stride);
  std::copy(qs, qs + 4, p.out_stride);
  // Host reference reads the [B, S, H, D] originals: strides (s, b, h, d).
  std::vector<uint8_t> ref(q.size());
  DecodeAttentionParams hp = p;
  const int64_t hs[4] = {Hkv * D, S * Hkv * D, D, 1};
  std::copy(hs, hs + 4, hp.k_stride);
  std::copy(hs, hs + 4, hp.v_stride);
  hp.q = q.data(); hp.k = k.data(); hp.v = v.data(); hp.out = ref.data();
  if (!r.ok(decode_attention_cpu(hp), "cache.reference")) return;
  // The device reads the caches in their seq-major storage.
  DecodeAttentionParams dp = p;
  const int64_t cs[4] = {B * Hkv * D, Hkv * D, D, 1};
  std::copy(cs, cs + 4, dp.k_stride);
  std::copy(cs, cs + 4, dp.v_stride);
  dp.q = dq.ptr; dp.k = kc->data(); dp.v = vc->data(); dp.out = dout.ptr;
  const size_t wsb = decode_attention_cuda_workspace_bytes(dp);
  DevBuf ws(wsb);
  dp.workspace = ws.ptr; dp.workspace_bytes = wsb;
  if (!r.ok(decode_attention_cuda(dp, stream), "cache.launch")) return;
  cudaStreamSynchronize(stream);
  std::vector<uint8_t> got(q.size());
  cudaMemcpy(got.data(), dout.ptr, got.size(), cudaMemcpyDeviceToHost);
  float worst = 0.f;
  for (int64_t i = 0; i < qn; ++i) worst = std::max(worst, std::fabs(get(got, i, dt) - get(ref, i, dt)));
  r.check(worst <= tolerance(dt), "cache.reads_seq_major_cache_in_place", "max error " + std::to_string(worst));
  kc->remove_view(S);
  vc->remove_view(S);
}

void test_errors(Report& r) {
  DecodeAttentionParams p;
  p.batch = 1; p.q_len = 1; p.q_heads = 6; p.kv_heads = 4; p.head_dim = 128; p.kv_len = 10;
  int dummy = 0;
  p.q = p.k = p.v = &dummy;
  p.out = &dummy;
  p.scale = 1.f;
  r.code(decode_attention_cuda(p, nullptr), Code::kInvalidArgument, "errors.heads_not_multiple");
  p.q_heads = 8;
  p.head_dim = 512;
  r.code(decode_attention_cuda(p, nullptr), Code::kUnsupported, "errors.head_dim_too_large");
  p.head_dim = 128;
  p.q_len = 20;
  r.code(decode_attention_cuda(p, nullptr), Code::kInvalidArgument, "errors.causal_needs_s_ge_tq");
  p.q_len = 1;
  p.dtype = ScalarType::kBool;
  r.code(decode_attention_cuda(p, nullptr), Code::kInvalidArgument, "errors.bool_qkv");
  p.dtype = ScalarType::kFloat16;
  p.kv_len = 1 << 20;  // long enough to split: a missing workspace must be refused
  p.kv_heads = 1;      // ... into more splits than one cluster holds (which needs no workspace)
  r.code(decode_attention_cuda(p, nullptr), Code::kInvalidArgument, "errors.missing_workspace");
  p.kv_len = int64_t(1) << 31;  // split_range counts an entry's steps in 32 bits
  r.code(decode_attention_cuda(p, nullptr), Code::kUnsupported, "errors.kv_len_past_int32");
  p.kv_len = 10;
  p.kv_heads = 4;
  p.mask = &dummy;
  int32_t lens[1] = {3};
  p.cache_seqlens = lens;
  r.code(decode_attention_cuda(p, nullptr), Code::kInvalidArgument, "errors.mask_with_varlen");
}

// SplitCount's multiply-and-shift division (what split_range divides by) against '/', on the host (the
// same code as on the device, with the multiply-high in 64 bits): every split count the plan can make,
// dividends at and around each multiple up to 2^12, powers of two, and random ones below 2^31.
void test_split_count(Report& r, std::mt19937& rng) {
  int64_t wrong = 0, checked = 0;
  std::string first;
  std::uniform_int_distribution<uint32_t> U(0, 0x7fffffffu);
  for (uint32_t d = 1; d <= 128; ++d) {
    const decode_cuda::SplitCount sc(d);
    std::vector<uint32_t> xs = {0x7fffffffu, 0x7ffffffeu, 0x7fffffffu / d * d, 0x7fffffffu / d * d - 1};
    for (uint32_t x = 0; x < 4096; ++x) xs.push_back(x);
    for (int b = 0; b < 31; ++b) xs.push_back(1u << b), xs.push_back((1u << b) - 1);
    for (int i = 0; i < 2000; ++i) xs.push_back(U(rng));
    for (uint32_t x : xs) {
      ++checked;
      if (sc.divide(x) != x / d) {
        if (wrong++ == 0) first = std::to_string(x) + " / " + std::to_string(d) + " gave " + std::to_string(sc.divide(x));
      }
    }
  }
  r.check(wrong == 0, "split_count.divide_exact", std::to_string(wrong) + " of " + std::to_string(checked) + " wrong" +
                                                      (wrong ? ", first: " + first : ""));
}

// The plans this device gets for the table of test_decode_plan.cc (fp16, head_dim 128, seq-major and
// per-slot): printed, to compare with the values frozen there (made with H200 occupancy numbers).
void print_plans() {
  static int32_t lengths[64];
  for (int64_t B : {1, 8, 32}) {
    for (int64_t S : {1024, 4096, 16384, 65536}) {
      for (int64_t Hkv : {32, 8}) {
        for (bool slot : {false, true}) {
          DecodeAttentionParams p;
          p.batch = B; p.q_len = 1; p.q_heads = 32; p.kv_heads = Hkv; p.head_dim = 128; p.kv_len = S;
          p.dtype = ScalarType::kFloat16;
          p.scale = 0.1f;
          p.q = reinterpret_cast<void*>(0x100000); p.out = reinterpret_cast<void*>(0x200000);
          p.k = reinterpret_cast<void*>(0x300000); p.v = reinterpret_cast<void*>(0x400000);
          const int64_t qs[4] = {32 * 128, 32 * 128, 128, 1}, seq[4] = {B * Hkv * 128, Hkv * 128, 128, 1},
                        per_slot[4] = {Hkv * 128, S * Hkv * 128, 128, 1};
          for (int i = 0; i < 4; ++i) {
            p.q_stride[i] = p.out_stride[i] = qs[i];
            p.k_stride[i] = p.v_stride[i] = slot ? per_slot[i] : seq[i];
          }
          if (slot) p.cache_seqlens = p.kv_batch_index = lengths;
          decode_plan::Plan plan;
          const Status st = decode_attention_cuda_plan(p, &plan);
          std::printf("info plan b%ld s%ld h32_%ld %s: %s rows_kernel %d mma %d warps %d splits %ld cluster %d "
                      "sm_exclusive %d workspace %zu\n", static_cast<long>(B), static_cast<long>(S),
                      static_cast<long>(Hkv), slot ? "slot" : "seq", st.ok() ? "ok" : st.to_string().c_str(),
                      plan.rows_kernel, plan.mma_kernel, plan.mma_warps, static_cast<long>(plan.splits), plan.cluster,
                      plan.mma_sm_exclusive, plan.workspace_bytes);
        }
      }
    }
  }
}

// Bandwidth: bytes of K+V read per call / time per call, K/V in SeqMajorCaches.
void bench(Report& r, cudaStream_t stream) {
  const int64_t H = 32, D = 128;
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  // Reference point: device-to-device copy of 2 GiB (read + write bytes / time).
  {
    const size_t n = size_t(1) << 30;
    DevBuf a(n), b(n);
    if (a.ptr && b.ptr) {
      cudaMemcpyAsync(b.ptr, a.ptr, n, cudaMemcpyDeviceToDevice, stream);
      cudaEventRecord(t0, stream);
      for (int i = 0; i < 10; ++i) cudaMemcpyAsync(b.ptr, a.ptr, n, cudaMemcpyDeviceToDevice, stream);
      cudaEventRecord(t1, stream);
      cudaEventSynchronize(t1);
      float ms = 0.f;
      cudaEventElapsedTime(&ms, t0, t1);
      std::printf("info bench d2d_copy 1 GiB: %.1f GB/s (read+write)\n", 2.0 * 10 * n / (ms * 1e-3) / 1e9);
    }
  }
  for (int64_t B : {1, 8}) {
    const int64_t max_s = 65536;
    const CacheShape shape{B, H, D, 2};
    std::shared_ptr<SeqMajorCache> kc, vc;
    if (!r.ok(SeqMajorCache::create(kGpu, shape, CacheConfig{max_s, 0}, &kc), "bench.create_k") ||
        !r.ok(SeqMajorCache::create(kGpu, shape, CacheConfig{max_s, 0}, &vc), "bench.create_v") ||
        !r.ok(kc->begin_append(0, max_s), "bench.map_k") ||
        !r.ok(vc->begin_append(0, max_s), "bench.map_v"))
      return;
    cudaMemsetAsync(kc->data(), 0, max_s * shape.token_bytes(), stream);  // defined values (zeros)
    cudaMemsetAsync(vc->data(), 0, max_s * shape.token_bytes(), stream);
    DevBuf dq(B * H * D * 2), dout(B * H * D * 2);
    cudaMemsetAsync(dq.ptr, 0, B * H * D * 2, stream);
    for (int64_t S : {1024, 4096, 16384, 65536}) {
      DecodeAttentionParams p;
      p.batch = B; p.q_len = 1; p.q_heads = H; p.kv_heads = H; p.head_dim = D; p.kv_len = S;
      p.dtype = ScalarType::kFloat16; p.scale = 1.f / std::sqrt(128.f);
      const int64_t qs[4] = {H * D, H * D, D, 1}, ks[4] = {B * H * D, H * D, D, 1};
      std::copy(qs, qs + 4, p.q_stride);
      std::copy(qs, qs + 4, p.out_stride);
      std::copy(ks, ks + 4, p.k_stride);
      std::copy(ks, ks + 4, p.v_stride);
      p.q = dq.ptr; p.k = kc->data(); p.v = vc->data(); p.out = dout.ptr;
      const size_t wsb = decode_attention_cuda_workspace_bytes(p);
      DevBuf ws(wsb);
      p.workspace = ws.ptr; p.workspace_bytes = wsb;
      const std::string name = "bench.b" + std::to_string(B) + ".s" + std::to_string(S);
      if (!r.ok(decode_attention_cuda(p, stream), name + ".warmup")) continue;
      const int iters = S >= 16384 ? 50 : 200;
      cudaEventRecord(t0, stream);
      for (int i = 0; i < iters; ++i) decode_attention_cuda(p, stream);
      cudaEventRecord(t1, stream);
      const cudaError_t e = cudaEventSynchronize(t1);
      if (!r.check(e == cudaSuccess, name + ".run", cudaGetErrorString(e))) continue;
      float ms = 0.f;
      cudaEventElapsedTime(&ms, t0, t1);
      const double us = 1e3 * ms / iters;
      const double bytes = 2.0 * B * S * H * D * 2;
      std::printf("info bench fp16 B=%lld S=%lld H=32 D=128: %.1f us/call, K+V %.1f MiB, %.1f GB/s, splits ws %zu B\n",
                  static_cast<long long>(B), static_cast<long long>(S), us, bytes / (1 << 20), bytes / (us * 1e-6) / 1e9,
                  wsb);
    }
    kc->remove_view(max_s);
    vc->remove_view(max_s);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  g_families_only = mode == "--families-only";
  const bool balanced_only = mode == "--balanced-only", merge_only = mode == "--merge-only";
  const bool run_tests = mode != "--bench-only" && !balanced_only && !merge_only;
  const bool run_bench = mode != "--no-bench" && !g_families_only && !balanced_only && !merge_only;
  Report r;
  cudaDeviceProp prop;
  if (!r.check(cudaGetDeviceProperties(&prop, 0) == cudaSuccess, "runtime.device")) return r.finish();
  std::printf("info device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  std::mt19937 rng(7);
  if (balanced_only) {  // the balanced cases, then every per-slot case with balanced splits forced
    test_balanced(r, rng, stream);
    g_mode = "balance4.";
    g_options.balance = 4;
    test_varlen(r, rng, stream);
    return r.finish();
  }
  if (merge_only) {  // the two merge kernels, each forced, over many splits and few, and the plan's own choice
    struct Pass {
      const char* prefix; int64_t splits; int wide; int balance;
    };
    for (const Pass& m : {Pass{"merge_wide.", 0, 1, 0}, Pass{"merge_wide.splits100.", 100, 1, 0},
                          Pass{"merge_rows.splits100.", 100, -1, 0}, Pass{"splits100.", 100, 0, 0},
                          Pass{"merge_wide.balance4.", 0, 1, 4}}) {
      g_mode = m.prefix;
      g_options = DecodeOptions{};
      g_options.no_cluster = true;  // every split through the workspace and a merge kernel
      g_options.splits = m.splits;
      g_options.merge_wide = m.wide;
      g_options.balance = m.balance;
      g_check_plans = m.splits == 0;
      const int64_t wide0 = g_wide_merges, rows0 = g_row_merges, warp0 = g_warp_merges;
      if (m.balance == 0) {  // balanced grids take per-slot cases only, and refuse the row-owning kernel forced
        test_matrix(r, rng, stream);
        test_mma_families(r, rng, stream);
      }
      test_varlen(r, rng, stream);
      // The pass ran the kernel it is for: forced wide, forced not, or (100 splits) the plan's wide choice.
      const int64_t wide = g_wide_merges - wide0, rows = g_row_merges - rows0;
      const bool ran = m.wide > 0 ? wide > 0 && rows == 0 : m.wide < 0 ? wide == 0 && rows > 0 : wide > 0;
      r.check(ran, std::string(m.prefix) + "merge_kernel_ran",
              "wide " + std::to_string(wide) + ", row " + std::to_string(rows));
      // Row merges of 256+ rows at head dims 64-128 take the warp kernel: the forced row pass must include some.
      const int64_t warp = g_warp_merges - warp0;
      if (m.wide < 0) r.check(warp > 0 && warp < rows, std::string(m.prefix) + "warp_merge_ran",
                              "warp " + std::to_string(warp) + " of " + std::to_string(rows) + " row merges");
      std::printf("info %smerges: wide %lld, row %lld (warp kernel %lld)\n", m.prefix, static_cast<long long>(wide),
                  static_cast<long long>(rows), static_cast<long long>(warp));
    }
    return r.finish();
  }
  if (run_tests) {
    // Passes over the same cases, one per way the splits are finished and per block size of the
    // tensor-core kernel: the plan's own choice (clusters on Hopper where the splits fit one), the
    // workspace and merge kernel only (no_cluster), 3 forced splits (an odd cluster, also for the short
    // cases), and blocks of 4 and of 8 warps forced (mma_warps), the latter also through the workspace;
    // then the plan's own choice with its inputs written late by the kernel ahead (g_late_inputs: each
    // kernel waits for that one before reading).
    struct Mode {
      const char* prefix; bool no_cluster; int64_t splits; int warps; bool late = false;
    };
    for (const Mode& m : {Mode{"", false, 0, 0}, Mode{"no_cluster.", true, 0, 0}, Mode{"splits3.", false, 3, 0},
                          Mode{"warps4.", false, 0, 4}, Mode{"warps8.", false, 0, 8},
                          Mode{"warps8.no_cluster.", true, 0, 8}, Mode{"late_inputs.", false, 0, 0, true},
                          Mode{"late_inputs.no_cluster.", true, 0, 0, true}}) {
      g_mode = m.prefix;
      g_late_inputs = m.late;
      g_options = DecodeOptions{};
      g_options.no_cluster = m.no_cluster;
      g_options.splits = m.splits;
      g_options.mma_warps = m.warps;
      if (g_families_only) {
        test_mma_families(r, rng, stream);
        test_varlen(r, rng, stream);
        break;  // the plan's own pass only
      }
      test_matrix(r, rng, stream);
      test_variants(r, rng, stream);
      test_mma_families(r, rng, stream);
      test_varlen(r, rng, stream);
    }
    // The family and per-slot cases on the key-slice kernel's instances of 32 keys a warp (DecodeOptions::mma_warp_keys;
    // the row-owning cases keep theirs): through the plan's own finish and through the workspace; each instance must
    // have run.
    for (const bool no_cluster : {false, true}) {
      g_options = DecodeOptions{};
      g_options.mma_warp_keys = 32;
      g_options.no_cluster = no_cluster;
      g_mode = no_cluster ? "warp_keys32.no_cluster." : "warp_keys32.";
      g_late_inputs = false;
      test_mma_families(r, rng, stream);
      test_varlen(r, rng, stream);
    }
    for (int i = 0; i < 5; ++i) {
      static const char* const kNames[] = {"d64_tiles1", "d64_tiles2", "d80_tiles2", "d96_tiles2", "d128_tiles2"};
      r.check(g_warp_keys32[i] > 0, std::string("warp_keys32.ran_") + kNames[i], std::to_string(g_warp_keys32[i]) + " calls");
    }
    // The same family cases with a misaligned output: finish_block's element-by-element writes (every pass
    // above writes whole 16-byte pieces where the rows end in their blocks).
    g_options = DecodeOptions{};
    g_mode = "out_offset.";
    g_late_inputs = false;
    g_out_offset = 1;
    test_mma_families(r, rng, stream);
    g_out_offset = 0;
    if (g_families_only) return r.finish();
    g_options = DecodeOptions{};
    g_mode.clear();
    g_late_inputs = false;
    test_balanced(r, rng, stream);
    test_in_cache(r, rng, stream);
    test_errors(r);
    test_split_count(r, rng);
  }
  print_plans();
  if (run_bench) bench(r, stream);
  cudaStreamDestroy(stream);
  const MemoryStats s = memory_stats(kGpu);
  r.eq(s.mapped_bytes, 0, "end.mapped_bytes_zero");
  return r.finish();
}

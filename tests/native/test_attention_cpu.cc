// Native test of decode_attention_cpu on the host backend against the float64 reference in
// attention_reference.h: fixed-length and variable-length (packed queries, slot permutations,
// per-slot lengths, a slot at length 0 with new tokens), the lse output, entries past kv_mapped
// (zeros, lse -inf, error_flag; the test makes their memory PROT_NONE, so a read would fault), long contexts
// across many key tiles and threads, every dtype, and the refused inputs (nothing written).
// Usage: test_attention_cpu. Prints PASS/FAIL lines and "N passed, M failed".
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "attention_reference.h"
#include "core/apis.h"
#include "harness.h"
#include "kernels/decode_attention.h"

using namespace pvt;
using pvt_test::AttentionProblem;
using pvt_test::Elem;
using pvt_test::Report;

namespace {

ScalarType scalar(Elem e) {
  return e == Elem::kF32 ? ScalarType::kFloat32 : e == Elem::kF16 ? ScalarType::kFloat16 : ScalarType::kBFloat16;
}
const char* name(Elem e) { return e == Elem::kF32 ? "f32" : e == Elem::kF16 ? "f16" : "bf16"; }
double tolerance(Elem e) { return e == Elem::kF32 ? 2e-5 : e == Elem::kF16 ? 2e-3 : 1.6e-2; }

// How the entries of one call are described to the kernel.
struct Layout {
  std::vector<int32_t> q_counts;       // per entry; empty: every entry has q_len queries (fixed)
  std::vector<int32_t> slots;          // kv_batch_index; empty: entry b reads row b
  std::vector<int32_t> cache_seqlens;  // per cache row; empty: every entry sees kv_len keys
  std::vector<int32_t> mapped;         // kv_mapped per cache row; empty: not given
  int64_t cache_rows = 0;
  int64_t q_len = 0;                   // fixed query count or the bound
  int64_t kv_len = 0;                  // keys (fixed) or the bound
};

struct Shape {
  int64_t Hq, Hkv, D;
};

// Fills `prob` (float values) for `lay` and returns the kernel's entries-per-call sizes.
void build_problem(const Layout& lay, const Shape& sh, Elem e, std::mt19937& rng, AttentionProblem* prob) {
  const int64_t B = lay.q_counts.empty() ? static_cast<int64_t>(lay.cache_rows) : int64_t(lay.q_counts.size());
  prob->Hq = sh.Hq; prob->Hkv = sh.Hkv; prob->D = sh.D;
  prob->cache_rows = lay.cache_rows;
  prob->scale = 1.f / std::sqrt(float(sh.D));
  int64_t row = 0, cap = lay.kv_len;
  prob->first.clear(); prob->q_count.clear(); prob->slot.clear(); prob->kv_count.clear();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t qc = lay.q_counts.empty() ? lay.q_len : lay.q_counts[b];
    const int64_t slot = lay.slots.empty() ? b : lay.slots[b];
    prob->first.push_back(row);
    prob->q_count.push_back(qc);
    prob->slot.push_back(slot);
    prob->kv_count.push_back(lay.cache_seqlens.empty() ? lay.kv_len : lay.cache_seqlens[slot] + qc);
    row += qc;
  }
  prob->cap = cap;
  prob->mapped.assign(lay.mapped.begin(), lay.mapped.end());
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  prob->q.resize(static_cast<size_t>(row * sh.Hq * sh.D));
  for (float& x : prob->q) x = pvt_test::round_to(e, 2.f * u(rng));
  const size_t kv_elems = static_cast<size_t>(cap * lay.cache_rows * sh.Hkv * sh.D);
  prob->k.resize(kv_elems);
  prob->v.resize(kv_elems);
  for (float& x : prob->k) x = pvt_test::round_to(e, u(rng));
  for (float& x : prob->v) x = pvt_test::round_to(e, u(rng));
}

// Kernel params over packed buffers: q/out [rows, Hq, D] (or [B, Tq, Hq, D] when fixed), K/V at kbuf/vbuf.
struct Call {
  DecodeAttentionParams p;
  std::vector<uint8_t> q, out;
  std::vector<float> lse;
  std::vector<int32_t> cu;
  int32_t flag = 0;
};

void make_call(const Layout& lay, const Shape& sh, Elem e, const AttentionProblem& prob, const void* kbuf,
               const void* vbuf, Call* c) {
  const int64_t B = static_cast<int64_t>(prob.first.size());
  const int64_t rows = prob.first.back() + prob.q_count.back();
  c->q.assign(static_cast<size_t>(rows * sh.Hq * sh.D * elem_size(e)), 0);
  for (size_t i = 0; i < prob.q.size(); ++i) pvt_test::put(&c->q, int64_t(i), e, prob.q[i]);
  c->out.assign(static_cast<size_t>(rows * sh.Hq * sh.D * elem_size(e)), 0xAB);  // poison
  c->lse.assign(static_cast<size_t>(rows * sh.Hq), 12345.f);
  c->flag = 0;
  DecodeAttentionParams& p = c->p;
  p = DecodeAttentionParams();
  p.batch = B;
  p.q_len = lay.q_len;
  p.q_heads = sh.Hq;
  p.kv_heads = sh.Hkv;
  p.head_dim = sh.D;
  p.kv_len = lay.kv_len;
  p.dtype = scalar(e);
  p.scale = prob.scale;
  p.q = c->q.data();
  p.out = c->out.data();
  const int64_t row_stride = sh.Hq * sh.D;
  const int64_t qs[4] = {lay.q_len * row_stride, row_stride, sh.D, 1};
  std::copy(qs, qs + 4, p.q_stride);
  std::copy(qs, qs + 4, p.out_stride);
  p.k = kbuf;
  p.v = vbuf;
  const int64_t ks[4] = {lay.cache_rows * sh.Hkv * sh.D, sh.Hkv * sh.D, sh.D, 1};
  std::copy(ks, ks + 4, p.k_stride);
  std::copy(ks, ks + 4, p.v_stride);
  if (!lay.q_counts.empty()) {
    c->cu.assign(1, 0);
    for (int32_t n : lay.q_counts) c->cu.push_back(c->cu.back() + n);
    p.cu_seqlens_q = c->cu.data();
  }
  if (!lay.slots.empty()) p.kv_batch_index = lay.slots.data();
  if (!lay.cache_seqlens.empty()) p.cache_seqlens = lay.cache_seqlens.data();
  if (!lay.mapped.empty()) {
    p.kv_mapped = lay.mapped.data();
    p.error_flag = &c->flag;
  }
  p.lse = c->lse.data();
}

// Compares out/lse/error_flag with the reference; `why` names the first mismatch.
bool matches(const Call& c, const AttentionProblem& prob, Elem e, std::string* why) {
  std::vector<double> want, want_lse;
  const bool refused = pvt_test::reference_attention(prob, &want, &want_lse);
  if (c.p.error_flag != nullptr && (c.flag != 0) != refused) {
    *why = "error_flag " + std::to_string(c.flag) + ", want " + std::to_string(refused);
    return false;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = pvt_test::get(c.out.data(), int64_t(i), e);
    if (!(std::fabs(got - want[i]) <= tolerance(e))) {
      *why = "out[" + std::to_string(i) + "]=" + std::to_string(got) + ", want " + std::to_string(want[i]);
      return false;
    }
  }
  for (size_t i = 0; i < want_lse.size(); ++i) {
    const double got = c.lse[i];
    const bool ok = std::isinf(want_lse[i]) ? (std::isinf(got) && got < 0)
                                            : std::fabs(got - want_lse[i]) <= 1e-4 * (1 + std::fabs(want_lse[i]));
    if (!ok) {
      *why = "lse[" + std::to_string(i) + "]=" + std::to_string(got) + ", want " + std::to_string(want_lse[i]);
      return false;
    }
  }
  return true;
}

// One call with K/V in plain host buffers.
void run_plain(Report& r, const std::string& label, const Layout& lay, const Shape& sh, Elem e, uint32_t seed) {
  std::mt19937 rng(seed);
  AttentionProblem prob;
  build_problem(lay, sh, e, rng, &prob);
  std::vector<uint8_t> kb(prob.k.size() * elem_size(e)), vb(prob.v.size() * elem_size(e));
  for (size_t i = 0; i < prob.k.size(); ++i) {
    pvt_test::put(&kb, int64_t(i), e, prob.k[i]);
    pvt_test::put(&vb, int64_t(i), e, prob.v[i]);
  }
  Call c;
  make_call(lay, sh, e, prob, kb.data(), vb.data(), &c);
  const std::string n = std::string("attn.") + label + "." + name(e);
  if (!r.ok(decode_attention_cpu(c.p), n + ".status")) return;
  std::string why;
  r.check(matches(c, prob, e, &why), n, why);
}

void test_fixed(Report& r) {
  for (Elem e : {Elem::kF32, Elem::kF16, Elem::kBF16}) {
    // B=2 MHA decode, GQA with Tq=3 (causal), MQA, an odd head dim.
    run_plain(r, "fixed_mha", Layout{{}, {}, {}, {}, 2, 1, 37}, Shape{4, 4, 64}, e, 1);
    run_plain(r, "fixed_gqa_tq3", Layout{{}, {}, {}, {}, 3, 3, 200}, Shape{8, 2, 128}, e, 2);
    run_plain(r, "fixed_mqa", Layout{{}, {}, {}, {}, 1, 2, 5}, Shape{4, 1, 32}, e, 3);
    run_plain(r, "fixed_d40", Layout{{}, {}, {}, {}, 2, 1, 70}, Shape{2, 2, 40}, e, 4);
  }
  // Long context: many key tiles, split across threads and merged.
  run_plain(r, "fixed_long", Layout{{}, {}, {}, {}, 1, 2, 5000}, Shape{4, 2, 64}, Elem::kF32, 5);
}

void test_varlen(Report& r) {
  for (Elem e : {Elem::kF32, Elem::kF16, Elem::kBF16}) {
    // Query counts [1, 1, 3, 1]; slots permuted; slot 2 at length 0 with three new tokens.
    Layout lay{{1, 1, 3, 1}, {3, 0, 2, 1}, {50, 7, 0, 120}, {}, 4, 3, 130};
    run_plain(r, "varlen_mix", lay, Shape{8, 2, 64}, e, 10);
    // Fewer entries than slots, one slot read twice, a zero-query entry.
    Layout few{{2, 0, 1}, {1, 3, 1}, {9, 30, 4, 0}, {}, 4, 2, 40};
    run_plain(r, "varlen_subset", few, Shape{4, 4, 32}, e, 11);
  }
  // Only cache_seqlens (fixed Tq): flash-attn's decode call.
  run_plain(r, "varlen_seqlens_only", Layout{{}, {}, {100, 3, 0}, {}, 3, 1, 101}, Shape{4, 2, 64}, Elem::kF32, 12);
  // Only kv_batch_index: a permuted batch with kv_len keys each.
  run_plain(r, "varlen_index_only", Layout{{}, {2, 0, 1}, {}, {}, 3, 1, 33}, Shape{4, 2, 64}, Elem::kF32, 13);
  // Only packed queries: every entry sees kv_len keys, its last query sees them all.
  run_plain(r, "varlen_packed_only", Layout{{2, 1, 3}, {}, {}, {}, 3, 3, 20}, Shape{4, 2, 64}, Elem::kF32, 14);
  // Long varlen: thousands of keys per slot, different lengths.
  run_plain(r, "varlen_long", Layout{{1, 2, 1}, {1, 2, 0}, {3000, 4100, 1}, {}, 3, 2, 4200}, Shape{4, 2, 64},
            Elem::kF32, 15);
}

// K/V in SeqMajorCaches whose memory past `mapped` tokens is made PROT_NONE here (the host backend
// leaves reserved memory readable as zeros): an entry reaching past kv_mapped must be refused without
// a read (a read would fault), the others computed.
void test_mapped(Report& r) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const Shape sh{4, 2, 128};  // a token row of 4 slots x 2 heads x 128 x 4 bytes = 4096 bytes
  const CacheShape cs{4, sh.Hkv, sh.D, 4};
  if (int64_t(page) != cs.token_bytes()) {
    r.check(true, "attn.mapped (skipped: page size is not 4096)");
    return;
  }
  std::shared_ptr<SeqMajorCache> kc, vc;
  if (!r.ok(SeqMajorCache::create(Device::host(), cs, CacheConfig{256, page}, &kc), "attn.mapped.create_k")) return;
  if (!r.ok(SeqMajorCache::create(Device::host(), cs, CacheConfig{256, page}, &vc), "attn.mapped.create_v")) return;
  const int64_t mapped = 60;
  if (!r.ok(kc->reserve_tokens(mapped), "attn.mapped.reserve_k")) return;
  if (!r.ok(vc->reserve_tokens(mapped), "attn.mapped.reserve_v")) return;
  const size_t past = static_cast<size_t>((256 - mapped) * cs.token_bytes());
  for (const auto& c : {kc, vc}) {
    if (mprotect(static_cast<char*>(c->data()) + mapped * cs.token_bytes(), past, PROT_NONE) != 0) {
      r.check(false, "attn.mapped.mprotect", std::strerror(errno));
      return;
    }
  }
  // Entry 1 (slot 0) needs 59 + 3 = 62 > 60 tokens, entry 3 (slot 2) 70 + 1; the others fit.
  Layout lay{{1, 3, 1, 1}, {1, 0, 3, 2}, {59, 58, 70, 20}, {mapped, mapped, mapped, mapped}, 4, 3, 200};
  std::mt19937 rng(20);
  AttentionProblem prob;
  build_problem(lay, sh, Elem::kF32, rng, &prob);
  // Copy the mapped prefix only; the reference never looks past a refused entry either.
  std::memcpy(kc->data(), prob.k.data(), static_cast<size_t>(mapped * cs.token_bytes()));
  std::memcpy(vc->data(), prob.v.data(), static_cast<size_t>(mapped * cs.token_bytes()));
  Call c;
  make_call(lay, sh, Elem::kF32, prob, kc->data(), vc->data(), &c);
  if (!r.ok(decode_attention_cpu(c.p), "attn.mapped.status")) return;
  std::string why;
  r.check(matches(c, prob, Elem::kF32, &why), "attn.mapped.values_zeros_lse", why);
  r.eq(c.flag, 1, "attn.mapped.error_flag_set");
  // All entries within the mapped tokens: the flag stays as it was.
  Layout fits = lay;
  fits.cache_seqlens = {57, 50, 40, 20};
  build_problem(fits, sh, Elem::kF32, rng, &prob);
  std::memcpy(kc->data(), prob.k.data(), static_cast<size_t>(mapped * cs.token_bytes()));
  std::memcpy(vc->data(), prob.v.data(), static_cast<size_t>(mapped * cs.token_bytes()));
  make_call(fits, sh, Elem::kF32, prob, kc->data(), vc->data(), &c);
  if (!r.ok(decode_attention_cpu(c.p), "attn.mapped_fits.status")) return;
  r.check(matches(c, prob, Elem::kF32, &why), "attn.mapped_fits.values", why);
  r.eq(c.flag, 0, "attn.mapped_fits.error_flag_clear");
}

// Bad inputs: a typed error naming the problem, and out/lse untouched.
void test_errors(Report& r) {
  std::mt19937 rng(30);
  const Shape sh{4, 2, 32};
  Layout lay{{1, 2}, {1, 0}, {5, 3}, {}, 2, 2, 10};
  AttentionProblem prob;
  build_problem(lay, sh, Elem::kF32, rng, &prob);
  std::vector<uint8_t> kb(prob.k.size() * 4), vb(prob.v.size() * 4);
  auto expect_refused = [&](const Layout& l, const std::string& label, auto&& tweak) {
    Call c;
    make_call(l, sh, Elem::kF32, prob, kb.data(), vb.data(), &c);
    tweak(c.p);
    const std::vector<uint8_t> out_before = c.out;
    const std::vector<float> lse_before = c.lse;
    const Status s = decode_attention_cpu(c.p);
    r.code(s, Code::kInvalidArgument, "attn.error." + label);
    r.check(c.out == out_before && c.lse == lse_before, "attn.error." + label + ".nothing_written");
  };
  const uint8_t mask_byte = 1;
  expect_refused(lay, "mask_with_varlen", [&](DecodeAttentionParams& p) {
    p.mask = &mask_byte;
  });
  Layout too_long = lay;
  too_long.cache_seqlens = {5, 9};  // slot 1 (entry 0): 9 + 1 = 10 ok; slot 0 (entry 1): 5 + 2 ok ...
  too_long.kv_len = 9;              // ... but kv_len 9 < 10
  expect_refused(too_long, "kv_len_bounds_entries", [](DecodeAttentionParams&) {});
  Layout neg = lay;
  neg.cache_seqlens = {5, -1};
  expect_refused(neg, "negative_seqlen", [](DecodeAttentionParams&) {});
  Layout bad_slot = lay;
  bad_slot.slots = {1, -2};
  expect_refused(bad_slot, "negative_slot", [](DecodeAttentionParams&) {});
  Layout over_q = lay;
  over_q.q_counts = {1, 3};  // above q_len = 2
  expect_refused(over_q, "query_count_over_q_len", [](DecodeAttentionParams&) {});
  Layout packed = lay;
  packed.cache_seqlens = {};
  packed.q_counts = {1, 2};
  packed.kv_len = 1;  // entry 1 has 2 queries but only 1 key
  expect_refused(packed, "fewer_keys_than_queries", [](DecodeAttentionParams&) {});
}

}  // namespace

int main() {
  Report r;
  test_fixed(r);
  test_varlen(r);
  test_mapped(r);
  test_errors(r);
  return r.finish();
}

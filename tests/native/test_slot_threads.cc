// Threads on one slot cache pair (issue 25): attention on slots 0 and 1 in two threads while a third
// reserves and releases them and a fourth reads the bookkeeping. Each attender does what the
// slot-attention op does on the CPU (vtensor_slot_attention.cc): hold the caches (SlotCacheHold),
// read mapped_tokens, refuse a slot that is not mapped, else append its new K/V rows and attend.
// Every V row it writes holds one value c, so its output must be exactly c (softmax weights sum to
// one): a torn read or a write into a released slot shows as a wrong value, a fault, or (built with
// -fsanitize=thread: test_slot_threads_tsan) a data race report.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/apis.h"
#include "harness.h"
#include "kernels/append_varlen.h"
#include "kernels/decode_attention.h"

using namespace pvt;
using pvt_test::Report;

namespace {

// 100 rows x 64 bytes per slot: slot 1's first rows share a page with slot 0's last ones, so a
// release of one slot runs next to the other slot's reads and writes in the same chunk.
constexpr int64_t kSlots = 3, kMaxSeqLen = 100, kHeads = 2, kHeadDim = 8, kRows = 60;
constexpr size_t kPage = 4096;

struct Counts {
  std::atomic<int64_t> attended{0}, refused{0}, wrong{0}, failed{0};
};

// One op call on `slot`: kRows new tokens at position 0, causal attention over them.
void attend_once(SlotCache& k, SlotCache& v, int32_t slot, float c, Counts& counts) {
  const int64_t row = kHeads * kHeadDim;
  std::vector<float> q(kRows * row, 0.25f), k_new(kRows * row, 0.5f), v_new(kRows * row, c), out(kRows * row, -1.f);
  const int32_t cu[2] = {0, static_cast<int32_t>(kRows)};
  std::vector<int32_t> lens(kSlots, 0), mapped(kSlots, 0);
  SlotCacheHold hold(k, &v);
  for (int64_t s = 0; s < kSlots; ++s) mapped[s] = std::min(k.mapped_tokens(s), v.mapped_tokens(s));
  if (mapped[slot] < kRows) {  // the op's check: not reserved (or released meanwhile) -> refuse
    ++counts.refused;
    return;
  }
  const int64_t stride[3] = {kMaxSeqLen * row, row, kHeadDim};  // (slot, token, head), elements
  AppendVarlenParams ap;
  ap.src = k_new.data();
  ap.num_seqs = 1;
  ap.total_tokens = kRows;
  ap.heads = kHeads;
  ap.head_dim = kHeadDim;
  ap.elem_bytes = 4;
  ap.num_slots = kSlots;
  ap.max_seq_len = kMaxSeqLen;
  std::copy(stride, stride + 3, ap.dst_stride);
  ap.src_stride[0] = row;
  ap.src_stride[1] = kHeadDim;
  ap.cu_seqlens = cu;
  ap.slot_ids = &slot;
  ap.cache_seqlens = lens.data();
  ap.kv_mapped = mapped.data();
  int32_t flag = 0;
  ap.error_flag = &flag;
  ap.dst = k.data();
  bool ok = append_varlen_cpu(ap).ok();
  ap.dst = v.data();
  ap.src = v_new.data();
  ok = ok && append_varlen_cpu(ap).ok();

  DecodeAttentionParams p;
  p.batch = 1;
  p.q_len = kRows;
  p.q_heads = kHeads;
  p.kv_heads = kHeads;
  p.head_dim = kHeadDim;
  p.kv_len = kRows;
  p.scale = 0.3f;
  p.q = q.data();
  p.out = out.data();
  p.k = k.data();
  p.v = v.data();
  const int64_t qs[4] = {0, row, kHeadDim, 1};
  const int64_t ks[4] = {stride[1], stride[0], stride[2], 1};
  std::copy(qs, qs + 4, p.q_stride);
  std::copy(qs, qs + 4, p.out_stride);
  std::copy(ks, ks + 4, p.k_stride);
  std::copy(ks, ks + 4, p.v_stride);
  p.cu_seqlens_q = cu;
  p.kv_batch_index = &slot;
  p.cache_seqlens = lens.data();
  p.kv_mapped = mapped.data();
  p.error_flag = &flag;
  ok = ok && decode_attention_cpu(p).ok();
  if (!ok || flag != 0) {
    ++counts.failed;
    return;
  }
  ++counts.attended;
  for (float x : out) {
    if (std::fabs(x - c) > 1e-4f * std::max(1.f, std::fabs(c))) {
      ++counts.wrong;
      return;
    }
  }
}

void test_concurrent_reserve_release_attend(Report& r, int iterations) {
  std::shared_ptr<SlotCache> k, v;
  const SlotCacheShape shape{kSlots, kMaxSeqLen, kHeads * kHeadDim * 4};
  if (!r.ok(SlotCache::create(Device::host(), shape, kPage, &k), "threads create k") ||
      !r.ok(SlotCache::create(Device::host(), shape, kPage, &v), "threads create v")) {
    return;
  }
  Counts counts[2];
  std::atomic<bool> stop{false};
  std::atomic<int64_t> churn_errors{0}, reads{0};
  std::vector<std::thread> threads;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int32_t slot = 0; slot < 2; ++slot) {
    threads.emplace_back([&, slot] {  // until `iterations` calls found the slot mapped
      for (int i = 0; counts[slot].attended < iterations && std::chrono::steady_clock::now() < deadline; ++i) {
        attend_once(*k, *v, slot, static_cast<float>(i % 97 + slot), counts[slot]);
        std::this_thread::yield();
      }
    });
  }
  threads.emplace_back([&] {  // reserve / release slots 0 and 1 (both caches) until the attenders end
    for (int i = 0; !stop.load(); ++i) {
      const int64_t slot = i % 2;
      for (SlotCache* c : {k.get(), v.get()}) churn_errors += !c->reserve(slot, kRows + i % 7, nullptr).ok();
      // Mapped for about an attention call's time, so calls land before, during and after release.
      std::this_thread::sleep_for(std::chrono::microseconds(i % 50));
      for (SlotCache* c : {k.get(), v.get()}) churn_errors += !c->release(slot, nullptr).ok();
    }
  });
  threads.emplace_back([&] {  // the bookkeeping readers Python calls (slot_info)
    while (!stop.load()) {
      uint64_t version = 0;
      reads += static_cast<int64_t>(k->mapped_tokens_all(&version).size()) + (k->mapped_bytes() > 0);
    }
  });
  threads[0].join();
  threads[1].join();
  stop = true;
  threads[2].join();
  threads[3].join();
  for (int slot = 0; slot < 2; ++slot) {
    const Counts& c = counts[slot];
    std::printf("slot %d: %lld attended, %lld refused (not reserved at the time)\n", slot,
                static_cast<long long>(c.attended.load()), static_cast<long long>(c.refused.load()));
    const std::string s = "threads slot " + std::to_string(slot);
    r.eq(c.wrong.load(), 0, s + " every output equals its V value");
    r.eq(c.failed.load(), 0, s + " no kernel refused a held, checked slot");
    r.eq(c.attended.load(), iterations, s + " attended the asked number of times within 60 s");
  }
  r.eq(churn_errors.load(), 0, "threads reserve/release never fail");
  for (SlotCache* c : {k.get(), v.get()}) {
    for (int64_t s = 0; s < kSlots; ++s) r.ok(c->release(s, nullptr), "threads final release");
  }
  r.eq(k->mapped_bytes() + v->mapped_bytes(), 0, "threads everything unmapped at the end");
}

}  // namespace

int main(int argc, char** argv) {
  Report r;
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  test_concurrent_reserve_release_attend(r, iterations);
  return r.finish();
}

// Native test of the slot cache on the host backend: per-slot mapping, border chunks shared by two
// slots, release, bad slots and lengths, the mapped limit (all or nothing), and the varlen append
// kernel against an independent element-by-element reference (including refused sequences).
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/apis.h"
#include "harness.h"
#include "kernels/append_varlen.h"

using namespace pvt;
using pvt_test::Report;

namespace {

bool pvt_test_first_diff_ok(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) { return a == b; }

constexpr size_t kPage = 4096;

void test_mapping(Report& r) {
  // 100 rows x 64 bytes = 6400 bytes per slot: slot borders fall inside pages.
  std::shared_ptr<SlotCache> c;
  if (!r.ok(SlotCache::create(Device::host(), {3, 100, 64}, kPage, &c), "slot create")) return;
  r.eq(c->mapped_bytes(), 0, "slot nothing mapped at first");
  r.ok(c->reserve(0, 100, nullptr), "slot reserve 0 full");
  r.eq(c->mapped_bytes(), 2 * kPage, "slot 0 maps two pages");
  r.ok(c->reserve(1, 10, nullptr), "slot reserve 1 inside the shared page");
  r.eq(c->mapped_bytes(), 2 * kPage, "slot 1's first rows share slot 0's last page");
  r.ok(c->reserve(1, 5, nullptr), "slot reserve shorter is a no-op");
  r.eq(c->mapped_tokens(1), 10, "slot reserve never lowers mapped_tokens");
  std::memset(c->data() + 100 * 64, 0x5a, 10 * 64);  // slot 1's rows
  r.ok(c->release(0, nullptr), "slot release 0");
  r.eq(c->mapped_bytes(), kPage, "slot release keeps the page slot 1 needs");
  r.eq(c->mapped_tokens(0), 0, "slot released has no mapped tokens");
  bool intact = true;
  for (int i = 0; i < 10 * 64; ++i) intact &= static_cast<uint8_t>(c->data()[100 * 64 + i]) == 0x5a;
  r.check(intact, "slot neighbour's data survives a release");
  r.code(c->reserve(3, 1, nullptr), Code::kInvalidArgument, "slot reserve bad slot");
  r.code(c->reserve(1, 101, nullptr), Code::kOutOfRange, "slot reserve past max_seq_len");
  r.code(c->release(-1, nullptr), Code::kInvalidArgument, "slot release bad slot");
  r.ok(c->release(1, nullptr), "slot release 1");
  r.eq(c->mapped_bytes(), 0, "slot everything released");
  r.code(SlotCache::create(Device::host(), {0, 100, 64}, kPage, &c), Code::kInvalidArgument, "slot create empty");
}

void test_limit(Report& r) {
  std::shared_ptr<SlotCache> c;
  if (!r.ok(SlotCache::create(Device::host(), {2, 1024, 64}, kPage, &c), "slot limit create")) return;
  r.ok(c->reserve(0, 10, nullptr), "slot limit first reserve");
  const int64_t before = memory_stats(Device::host()).mapped_bytes;
  set_mapped_limit(Device::host(), before + 2 * static_cast<int64_t>(kPage));
  r.code(c->reserve(1, 1024, nullptr), Code::kOutOfMemory, "slot reserve past the mapped limit");
  r.eq(memory_stats(Device::host()).mapped_bytes, before, "slot failed reserve maps nothing");
  r.eq(c->mapped_tokens(1), 0, "slot failed reserve leaves mapped_tokens");
  set_mapped_limit(Device::host(), 0);
}

// Independent reference: dst rows of slot s at cache_seqlens[s] + t <- src rows cu[b] + t.
void test_append_varlen(Report& r) {
  const int64_t slots = 5, S = 12, H = 3, D = 5, eb = 2;
  std::vector<uint8_t> cache(static_cast<size_t>(slots * S * H * D * eb), 0), want = cache;
  const std::vector<int32_t> cu = {0, 1, 4, 5, 9}, slot_ids = {2, 0, 4, 3};
  std::vector<int32_t> lens = {3, 0, 11, 0, 8}, mapped = {12, 0, 12, 4, 8};  // slot 4 lacks 1 row
  std::vector<uint8_t> src(static_cast<size_t>(9 * H * D * eb));
  std::mt19937 rng(3);
  for (auto& x : src) x = static_cast<uint8_t>(rng());
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    const int32_t s = slot_ids[b];
    if (lens[s] + cu[b + 1] - cu[b] > mapped[s]) continue;  // refused: nothing written
    for (int32_t t = 0; t < cu[b + 1] - cu[b]; ++t)
      std::memcpy(want.data() + ((s * S + lens[s] + t) * H * D) * eb, src.data() + (cu[b] + t) * H * D * eb,
                  static_cast<size_t>(H * D * eb));
  }
  int32_t flag = 0;
  AppendVarlenParams p;
  p.dst = cache.data();
  p.src = src.data();
  p.num_seqs = 4;
  p.total_tokens = 9;
  p.heads = H;
  p.head_dim = D;
  p.elem_bytes = eb;
  p.num_slots = slots;
  p.max_seq_len = S;
  p.dst_stride[0] = S * H * D; p.dst_stride[1] = H * D; p.dst_stride[2] = D;
  p.src_stride[0] = H * D; p.src_stride[1] = D;
  p.cu_seqlens = cu.data();
  p.slot_ids = slot_ids.data();
  p.cache_seqlens = lens.data();
  p.kv_mapped = mapped.data();
  p.error_flag = &flag;
  r.ok(append_varlen_cpu(p), "append_varlen cpu");
  r.check(pvt_test_first_diff_ok(cache, want), "append_varlen cpu matches the reference");
  r.eq(flag, 1, "append_varlen flags the unmapped sequence");
  p.elem_bytes = 3;
  r.code(append_varlen_cpu(p), Code::kInvalidArgument, "append_varlen bad element size");
}

// Sizes whose byte counts pass int64 are refused with InvalidArgument, never divided by after
// wrapping (issue 25: {1, 2^30, 2^34} made slot_bytes 0 and SIGFPE'd).
void test_shape_overflow(Report& r) {
  std::shared_ptr<SlotCache> c;
  r.code(SlotCache::create(Device::host(), {1, int64_t(1) << 30, int64_t(1) << 34}, kPage, &c),
         Code::kInvalidArgument, "slot create slot bytes past int64");
  r.code(SlotCache::create(Device::host(), {int64_t(1) << 40, int64_t(1) << 20, 1024}, kPage, &c),
         Code::kInvalidArgument, "slot create total bytes past int64");
  r.code(SlotCache::create(Device::host(), {2, int64_t(1) << 31, 64}, kPage, &c), Code::kInvalidArgument,
         "slot create max_seq_len past int32");
  r.code(SlotCache::create(Device::host(), {3, 8, -64}, kPage, &c), Code::kInvalidArgument,
         "slot create negative row");
  // 2^57 bytes: fits int64 but no address space has it -> the backend's mmap fails with ENOMEM.
  r.code(SlotCache::create(Device::host(), {1, (int64_t(1) << 31) - 1, int64_t(1) << 26}, kPage, &c),
         Code::kOutOfMemory, "slot create past the address space is OutOfMemory");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One code per mistake (the Python table keys on it), and messages without the caller's prefix
// (the C entry point and Python add "reserve_slot: <Code>: " once).
void test_codes_and_messages(Report& r) {
  std::shared_ptr<SlotCache> c;
  if (!r.ok(SlotCache::create(Device::host(), {3, 100, 64}, kPage, &c), "slot msg create")) return;
  const Status bad_slot = c->reserve(3, 1, nullptr);
  r.code(bad_slot, Code::kInvalidArgument, "slot msg bad slot is InvalidArgument");
  r.check(bad_slot.message() == "slot 3 is out of range [0, 3)", "slot msg bad slot text", bad_slot.message());
  const Status negative = c->reserve(1, -5, nullptr);
  r.code(negative, Code::kInvalidArgument, "slot msg negative tokens is InvalidArgument");
  r.check(contains(negative.message(), "tokens must be in [0, max_seq_len=100], got -5"),
          "slot msg negative tokens text", negative.message());
  const Status past = c->reserve(1, 101, nullptr);
  r.code(past, Code::kOutOfRange, "slot msg past max_seq_len is OutOfRange");
  r.check(contains(past.message(), "slot 1: 101 tokens is past max_seq_len=100") &&
              !contains(past.message(), "reserve_slot"),
          "slot msg past max_seq_len text", past.message());
  const Status released = c->release(7, nullptr);
  r.code(released, Code::kInvalidArgument, "slot msg release bad slot is InvalidArgument");
  r.check(released.message() == "slot 7 is out of range [0, 3)", "slot msg release text", released.message());
  r.eq(c->mapped_bytes(), 0, "slot msg refusals map nothing");
}

}  // namespace

int main() {
  Report r;
  test_shape_overflow(r);
  test_codes_and_messages(r);
  test_mapping(r);
  test_limit(r);
  test_append_varlen(r);
  return r.finish();
}

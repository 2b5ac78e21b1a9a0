// Native GPU test of the accept/advance kernel (speculative_accept_cuda) against the host kernel and
// the reference in test_speculative_accept.h, then its cost per decode step.
//   Correctness: 300 random steps (batch 1..300 across block boundaries, k 1..8, eos or none,
//   finished sequences); every bad input sets error_flag to its kind, leaves that sequence unchanged
//   and still applies the others; a missing error_flag is an InvalidArgument status.
//   Cost: batch {1, 8, 64, 256} x k 4, 2000 steps back to back on one stream (events around them):
//   µs per step as a decode loop pays it (launch included).
// Usage: test_speculative_accept_cuda [--no-bench]. Prints PASS/FAIL lines, "info bench ..." lines
// and "N passed, M failed"; exits non-zero on any failure.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "harness.h"
#include "test_speculative_accept.h"

using pvt_test::Report;

namespace {

template <typename T>
struct Dev {
  T* ptr = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& host) : n(host.size()) {
    if (cudaMalloc(&ptr, (n ? n : 1) * sizeof(T)) != cudaSuccess) ptr = nullptr;
    if (ptr && n) cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Dev() { if (ptr) cudaFree(ptr); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void get(std::vector<T>& host) const { if (n) cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost); }
};

// A step's vectors on the device, and the params pointing there.
struct DevStep {
  Dev<int64_t> draft, target, out_ids, next_tokens;
  Dev<int32_t> slot_ids, tlen, dlen, out_len, finished, accepted, flag;
  explicit DevStep(const spec_test::Step& s)
      : draft(s.draft), target(s.target), out_ids(s.out_ids), next_tokens(s.next_tokens), slot_ids(s.slot_ids),
        tlen(s.tlen), dlen(s.dlen), out_len(s.out_len), finished(s.finished), accepted(s.accepted),
        flag(std::vector<int32_t>{0}) {}
  pvt::SpeculativeAcceptParams params(spec_test::Step& s) {
    pvt::SpeculativeAcceptParams p = s.params();
    p.draft_tokens = draft.ptr; p.target_tokens = target.ptr; p.slot_ids = slot_ids.ptr;
    p.target_seqlens = tlen.ptr; p.draft_seqlens = dlen.ptr; p.out_ids = out_ids.ptr; p.out_len = out_len.ptr;
    p.finished = finished.ptr; p.accepted = accepted.ptr; p.next_tokens = next_tokens.ptr; p.error_flag = flag.ptr;
    return p;
  }
  int32_t read_back(spec_test::Step& s) {
    draft.get(s.draft); target.get(s.target); out_ids.get(s.out_ids); next_tokens.get(s.next_tokens);
    slot_ids.get(s.slot_ids); tlen.get(s.tlen); dlen.get(s.dlen); out_len.get(s.out_len);
    finished.get(s.finished); accepted.get(s.accepted);
    std::vector<int32_t> f(1);
    flag.get(f);
    return f[0];
  }
};

void random_steps(Report& r) {
  std::mt19937_64 rng(13);
  int bad = 0, flagged = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const int64_t n = 1 + rng() % 300, k = 1 + rng() % 8, max_new = 1 + rng() % 20, vocab = 2 + rng() % 6;
    spec_test::Step gpu = spec_test::random_step(rng, n, k, max_new, vocab, n + rng() % 8);
    spec_test::Step host = gpu, want = gpu;
    spec_test::reference(want);
    pvt::speculative_accept_cpu(host.params());
    DevStep d(gpu);
    const pvt::Status st = pvt::speculative_accept_cuda(d.params(gpu), nullptr);
    const cudaError_t sync = cudaDeviceSynchronize();
    if (d.read_back(gpu) != 0) ++flagged;
    if (!st.ok() || sync != cudaSuccess || !(gpu == want) || !(host == want)) ++bad;
  }
  r.eq(bad, 0, "CUDA kernel == host kernel == reference on 300 random steps");
  r.eq(flagged, 0, "no error flag on valid steps");
}

template <typename F>
void expect_flag(Report& r, const std::string& name, pvt::SpeculativeAcceptError kind, int64_t bad_row, F spoil) {
  std::mt19937_64 rng(17);
  spec_test::Step s = spec_test::random_step(rng, 4, 3, 6, 5, 8);
  std::fill(s.finished.begin(), s.finished.end(), 0);
  spoil(s);
  // Want: every other sequence applied, the bad one (or both of a repeated pair) untouched.
  spec_test::Step want = s;
  spec_test::reference(want);
  auto keep_row = [&](int64_t i) {
    want.out_len[i] = s.out_len[i]; want.finished[i] = s.finished[i];
    want.accepted[i] = s.accepted[i]; want.next_tokens[i] = s.next_tokens[i];
    for (int64_t j = 0; j < s.max_new; ++j) want.out_ids[i * s.max_new + j] = s.out_ids[i * s.max_new + j];
    const int32_t slot = s.slot_ids[i];
    if (slot >= 0 && slot < s.slots) { want.tlen[slot] = s.tlen[slot]; want.dlen[slot] = s.dlen[slot]; }
  };
  for (int64_t i = 0; i < s.n; ++i) {
    bool hit = i == bad_row;
    for (int64_t j = 0; j < s.n && bad_row < 0; ++j) hit = hit || (j != i && s.slot_ids[j] == s.slot_ids[i]);
    if (hit) keep_row(i);
  }
  DevStep d(s);
  spec_test::Step got = s;
  r.ok(pvt::speculative_accept_cuda(d.params(got), nullptr), name + ": launched");
  cudaDeviceSynchronize();
  const int32_t flag = d.read_back(got);
  r.eq(flag, static_cast<int32_t>(kind), name + ": error_flag");
  r.check(got == want, name + ": bad sequence unchanged, others applied");
}

void bad_inputs(Report& r) {
  using E = pvt::SpeculativeAcceptError;
  expect_flag(r, "slot past the cache", E::kSlotOutOfRange, 2, [](spec_test::Step& s) { s.slot_ids[2] = 8; });
  expect_flag(r, "repeated slot", E::kSlotRepeated, -1, [](spec_test::Step& s) { s.slot_ids[3] = s.slot_ids[1]; });
  expect_flag(r, "target length past capacity", E::kTargetLengthOutOfRange, 0, [](spec_test::Step& s) {
    s.capacity = 1 << 20;
    s.tlen[s.slot_ids[0]] = (1 << 20);
  });
  expect_flag(r, "out_len past max_new", E::kOutLenOutOfRange, 1, [](spec_test::Step& s) { s.out_len[1] = 7; });
  std::mt19937_64 rng(19);
  spec_test::Step s = spec_test::random_step(rng, 2, 2, 4, 5, 4);
  pvt::SpeculativeAcceptParams p = s.params();  // host pointers, but it fails before any launch
  p.error_flag = nullptr;
  r.code(pvt::speculative_accept_cuda(p, nullptr), pvt::Code::kInvalidArgument, "missing error_flag: status");
}

void bench(Report& r) {
  for (int64_t n : {1, 8, 64, 256}) {
    std::mt19937_64 rng(23);
    spec_test::Step s = spec_test::random_step(rng, n, 4, 8192, 1000, n);
    std::fill(s.finished.begin(), s.finished.end(), 0);
    std::fill(s.out_len.begin(), s.out_len.end(), 0);
    DevStep d(s);
    const pvt::SpeculativeAcceptParams p = d.params(s);
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    for (int i = 0; i < 20; ++i) pvt::speculative_accept_cuda(p, stream);  // warm-up
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    const int steps = 1000;  // out_len grows <= 5 a step: stays under max_new 8192
    cudaEventRecord(a, stream);
    bool ok = true;
    for (int i = 0; i < steps; ++i) ok = ok && pvt::speculative_accept_cuda(p, stream).ok();
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, a, b);
    r.check(ok && cudaGetLastError() == cudaSuccess, "bench batch " + std::to_string(n) + ": launches ok");
    std::printf("info bench speculative_accept batch=%lld k=4 us_per_step=%.2f\n", static_cast<long long>(n),
                1000.0 * ms / steps);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaStreamDestroy(stream);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Report r;
  random_steps(r);
  bad_inputs(r);
  if (!(argc > 1 && std::strcmp(argv[1], "--no-bench") == 0)) bench(r);
  return r.finish();
}

// The last-block merge's checks for test_decode_attention.cu (DecodeAttentionParams::split_counters): one
// process-wide counter buffer that every call of a pass shares, as a stream's does in use (zeroed once, so a
// call that leaves a counter nonzero fails the next call's merge, and is caught here right after it), and a
// case run again, then captured in a CUDA graph and replayed, its counters zero after each and its output the
// same bit for bit; then merged by the merge kernel (DecodeOptions::last_block_merge off), within float rounding.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_mem.h"
#include "harness.h"
#include "kernels/decode_attention.h"

namespace split_counter_checks {

constexpr int64_t kCounters = 1 << 16;  // more than any case's batch x kv heads x row groups

// The shared counters, zeroed when made.
inline int32_t* counters() {
  static DevBuf* buf = [] {
    auto* b = new DevBuf(kCounters * sizeof(int32_t));
    if (b->ptr) cudaMemset(b->ptr, 0, kCounters * sizeof(int32_t));
    return b;
  }();
  return static_cast<int32_t*>(buf->ptr);
}

// Gives p the shared counters where its plan uses them; the count (0: the plan merges otherwise).
inline int64_t attach(pvt::DecodeAttentionParams* p) {
  const int64_t n = pvt::decode_attention_cuda_split_counter_count(*p);
  if (n > 0 && n <= kCounters && counters() != nullptr) {
    p->split_counters = counters();
    p->split_counter_count = kCounters;
  }
  return p->split_counters != nullptr ? n : 0;
}

// Whether the shared counters are all zero (after a synchronised call); zeroes them again where not, so that
// one failure does not fail every later case. `why`: the first nonzero one.
inline bool all_zero(std::string* why) {
  std::vector<int32_t> h(kCounters);
  if (cudaMemcpy(h.data(), counters(), kCounters * sizeof(int32_t), cudaMemcpyDeviceToHost) != cudaSuccess) {
    *why = "copy back failed";
    return false;
  }
  for (int64_t i = 0; i < kCounters; ++i) {
    if (h[i] != 0) {
      *why = "counter " + std::to_string(i) + " is " + std::to_string(h[i]);
      cudaMemset(counters(), 0, kCounters * sizeof(int32_t));
      return false;
    }
  }
  return true;
}

// The output after one more queued call (`launch` queues it on `stream`), NaN-filled first; empty on an error.
template <class Launch>
std::vector<uint8_t> rerun(void* out, size_t bytes, cudaStream_t stream, Launch launch) {
  std::vector<uint8_t> got;
  if (cudaMemsetAsync(out, 0xff, bytes, stream) != cudaSuccess || !launch() ||
      cudaStreamSynchronize(stream) != cudaSuccess || !GpuMem::read(out, bytes, &got)) {
    got.clear();
  }
  return got;
}

// p (with counters, its first call's output `first` already checked against the host) run again, then in a
// graph replayed 3 times: counters zero after each, output identical; then the merge kernel's output within
// `tol` of it. elem: reads element i of an output as a float.
template <class Elem>
void repeat_and_replay(pvt_test::Report& r, const std::string& name, const pvt::DecodeAttentionParams& p, size_t bytes,
                       const std::vector<uint8_t>& first, int64_t n_elems, float tol, Elem elem, cudaStream_t stream) {
  std::string why;
  auto call = [&](const pvt::DecodeAttentionParams& q) { return pvt::decode_attention_cuda(q, stream).ok(); };
  const std::vector<uint8_t> again = rerun(p.out, bytes, stream, [&] { return call(p); });
  r.check(again == first, name + ".repeat.same_output");
  r.check(all_zero(&why), name + ".repeat.counters_zero", why);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  const bool captured = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess && call(p) &&
                        cudaStreamEndCapture(stream, &graph) == cudaSuccess &&
                        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (r.check(captured, name + ".graph.capture")) {
    for (int i = 0; i < 3; ++i) {
      const std::vector<uint8_t> got =
          rerun(p.out, bytes, stream, [&] { return cudaGraphLaunch(exec, stream) == cudaSuccess; });
      const std::string at = name + ".graph.replay" + std::to_string(i);
      r.check(got == first, at + ".same_output");
      r.check(all_zero(&why), at + ".counters_zero", why);
    }
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  pvt::DecodeOptions forced = p.options ? *p.options : pvt::DecodeOptions{};
  forced.last_block_merge = false;
  pvt::DecodeAttentionParams mp = p;
  mp.options = &forced;
  const std::vector<uint8_t> merged = rerun(p.out, bytes, stream, [&] { return call(mp); });
  float worst = merged.size() == first.size() ? 0.f : INFINITY;
  for (int64_t i = 0; i < n_elems && merged.size() == first.size(); ++i) {
    const float a = elem(merged, i), b = elem(first, i);
    worst = std::fmax(worst, std::isfinite(a) && std::isfinite(b) ? std::fabs(a - b) : (a == b || (a != a && b != b) ? 0.f : INFINITY));
  }
  r.check(worst <= tol, name + ".merge_kernel_agrees", "max |last block - merge kernel| = " + std::to_string(worst) +
                                                              (merged == first ? " (bit for bit)" : ""));
}

}  // namespace split_counter_checks

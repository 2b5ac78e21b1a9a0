// Native GPU test of prefix sharing between slots (issue 31 point 2) on Device::cuda(0): the shared
// checks of slot_share_checks.h with the device's chunk size (the partial chunk copied with
// cuMemcpyAsync, copy-on-write through a scratch mapping), and with --bench the cost of sharing a
// 32k-token prefix of a Llama-3-8B-shaped token-row cache (32 layers x 2 x 8 kv heads x 128 x fp16 =
// 128 KiB per token: 4 GiB, 2,048 chunks of 2 MiB) against copying it. Run the checks under
// compute-sanitizer; the benchmark without.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gpu_mem.h"
#include "slot_share_checks.h"

using namespace pvt;
using pvt_test::Report;

namespace {

const Device kGpu = Device::cuda(0);

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// µs to share `tokens` rows of slot 0 into slot 1 (then release slot 1), against cudaMemcpy of the
// same bytes between two mapped slots. Median of `reps`.
void bench(Report& r, int64_t tokens, int reps) {
  const int64_t row = 32LL * 2 * 8 * 128 * 2;  // 128 KiB
  SlotCacheShape shape{3, tokens, row, /*align_slots=*/true};
  std::shared_ptr<SlotCache> c;
  if (!r.ok(SlotCache::create(kGpu, shape, 2 << 20, &c), "bench.create") ||
      !r.ok(c->reserve(0, tokens, nullptr), "bench.reserve_src") ||
      !r.ok(c->reserve(2, tokens, nullptr), "bench.reserve_copy_dst"))
    return;
  const size_t bytes = static_cast<size_t>(tokens * row);
  char* src = c->data();
  char* copy_dst = c->data() + 2 * c->shape().slot_bytes();
  cudaMemset(src, 1, bytes);
  cudaDeviceSynchronize();
  std::vector<double> share, release, copy, partial;
  for (int i = 0; i < reps; ++i) {
    double t0 = now_us();
    const Status st = c->share_prefix(0, 1, tokens, nullptr);
    cudaDeviceSynchronize();
    share.push_back(now_us() - t0);
    if (!r.ok(st, "bench.share")) return;
    t0 = now_us();
    r.ok(c->release(1, nullptr), "bench.release_dst");
    release.push_back(now_us() - t0);
    // A prefix ending inside a chunk: one chunk fewer aliased, one created and copied.
    t0 = now_us();
    const Status sp = c->share_prefix(0, 1, tokens - 8, nullptr);
    cudaDeviceSynchronize();
    partial.push_back(now_us() - t0);
    if (!r.ok(sp, "bench.share_partial")) return;
    c->release(1, nullptr);
    t0 = now_us();
    cudaMemcpy(copy_dst, src, bytes, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    copy.push_back(now_us() - t0);
  }
  const double chunks = static_cast<double>(bytes) / (2 << 20);
  std::printf("bench share_prefix %lld tokens (%.0f chunks of 2 MiB, %.2f GiB): %.0f us (%.2f us/chunk)\n",
              static_cast<long long>(tokens), chunks, bytes / double(1 << 30), median(share), median(share) / chunks);
  std::printf("bench share_prefix %lld tokens (partial last chunk copied): %.0f us\n",
              static_cast<long long>(tokens - 8), median(partial));
  std::printf("bench release of the sharing slot: %.0f us (%.2f us/chunk)\n", median(release),
              median(release) / chunks);
  std::printf("bench cudaMemcpy of the same %.2f GiB: %.0f us (%.0f GB/s)\n", bytes / double(1 << 30), median(copy),
              bytes / median(copy) / 1e3);
  r.eq(c->shared_bytes(), 0, "bench.nothing_shared_after");
}

}  // namespace

int main(int argc, char** argv) {
  Report r;
  Backend* be = nullptr;
  if (!r.ok(get_backend(kGpu, &be), "cuda.backend")) return r.finish();
  const size_t cb = be->granularity();
  std::printf("info chunk granularity %zu bytes\n", cb);
  if (argc > 1 && std::strcmp(argv[1], "--bench") == 0) {
    bench(r, 32768, 5);
  } else {
    share_test::run_all<GpuMem>(r, kGpu, cb);
  }
  phys_test::check_end(r, kGpu);
  return r.finish();
}

// Native GPU test of physical chunks and aliasing on the CUDA backend (issue 31 point 1): the shared
// checks of phys_chunks_checks.h on Device::cuda(0) with 2 MiB chunks (one cuMemCreate handle mapped
// at several addresses), plus release order across streams: a read queued through an alias on a
// second stream still sees the memory after the source region is destroyed, and the last unmap
// waits for it. Run it under compute-sanitizer.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gpu_mem.h"
#include "phys_chunks_checks.h"
#include "spin_kernel_cuda.cuh"

using namespace pvt;
using pvt_test::Report;

namespace {

const Device kGpu = Device::cuda(0);


using pvt_test::spin_kernel;

// A writes on stream 1, B (an alias of A) is read on stream 2 behind a long spin; the host destroys
// A, then B, at once. The read must see A's bytes: A's unmap left the chunk to B, B's waited.
void check_streams(Report& r, size_t cb) {
  std::unique_ptr<Region> a, b;
  if (!r.ok(Region::create(kGpu, 2 * cb, cb, &a), "streams.create_a") || !r.ok(Region::create(kGpu, 2 * cb, cb, &b), "streams.create_b") ||
      !r.ok(a->map_range(0, 2 * cb), "streams.map_a") || !r.ok(b->alias_range(*a, 0, 0, 2 * cb), "streams.alias"))
    return;
  cudaStream_t s1 = nullptr, s2 = nullptr;
  void* out = nullptr;
  void* src = nullptr;
  const auto p = phys_test::pattern(2 * cb, 60);
  if (cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&out, 2 * cb) != cudaSuccess ||
      cudaMalloc(&src, 2 * cb) != cudaSuccess ||
      cudaMemcpy(src, p.data(), p.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
    r.check(false, "streams.setup");
    return;
  }
  cudaMemcpyAsync(a->base(), src, 2 * cb, cudaMemcpyDeviceToDevice, s1);
  r.ok(a->record_use(s1), "streams.a_used_on_s1");
  cudaStreamSynchronize(s1);  // the read below must see the write; the test is about the release
  spin_kernel<<<1, 1, 0, s2>>>(200LL * 1000 * 1000);  // ~0.1 s at ~2 GHz
  cudaMemcpyAsync(out, b->base(), 2 * cb, cudaMemcpyDeviceToDevice, s2);
  r.ok(b->record_use(s2), "streams.b_used_on_s2");
  a.reset();  // waits for s1 only; the chunks stay, B maps them
  r.check(cudaStreamQuery(s2) == cudaErrorNotReady, "streams.read_still_queued_after_a_released");
  b.reset();  // waits for s2, then unmaps and releases
  r.check(cudaStreamQuery(s2) == cudaSuccess, "streams.last_release_waited_for_reader");
  std::string why;
  r.check(phys_test::holds<GpuMem>(out, p, &why), "streams.reader_saw_the_data", why);
  r.eq(memory_stats(kGpu).shared_bytes, 0, "streams.no_shared_left");
  cudaFree(out);
  cudaFree(src);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

}  // namespace

int main() {
  Report r;
  Backend* be = nullptr;
  if (!r.ok(get_backend(kGpu, &be), "cuda.backend")) return r.finish();
  const size_t cb = be->granularity();
  std::printf("info chunk granularity %zu bytes\n", cb);
  phys_test::run_all<GpuMem>(r, kGpu, cb);
  check_streams(r, cb);
  phys_test::check_end(r, kGpu);
  return r.finish();
}

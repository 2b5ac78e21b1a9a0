// Shared by the host-µs-per-step benchmarks (bench_inflight_step.cu, bench_graph_launch.cu): a
// clock, a check of runtime calls that stops the benchmark, the spin kernel standing for a model
// step, and percentiles. One translation unit per program includes it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "spin_kernel_cuda.cuh"

namespace pvt_bench {

inline double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::printf("FAIL %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__);   \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

using pvt_test::spin_kernel;  // the model's step

// The p-quantile (0..1) of v, nearest rank.
inline double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace pvt_bench

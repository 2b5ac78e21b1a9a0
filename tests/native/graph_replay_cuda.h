// Microseconds a call, as the 8-bit bench (test_kv_quant.cu) and tests/gpu/floor_read.cu time one: `iters`
// calls captured in one CUDA graph and replayed, best of 3; call i reads copy (i % copies), so that copies
// together at least 3x the L2 are read cold. A CUDA error prints "FAIL ..." and exits (a bench has no state
// worth keeping after one). CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace pvt_test {

inline void graph_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <typename F>
float graph_us(F call, int copies, int iters, cudaStream_t s) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  call(0, s);  // warm-up, outside the capture
  graph_check(cudaStreamSynchronize(s), "warm-up");
  graph_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  for (int i = 0; i < iters; ++i) call(i % copies, s);
  graph_check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  graph_check(cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate");
  cudaEvent_t a, b;
  graph_check(cudaEventCreate(&a), "cudaEventCreate");
  graph_check(cudaEventCreate(&b), "cudaEventCreate");
  float best = 1e30f;
  for (int rep = 0; rep < 3; ++rep) {
    graph_check(cudaEventRecord(a, s), "cudaEventRecord");
    graph_check(cudaGraphLaunch(ge, s), "cudaGraphLaunch");
    graph_check(cudaEventRecord(b, s), "cudaEventRecord");
    graph_check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    graph_check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    best = std::min(best, ms * 1e3f / iters);
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

}  // namespace pvt_test

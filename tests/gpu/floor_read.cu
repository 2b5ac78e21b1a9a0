// The floor of a decode-attention call on this GPU: how long the fastest kernel we can write takes to only READ
// the bytes a call reads, timed as the attention benches time a call (CUDA-graph replay of back-to-back calls,
// each reading another copy, the copies together at least 3x the L2: cold; best of 3). No arithmetic but an
// xor of what was read. A decode call cannot take less than this for its bytes, so the floor says how much of
// a goal (such as issue 28's 1.8x cuDNN) is left to the kernel at all. Also: an empty kernel a call (what a
// launch in a graph costs), and the read followed by a small second kernel launched programmatically (a split
// kernel and its merge, the merge waiting for the whole read grid).
// Build (no GPU needed): nvcc -O3 -std=c++17 -arch=sm_90 -o floor_read tests/gpu/floor_read.cu
// Usage: floor_read [MB ...]   (default: the bytes of the 8-bit and float16 B = 1 rows of test_kv_quant_cuda)
// Prints "FLOOR bytes_MB best_us GBps config" a size, then "PAIR ..." (read + programmatic second kernel).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../native/graph_replay_cuda.h"  // graph_us: timed as the 8-bit bench times a call

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// Each block reads its contiguous share, U 16-byte loads a thread in flight a step; the xor goes to `sink`
// only if it equals a value random data never gives, so the loads are not dropped and nothing is written.
template <int U>
__global__ void read_kernel(const uint4* __restrict__ p, size_t n16, unsigned* sink, bool programmatic_end) {
  const size_t per = (n16 + gridDim.x - 1) / gridDim.x;
  const size_t b0 = blockIdx.x * per, b1 = b0 + per < n16 ? b0 + per : n16;
  unsigned x = 0;
  for (size_t i = b0 + threadIdx.x; i < b1; i += size_t(U) * blockDim.x) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t j = i + size_t(u) * blockDim.x;
      v[u] = j < b1 ? __ldcs(p + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (programmatic_end) asm volatile("griddepcontrol.launch_dependents;");
  if (x == 0x9e3779b9u) sink[blockIdx.x] = x;
}

// The second kernel of a pair: one block a row (rows x 128 threads), waits for the read grid, reads 16 floats
// a thread from a small buffer (L2), writes one. A merge's shape without its arithmetic.
__global__ void tail_kernel(const float* __restrict__ part, float* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 16; ++j) s += part[(j * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

__global__ void empty_kernel() {}

using pvt_test::graph_us;

template <typename K, typename... Args>
void launch(K kernel, int grid, int threads, bool programmatic, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  if (programmatic) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

int main(int argc, char** argv) {
  int dev = 0, sms = 0, l2 = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  std::vector<double> mbs;
  for (int i = 1; i < argc; ++i) mbs.push_back(std::atof(argv[i]));
  if (mbs.empty()) {  // K + V of one sequence, head_dim 128: 8 kv heads (GQA) and 32 (MHA), 4k-64k keys, 1 and 2 bytes
    for (int hkv : {8, 32})
      for (int s : {4096, 16384, 32768, 65536})
        for (int bytes : {1, 2}) mbs.push_back(2.0 * hkv * s * 128 * bytes / 1e6);
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned* sink;
  float *part, *out;
  CK(cudaMalloc(&sink, 1 << 20));
  CK(cudaMalloc(&part, 16 << 20));
  CK(cudaMalloc(&out, 1 << 20));
  CK(cudaMemset(part, 0, 16 << 20));
  std::printf("DEVICE sms %d l2_MB %.1f\n", sms, l2 / 1e6);
  {
    const float e1 = graph_us([&](int, cudaStream_t st) { launch(empty_kernel, 1, 32, false, st); }, 1, 200, s);
    const float e2 = graph_us([&](int, cudaStream_t st) { launch(empty_kernel, sms, 128, true, st); }, 1, 200, s);
    const float ep = graph_us([&](int, cudaStream_t st) {
      launch(empty_kernel, sms, 128, true, st);
      launch(tail_kernel, 32, 128, true, st, (const float*)part, out);
    }, 1, 200, s);
    std::printf("EMPTY one_block_us %.2f one_wave_programmatic_us %.2f pair_us %.2f\n", e1, e2, ep);
    // What a graph's own launch adds a call when few calls share it (the benches capture 8 to 100).
    for (int n : {8, 16, 32, 100, 400}) {
      const float e = graph_us([&](int, cudaStream_t st) { launch(empty_kernel, sms, 128, true, st); }, 1, n, s);
      std::printf("GRAPH calls %d us_a_call %.2f us_a_graph %.1f\n", n, e, e * n);
    }
  }
  std::printf("FLOOR MB us GBps blocks_per_sm threads unroll\n");
  for (double mb : mbs) {
    const size_t bytes = static_cast<size_t>(mb * 1e6) / 16 * 16, n16 = bytes / 16;
    const int copies = static_cast<int>(std::min<size_t>(64, std::max<size_t>(1, (3 * size_t(l2) + bytes - 1) / bytes)));
    std::vector<uint4*> buf(copies);
    for (auto& b : buf) {
      CK(cudaMalloc(&b, bytes));
      CK(cudaMemset(b, 0x5a, bytes));
    }
    const int iters = static_cast<int>(std::max<size_t>(16, std::min<size_t>(200, size_t(4e9) / bytes)));
    float best = 1e30f;
    int bb = 0, bt = 0, bu = 0;
    for (int per_sm : {1, 2, 4, 8}) {
      for (int threads : {256, 512}) {
        for (int u : {4, 8}) {
          if (per_sm * threads > 2048) continue;
          const int grid = per_sm * sms;
          const float us = graph_us([&](int i, cudaStream_t st) {
            if (u == 4) launch(read_kernel<4>, grid, threads, true, st, (const uint4*)buf[i], n16, sink, false);
            else launch(read_kernel<8>, grid, threads, true, st, (const uint4*)buf[i], n16, sink, false);
          }, copies, iters, s);
          if (us < best) best = us, bb = per_sm, bt = threads, bu = u;
        }
      }
    }
    std::printf("FLOOR %.1f %.2f %.0f %d %d %d\n", bytes / 1e6, best, bytes / best / 1e3, bb, bt, bu);
    // The same best read, then a merge-shaped kernel placed programmatically (32 rows: one sequence's heads).
    const int grid = bb * sms;
    const float pair = graph_us([&](int i, cudaStream_t st) {
      if (bu == 4) launch(read_kernel<4>, grid, bt, true, st, (const uint4*)buf[i], n16, sink, true);
      else launch(read_kernel<8>, grid, bt, true, st, (const uint4*)buf[i], n16, sink, true);
      launch(tail_kernel, 32, 128, true, st, (const float*)part, out);
    }, copies, iters, s);
    std::printf("PAIR %.1f %.2f %.0f\n", bytes / 1e6, pair, bytes / pair / 1e3);
    for (auto b : buf) CK(cudaFree(b));
  }
  CK(cudaDeviceSynchronize());
  return 0;
}

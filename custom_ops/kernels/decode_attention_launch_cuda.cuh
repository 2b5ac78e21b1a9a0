// Launch helpers shared by the decode attention launcher (decode_attention_cuda.cu) and the
// tensor-core kernel's instance files (decode_attention_mma_d*_cuda.cu): the device questions asked once
// per kernel instance (none is a stream operation: fine while a graph is being captured; a failed query
// only makes the plan less good, its error is cleared) and the launch with its attributes.
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "../core/cuda_check.h"
#include "../core/status.h"
#include "decode_attention_plan.h"

namespace pvt {
namespace decode_cuda {

using decode_plan::kMaxClusterSplits;

// Blocks of `kernel` resident per SM with `threads` threads and `smem` bytes of dynamic shared memory
// (opting in to that much first: over the 48 KiB default for the tensor-core kernel), or `fallback`
// where a query fails.
template <typename Kernel>
int query_resident(Kernel kernel, int threads, size_t smem, int fallback) {
  int blocks = 0;
  if ((smem > 0 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) !=
                       cudaSuccess) ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem) != cudaSuccess || blocks <= 0) {
    cudaGetLastError();
    return fallback;
  }
  return blocks;
}

// A launch of `threads`-thread blocks on `grid`; with cluster_y > 1 the blocks form clusters of
// (1, cluster_y, 1), with `programmatic` the launch may overlap the end of the kernel ahead of it on the
// stream (attr holds the attributes, so it must outlive the launch).
inline cudaLaunchConfig_t block_launch(dim3 grid, int threads, size_t smem, cudaStream_t stream, unsigned cluster_y,
                                bool programmatic, cudaLaunchAttribute (&attr)[2]) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 0;
  if (cluster_y > 1) {
    cudaLaunchAttribute& a = attr[cfg.numAttrs++];
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = 1;
    a.val.clusterDim.y = cluster_y;
    a.val.clusterDim.z = 1;
  }
  if (programmatic) {
    cudaLaunchAttribute& a = attr[cfg.numAttrs++];
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
  }
  return cfg;
}

// Whether the device co-schedules clusters of kMaxClusterSplits blocks of this kernel: kMaxClusterSplits,
// else 1 (no cluster launches, or a kernel built for an older architecture, whose cluster code is
// compiled out).
template <typename Kernel>
int query_cluster_limit(Kernel kernel, int threads, size_t smem) {
  int limit = 1, dev = 0, can = 0, active = 0;
  cudaFuncAttributes fa;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg =
      block_launch(dim3(1, kMaxClusterSplits, 1), threads, smem, nullptr, kMaxClusterSplits, false, attr);
  if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&can, cudaDevAttrClusterLaunch, dev) == cudaSuccess &&
      can != 0 && cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.ptxVersion >= 90 && fa.binaryVersion >= 90 &&
      cudaOccupancyMaxActiveClusters(&active, kernel, &cfg) == cudaSuccess && active > 0) {
    limit = kMaxClusterSplits;
  }
  cudaGetLastError();  // clear: no cluster only means the workspace path
  return limit;
}

// Clusters of n blocks (1, n, 1) of `kernel` with `smem` bytes each that the device keeps resident at
// once (cudaOccupancyMaxActiveClusters: whole clusters per GPC), or -1 where the query fails.
template <typename Kernel>
int query_active_clusters(Kernel kernel, int threads, size_t smem, int n) {
  int active = 0;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = block_launch(dim3(1, static_cast<unsigned>(n), 1), threads, smem, nullptr,
                                              static_cast<unsigned>(n), false, attr);
  if (cudaOccupancyMaxActiveClusters(&active, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return active;
}

// Dynamic shared memory for a launch of `kernel` that leaves room for ONE of its blocks on an SM: more
// than half of an SM's shared memory (opting in to it once per instance), or `smem` itself where that is
// already so (the 8-warp kernel's 196 KiB), where the device cannot give that much to one block, or where
// a query fails. Why: a plan of one block per SM (Plan::mma_sm_exclusive) takes the block scheduler's
// usual spread of an empty GPU, one block an SM, for granted. A launch placed programmatically, while the
// previous kernel's blocks still run, found SMs in another state: on the H200 the 4-warp kernel's 100 KiB
// blocks doubled up on some SMs and left others idle, GQA B=8 S=16k 167 us against 127 launched in stream
// order (run 36, docs/H200_DECODE_PARITY.md).
template <typename Kernel>
size_t sm_exclusive_smem(Kernel kernel, size_t smem) {
  int dev = 0, per_sm = 0, per_block = 0, reserved = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess) {
    cudaGetLastError();
    return smem;
  }
  // Two blocks would need 2 * (want + reserved) = per_sm + 32 bytes: more than the SM has.
  const size_t want = static_cast<size_t>(per_sm / 2 - reserved + 16);
  if (want <= smem || want > static_cast<size_t>(per_block)) return smem;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(want)) != cudaSuccess) {
    cudaGetLastError();
    return smem;
  }
  return want;
}

// The current device's L2 size in bytes, asked once a process (the plans that size L2 prefetches by it: the
// first device asked stands for every one), or 0 where the query fails (no prefetch).
inline int l2_bytes_once() {
  static const int bytes = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrL2CacheSize, dev) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return bytes;
}

// Queues `kernel(args...)` on `grid` (see block_launch).
template <typename... Params, typename... Args>
Status launch_kernel(void (*kernel)(Params...), dim3 grid, int threads, size_t smem, unsigned cluster_y,
                     bool programmatic, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = block_launch(grid, threads, smem, stream, cluster_y, programmatic, attr);
  PVT_CU_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
  return Status::Ok();
}

}  // namespace decode_cuda
}  // namespace pvt

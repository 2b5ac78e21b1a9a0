// The tensor-core kernel's instances as the launcher sees them: for one head dim, what the device says
// about an instance (warps x M-tiles, fp16 or bf16) and its launch. Each head dim's instances are
// compiled in their own file (decode_attention_mma_d<D>_cuda.cu, through
// decode_attention_mma_instances_cuda.cuh), so that the 48 instances build in parallel and the launcher's
// file does not compile the kernel at all.
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "../core/status.h"
#include "decode_attention.h"
#include "decode_attention_common_cuda.cuh"
#include "decode_attention_plan.h"

namespace pvt {
namespace decode_cuda {

// What the device says about one instance, each asked once per instance.
struct MmaFacts {
  bool exists = false;      // the instance is built (decode_plan::mma_instance_exists)
  bool sm80 = false;        // its code for this device has the sm_80 instructions (mma.sync, ldmatrix, cp.async)
  int resident = 0;         // blocks an SM (0: it cannot run here, e.g. too little shared memory)
  int cluster_limit = 1;    // kMaxClusterSplits where clusters of that many blocks are co-scheduled, else 1
  int query_error = 0;      // the cudaError_t of a failed attribute query (0: none), for diagnostics
  // Clusters of n blocks (index n, 2..kMaxClusterSplits) resident at once, one block an SM
  // (decode_plan::KernelOccupancy::mma_max_clusters); -1: not known.
  int max_clusters[decode_plan::kMaxClusterSplits + 1] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
};

// For head dim D (one of decode_plan::mma_head_dim), dtype fp16 or bf16 (others: no instance), `warps` x `tiles`
// M-tiles x `warp_keys` keys a warp (16 or 32).
template <int D>
MmaFacts mma_facts(ScalarType dtype, int warps, int tiles, int warp_keys);

// Queues the instance of `plan` (its warps, M-tiles and keys a warp) on grid (entries x row groups, splits): clusters of
// the splits where planned, one block an SM kept so by its shared memory where planned
// (Plan::mma_sm_exclusive).
template <int D>
Status mma_launch(const DecodeAttentionParams& p, const decode_plan::Plan& plan, const SplitCount& splits,
                  const Workspace& ws, cudaStream_t stream);

// The same for the row-owning kernel (decode_attention_mma_rows_cuda.cuh, instances in
// decode_attention_mma_rows_d<D>_cuda.cu): `warps` 2, 4 or 8, one M-tile each.
template <int D>
MmaFacts mma_rows_facts(ScalarType dtype, int warps);
template <int D>
Status mma_rows_launch(const DecodeAttentionParams& p, const decode_plan::Plan& plan, const SplitCount& splits,
                       const Workspace& ws, cudaStream_t stream);

#define PVT_DECODE_MMA_DECLARE(D)                                                                             \
  extern template MmaFacts mma_facts<D>(ScalarType, int, int, int);                                          \
  extern template Status mma_launch<D>(const DecodeAttentionParams&, const decode_plan::Plan&, const SplitCount&, \
                                       const Workspace&, cudaStream_t);                                      \
  extern template MmaFacts mma_rows_facts<D>(ScalarType, int);                                               \
  extern template Status mma_rows_launch<D>(const DecodeAttentionParams&, const decode_plan::Plan&,           \
                                            const SplitCount&, const Workspace&, cudaStream_t);
PVT_DECODE_MMA_DECLARE(64)
PVT_DECODE_MMA_DECLARE(80)
PVT_DECODE_MMA_DECLARE(96)
PVT_DECODE_MMA_DECLARE(128)
PVT_DECODE_MMA_DECLARE(256)
#undef PVT_DECODE_MMA_DECLARE

}  // namespace decode_cuda
}  // namespace pvt

// The definitions behind decode_attention_mma_launch_cuda.cuh: for head dim D, the tensor-core kernel's
// instances (fp16/bf16 x the warps and M-tiles of decode_plan::mma_instance_exists), each a type whose
// statics hold the device's answers for it. Included by decode_attention_mma_d<D>_cuda.cu only, which
// instantiates it for its D (PVT_DECODE_MMA_INSTANTIATE).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "decode_attention_launch_cuda.cuh"
#include "decode_attention_mma_cuda.cuh"
#include "decode_attention_mma_launch_cuda.cuh"

namespace pvt {
namespace decode_cuda {

// What the device says about a tensor-core kernel of `threads` threads and `smem` bytes of dynamic shared
// memory (the key-slice and the row-owning kernel's instances alike).
template <typename Kernel>
MmaFacts query_mma_facts(Kernel kernel, int threads, size_t smem) {
  MmaFacts x;
  x.exists = true;
  cudaFuncAttributes fa;
  const cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
  if (e == cudaSuccess) {
    x.sm80 = fa.ptxVersion >= 80 && fa.binaryVersion >= 80;
  } else {
    x.query_error = static_cast<int>(e);
  }
  cudaGetLastError();
  x.resident = query_resident(kernel, threads, smem, 0);  // opts in to the shared memory first
  if (x.resident > 0) x.cluster_limit = query_cluster_limit(kernel, threads, smem);
  if (x.cluster_limit > 1) {  // a cluster plan is a one-block-an-SM plan: its launch's shared memory
    for (int n = 2; n <= kMaxClusterSplits; ++n) {
      x.max_clusters[n] = query_active_clusters(kernel, threads, sm_exclusive_smem(kernel, smem), n);
    }
  }
  return x;
}

template <typename T, int D, int WARPS, int MT, int KW>
struct Mma {
  static constexpr auto kernel = decode_attention_mma_kernel<T, D, WARPS, MT, false, KW>;
  // Plan::balance_blocks: the 16-key instances only (32 keys a warp: the kernel itself, never launched balanced).
  static constexpr bool kBalanced = KW == 16;
  static constexpr auto balanced_kernel = decode_attention_mma_kernel<T, D, WARPS, MT, kBalanced, KW>;
  static constexpr size_t smem = mma_smem_bytes(D, WARPS, MT, KW);
  static constexpr int threads = WARPS * 32;
  static MmaFacts facts() {
    static const MmaFacts f = [] {
      MmaFacts x = query_mma_facts(kernel, threads, smem);
      // The balanced instance: the same shared memory, the same occupancy (never a cluster or one an SM).
      if (x.resident > 0 && cudaFuncSetAttribute(balanced_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(smem)) != cudaSuccess) {
        cudaGetLastError();
        x.resident = 0;
      }
      return x;
    }();
    return f;
  }
  static size_t sm_exclusive() {  // opts in to more shared memory than smem: only after facts() asked about smem
    static const size_t n = sm_exclusive_smem(kernel, smem);
    return n;
  }
};

// The launch of instance I (Mma or MmaRows) on grid (entries x row groups, splits), as `plan` says.
template <typename I>
Status launch_mma_instance(const DecodeAttentionParams& p, const decode_plan::Plan& plan, const SplitCount& splits,
                           const Workspace& ws, cudaStream_t stream) {
  // Row groups side by side in x (decode_attention_mma_kernel).
  const int64_t blocks_x = p.batch * p.kv_heads * plan.row_groups;
  if (blocks_x > INT32_MAX) {
    return Status(Code::kUnsupported, "decode_attention_cuda: batch * kv_heads * row groups exceeds the grid limit");
  }
  // A balanced plan (key-slice kernel only): a flat grid, each block's work found on the device
  // (decode_attention_balance_cuda.cuh).
  const bool balanced = plan.balance_blocks > 0;
  auto kernel = I::kernel;
  if constexpr (I::kBalanced) {
    if (balanced) kernel = I::balanced_kernel;
  } else if (balanced) {
    return Status(Code::kUnsupported, "decode_attention_cuda: a balanced plan for the row-owning kernel");
  }
  const unsigned entries = static_cast<unsigned>(balanced ? plan.balance_grid : blocks_x);
  const unsigned grid_y = balanced ? 1u : static_cast<unsigned>(plan.splits);
  I::facts();  // the shared-memory opt-in, where planning did not ask (a plan made elsewhere)
  return launch_kernel(kernel, dim3(entries, grid_y, 1), I::threads,
                       plan.mma_sm_exclusive ? I::sm_exclusive() : I::smem, plan.cluster ? grid_y : 1, plan.programmatic,
                       stream, p, splits, ws, plan.cluster, static_cast<int>(plan.row_groups));
}

// fn(Mma<T, D, W, MT, KW>{}) where that instance is built, else none(). Plain function templates, no generic
// lambdas: nvcc's host pass deduced `decltype(t)` of a lambda's `auto t` as a reference (Mma<__half&, ...>,
// whose kernel stub the device code never registered: every query about it failed, and the planner then
// took the tensor-core kernel for absent; H200 run of 2026-12-01 20:40 UTC).
template <typename T, int D, int W, int MT, typename Fn, typename None, int KW = 16>
auto mma_instance(Fn& fn, None& none) {
  if constexpr (mma_instance_exists(D, W, MT, KW)) {
    return fn(Mma<T, D, W, MT, KW>{});
  } else {
    return none();
  }
}

template <typename T, int D, typename Fn, typename None>
auto mma_typed(int warps, int tiles, int warp_keys, Fn& fn, None& none) {
  if (warp_keys == 32) {  // 4 warps, one or two M-tiles (mma_instance_exists)
    if (warps != 4) return none();
    return tiles == 1 ? mma_instance<T, D, 4, 1, Fn, None, 32>(fn, none)
                      : tiles == 2 ? mma_instance<T, D, 4, 2, Fn, None, 32>(fn, none) : none();
  }
  if (warp_keys != 16) return none();
  if (tiles == 1) return warps == 8 ? mma_instance<T, D, 8, 1>(fn, none) : warps == 4 ? mma_instance<T, D, 4, 1>(fn, none) : none();
  if (warps != 8) return none();
  switch (tiles) {
    case 2: return mma_instance<T, D, 8, 2>(fn, none);
    case 4: return mma_instance<T, D, 8, 4>(fn, none);
    case 8: return mma_instance<T, D, 8, 8>(fn, none);
    default: return none();
  }
}

template <int D, typename Fn, typename None>
auto with_mma_instance(ScalarType dtype, int warps, int tiles, int warp_keys, Fn&& fn, None&& none) {
  if (dtype == ScalarType::kFloat16) return mma_typed<__half, D>(warps, tiles, warp_keys, fn, none);
  if (dtype == ScalarType::kBFloat16) return mma_typed<__nv_bfloat16, D>(warps, tiles, warp_keys, fn, none);
  return none();
}

template <int D>
MmaFacts mma_facts(ScalarType dtype, int warps, int tiles, int warp_keys) {
  return with_mma_instance<D>(dtype, warps, tiles, warp_keys, [](auto inst) { return decltype(inst)::facts(); },
                              [] { return MmaFacts{}; });
}

template <int D>
Status mma_launch(const DecodeAttentionParams& p, const decode_plan::Plan& plan, const SplitCount& splits,
                  const Workspace& ws, cudaStream_t stream) {
  return with_mma_instance<D>(
      p.dtype, plan.mma_warps, plan.mma_tiles, plan.mma_warp_keys,
      [&](auto inst) { return launch_mma_instance<decltype(inst)>(p, plan, splits, ws, stream); },
      [&] {
        return Status(Code::kInvalidArgument, "decode_attention_cuda: no tensor-core kernel for head_dim " +
                                                  std::to_string(D) + ", " + std::to_string(plan.mma_warps) +
                                                  " warps, " + std::to_string(plan.mma_tiles) + " M-tiles, " +
                                                  std::to_string(plan.mma_warp_keys) + " keys a warp");
      });
}

#define PVT_DECODE_MMA_INSTANTIATE(D)                                                                  \
  template MmaFacts mma_facts<D>(ScalarType, int, int, int);                                          \
  template Status mma_launch<D>(const DecodeAttentionParams&, const decode_plan::Plan&, const SplitCount&, \
                                const Workspace&, cudaStream_t);

}  // namespace decode_cuda
}  // namespace pvt

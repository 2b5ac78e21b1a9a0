// CUDA decode attention over a KV cache read in place (split-KV, flash-decoding style): the launcher.
//
// Three kernel families, one plan (decode_attention_plan.h: pure host code, tested on the CPU). Every
// block takes one (entry b, kv head), a group of query rows that share that kv head (GQA group x Tq) and
// one slice ("split") of the keys:
//   * decode_attention_kernel (decode_attention_one_row_cuda.cuh): up to 4 rows held in registers, keys
//     loaded straight from HBM. One row per kv head (MHA decode), masks, layouts without 16-byte loads.
//   * decode_attention_mma_kernel (decode_attention_mma_cuda.cuh): 2-128 unmasked rows per kv head of a
//     16-bit cache with head_dim 64, 80, 96, 128 or 256 (GQA, MQA, Tq > 1) on tensor cores: K/V tiles in
//     shared memory, the rows as 1-8 M-tiles of mma.sync. Its instances are built per head dim in
//     decode_attention_mma_d*_cuda.cu (decode_attention_mma_launch_cuda.cuh). Its row-owning variant
//     (decode_attention_mma_rows_cuda.cuh: each warp 16 rows over whole K/V tiles) takes large row groups.
//   * decode_attention_rows_kernel (decode_attention_rows_cuda.cuh): the other unmasked cases with
//     several rows per kv head; K/V tiles staged in shared memory by cp.async, one row per warp.
// With several splits of a short context, the tensor-core kernel on Hopper launches the splits of a
// kv head as one thread-block cluster and merges them through distributed shared memory at the end;
// otherwise merge_splits_kernel merges the partials from the workspace (decode_attention_merge_cuda.cuh),
// launched as a programmatic dependent launch. The main kernels are launched that way too, behind
// whatever kernel is ahead on the stream (programmatic_launch_cuda.cuh): their launch overlaps its end,
// and each waits for it before touching memory.
//
// This file asks the device what the planner needs (SM count; the occupancy of the kernel instance the
// plan picked, once per instance), maps a plan to its kernel instance (one place for the planner's
// questions and the launch), and launches. Measured against cuDNN: docs/H200_DECODE_PARITY.md.
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../core/cuda_check.h"
#include "decode_attention.h"
#include "decode_attention_common_cuda.cuh"
#include "decode_attention_launch_cuda.cuh"
#include "decode_attention_merge_cuda.cuh"
#include "decode_attention_merge_wide_cuda.cuh"
#include "decode_attention_mma_launch_cuda.cuh"
#include "decode_attention_one_row_cuda.cuh"
#include "decode_attention_plan.h"
#include "decode_attention_rows_cuda.cuh"

namespace pvt {
namespace {

using namespace decode_cuda;  // NOLINT: the kernels and their shared helpers
using decode_plan::Plan;

// ---- The element type: the one dtype switch. fn(T{}) for float, __half or __nv_bfloat16.
template <typename Fn>
Status by_dtype(ScalarType t, Fn&& fn) {
  switch (t) {
    case ScalarType::kFloat32: return fn(float{});
    case ScalarType::kFloat16: return fn(__half{});
    case ScalarType::kBFloat16: return fn(__nv_bfloat16{});
    default:
      return Status(Code::kInvalidArgument,
                    std::string("decode_attention_cuda: unsupported dtype ") + scalar_type_name(t));
  }
}

// ---- Device questions, each asked once per kernel instance (none is a stream operation: fine while a
// graph is being captured). A failed query only makes the plan less good: the error is cleared.

int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    return 108;
  }
  return n;
}

// ---- Kernel instances. Each is a type whose statics hold the device's answers for that instance.

template <typename T, int VEC, int CPL, int ROWS, int LANES, bool MASKED>
struct OneRow {
  static constexpr auto kernel = decode_attention_kernel<T, VEC, CPL, ROWS, LANES, MASKED>;
  static int resident() {
    static const int n = query_resident(kernel, kThreads, 0, 4);
    return n;
  }
};

template <typename T, int LANES>
struct Rows {
  static constexpr auto kernel = decode_attention_rows_kernel<T, LANES>;
  static int resident() {
    static const int n = query_resident(kernel, kThreads, 0, 4);
    return n;
  }
};

// fn(std::integral_constant<int, D>{}) for a head dim of the tensor-core kernel (the plan checked it).
template <typename Fn>
auto by_mma_head_dim(int64_t D, Fn&& fn) {
  switch (D) {
    case 64: return fn(std::integral_constant<int, 64>{});
    case 80: return fn(std::integral_constant<int, 80>{});
    case 96: return fn(std::integral_constant<int, 96>{});
    case 256: return fn(std::integral_constant<int, 256>{});
    default: return fn(std::integral_constant<int, 128>{});
  }
}

// The tensor-core kernel needs sm_80 instructions (mma.sync, ldmatrix, cp.async). In a build whose code
// for this device comes from older targets (a T4 or V100 build, or PTX for one) they are compiled out,
// so the plan must not pick that kernel there.
bool mma_compiled() {
  static const bool ok = mma_facts<128>(ScalarType::kFloat16, 4, 1, 16).sm80;
  return ok;
}

template <typename T, typename Fn>
Status with_rows(const Plan& plan, Fn&& fn) {
  switch (plan.lanes) {
    case 8: return fn(Rows<T, 8>{});
    case 16: return fn(Rows<T, 16>{});
    default: return fn(Rows<T, 32>{});
  }
}

template <typename T, typename Fn>
Status with_one_row(const DecodeAttentionParams& p, const Plan& plan, Fn&& fn) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  const bool masked = p.mask != nullptr;
  if (masked && plan.rows != 1) {
    return Status(Code::kUnsupported, "decode_attention_cuda: a masked plan must have one row per block");
  }
  auto go = [&](auto vec_c, auto cpl_c, auto rows_c, auto lanes_c) -> Status {
    constexpr int V = decltype(vec_c)::value, C = decltype(cpl_c)::value;
    constexpr int Rw = decltype(rows_c)::value, L = decltype(lanes_c)::value;
    if constexpr (Rw == 1) {
      if (masked) return fn(OneRow<T, V, C, 1, L, true>{});
    }
    return fn(OneRow<T, V, C, Rw, L, false>{});
  };
  using I1 = std::integral_constant<int, 1>;
  using I2 = std::integral_constant<int, 2>;
  using I4 = std::integral_constant<int, 4>;
  using I8 = std::integral_constant<int, 8>;
  using I16 = std::integral_constant<int, 16>;
  using I32 = std::integral_constant<int, 32>;
  using IV = std::integral_constant<int, kVec>;
  using IF = std::integral_constant<int, kFallbackChunks>;
  if (!plan.vectorised) return go(I1{}, IF{}, I1{}, I32{});
  auto by_lanes = [&](auto cpl_c, auto rows_c) -> Status {
    switch (plan.lanes) {
      case 8: return go(IV{}, cpl_c, rows_c, I8{});
      case 16: return go(IV{}, cpl_c, rows_c, I16{});
      default: return go(IV{}, cpl_c, rows_c, I32{});
    }
  };
  if (plan.chunks == 1) {
    switch (plan.rows) {
      case 1: return by_lanes(I1{}, I1{});
      case 2: return by_lanes(I1{}, I2{});
      default: return by_lanes(I1{}, I4{});
    }
  }
  if constexpr (sizeof(T) == 4) {  // only fp32 with head_dim > 128 needs two chunks per lane
    if (plan.chunks == 2) {
      if (plan.rows == 1) return go(IV{}, I2{}, I1{}, I32{});
      return go(IV{}, I2{}, I2{}, I32{});
    }
  }
  return Status(Code::kInvalidArgument, "decode_attention_cuda: no kernel for " + std::to_string(plan.chunks) +
                                            " chunks per lane");
}

// What plan_grid needs about the instance plan_kernel picked.
template <typename T>
Status occupancy_of(const DecodeAttentionParams& p, const Plan& plan, decode_plan::KernelOccupancy* occ) {
  if (plan.mma_rows) {  // the row-owning kernel: its one instance (the plan's warps), in the slot of its warps
    const MmaFacts f = by_mma_head_dim(p.head_dim, [&](auto d) { return mma_rows_facts<decltype(d)::value>(p.dtype, plan.mma_warps); });
    const int w = plan.mma_warps == 8;
    occ->mma_resident[w] = f.resident;
    occ->mma_cluster_limit[w] = f.cluster_limit;
    std::copy(f.max_clusters, f.max_clusters + kMaxClusterSplits + 1, occ->mma_max_clusters[w]);
    return Status::Ok();
  }
  if (plan.mma_kernel) {  // the plan's M-tiles and keys a warp with 4 and with 8 warps (none: resident 0)
    for (int w : {4, 8}) {
      const MmaFacts f = by_mma_head_dim(p.head_dim, [&](auto d) {
        return mma_facts<decltype(d)::value>(p.dtype, w, plan.mma_tiles, plan.mma_warp_keys);
      });
      occ->mma_resident[w == 8] = f.resident;
      occ->mma_cluster_limit[w == 8] = f.cluster_limit;
      std::copy(f.max_clusters, f.max_clusters + kMaxClusterSplits + 1, occ->mma_max_clusters[w == 8]);
    }
    return Status::Ok();
  }
  auto ask = [&](auto inst) {
    occ->resident = decltype(inst)::resident();
    return Status::Ok();
  };
  return plan.rows_kernel ? with_rows<T>(plan, ask) : with_one_row<T>(p, plan, ask);
}

// ---- Launches.

// The key-slice tensor-core kernel's L2 prefetch before its wait (choose_prefetch_tiles): the first wave is the
// grid's blocks up to one (sm-exclusive plans) or two an SM.
int prefetch_tiles_of(const DecodeAttentionParams& p, const Plan& plan) {
  const int64_t tile = decode_plan::mma_tile_keys(plan.mma_warps, plan.mma_tiles, plan.mma_warp_keys);
  const int64_t blocks = p.batch * p.kv_heads * plan.row_groups * plan.splits;
  const int64_t first_wave = std::min<int64_t>(blocks, plan.sms * (plan.mma_sm_exclusive ? 1 : 2));
  const int64_t tiles = (p.kv_len + plan.splits * tile - 1) / (plan.splits * tile);
  return decode_plan::choose_prefetch_tiles(decode_plan::keys_known_on_host(p), plan.programmatic,
                                            decode_plan::options_of(p).prefetch_tiles, tiles, first_wave,
                                            tile * p.head_dim * 2 * 2, l2_bytes_once());  // K and V, 16-bit
}

template <typename T>
Status launch_typed(const DecodeAttentionParams& p, const Plan& plan, cudaStream_t stream) {
  Workspace ws;
  const bool merge_kernel = plan.splits > 1 && !plan.cluster;
  if (merge_kernel) {
    ws.acc = static_cast<float*>(p.workspace);
    ws.ml = ws.acc + plan.splits * plan.rows_total * p.head_dim;
    if (plan.balance_blocks > 0) {  // the split size the balanced blocks chose, after the partials
      ws.balance_chunk = reinterpret_cast<int32_t*>(ws.ml + plan.splits * plan.rows_total * 2);
    }
  }
  SplitCount splits(plan.splits, plan.split_keys);
  splits.balance_blocks = static_cast<int32_t>(plan.balance_blocks);
  splits.balance_min_units = static_cast<int32_t>(plan.balance_min_units);
  splits.balance_wave = static_cast<int32_t>(plan.balance_wave);
  if (plan.balance_plain_splits > 0) splits.set_plain(plan.balance_plain_splits);
  if (plan.mma_kernel && !plan.mma_rows && plan.balance_blocks == 0) splits.prefetch_tiles = prefetch_tiles_of(p, plan);
  const unsigned entries = static_cast<unsigned>(p.batch * p.kv_heads), grid_y = static_cast<unsigned>(plan.splits);
  Status s;
  if (plan.mma_rows) {
    s = by_mma_head_dim(p.head_dim, [&](auto d) { return mma_rows_launch<decltype(d)::value>(p, plan, splits, ws, stream); });
  } else if (plan.mma_kernel) {
    s = by_mma_head_dim(p.head_dim, [&](auto d) { return mma_launch<decltype(d)::value>(p, plan, splits, ws, stream); });
  } else if (plan.rows_kernel) {
    s = with_rows<T>(plan, [&](auto inst) {
      return launch_kernel(decltype(inst)::kernel, dim3(entries, grid_y, static_cast<unsigned>(plan.row_groups)),
                           kThreads, 0, 1, plan.programmatic, stream, p, splits, ws);
    });
  } else {  // the one-row kernel's cluster variant measured slower: never a cluster (plan_cluster)
    s = with_one_row<T>(p, plan, [&](auto inst) {
      return launch_kernel(decltype(inst)::kernel, dim3(entries, grid_y, static_cast<unsigned>(plan.row_groups)),
                           kThreads, 0, 1, plan.programmatic, stream, p, splits, ws, false);
    });
  }
  PVT_RETURN_IF_ERROR(s);
  if (merge_kernel) {
    // Programmatic dependent launch (Hopper), always: the merge's launch overlaps the main kernel's
    // tail instead of following its end; older GPUs ignore the attribute and serialise as usual.
    const dim3 rows(static_cast<unsigned>(plan.rows_total));
    if (plan.merge_wide) {  // four elements a load where the rows' accumulators are 16-byte aligned
      const bool v4 = p.head_dim % 4 == 0 && reinterpret_cast<uintptr_t>(ws.acc) % 16 == 0;
      return launch_kernel(v4 ? merge_splits_wide_kernel<T, 4> : merge_splits_wide_kernel<T, 1>, rows,
                           decode_plan::kMergeThreads, 0, 1, true, stream, p, splits, ws);
    }
    // As few splits a step as the plan has (fewer registers, more blocks an SM). Fixed splits keep kMergeChunk:
    // their count follows kv_len, and a batch-invariant row must not depend on it (the fold's order would).
    const int n = plan.split_keys > 0 || plan.splits > 8 ? kMergeChunk : plan.splits > 4 ? 8 : 4;
    if (decode_plan::merge_warp_of(p, plan)) {  // a warp a row (head dims 64, 96, 128; many rows)
      const int v = static_cast<int>(p.head_dim / 32);
      auto warp_merge = [&](auto kernel) {
        const dim3 blocks(static_cast<unsigned>((plan.rows_total + kMergeWarpRows - 1) / kMergeWarpRows));
        return launch_kernel(kernel, blocks, 32 * kMergeWarpRows, 0, 1, true, stream, p, splits, ws);
      };
      auto by_v = [&](auto nc) {
        constexpr int N = decltype(nc)::value;
        return v == 2 ? warp_merge(merge_splits_warp_kernel<T, N, 2>)
               : v == 3 ? warp_merge(merge_splits_warp_kernel<T, N, 3>)
                        : warp_merge(merge_splits_warp_kernel<T, N, 4>);
      };
      return n == kMergeChunk ? by_v(std::integral_constant<int, kMergeChunk>{})
             : n == 8         ? by_v(std::integral_constant<int, 8>{})
                              : by_v(std::integral_constant<int, 4>{});
    }
    const int threads = static_cast<int>(std::min<int64_t>(256, (p.head_dim + 31) / 32 * 32));
    const auto merge = n == kMergeChunk ? merge_splits_kernel<T, kMergeChunk>
                       : n == 8         ? merge_splits_kernel<T, 8>
                                        : merge_splits_kernel<T, 4>;
    PVT_RETURN_IF_ERROR(launch_kernel(merge, rows, threads, 0, 1, true, stream, p, splits, ws));
  }
  return Status::Ok();
}

Status check_cuda_params(const DecodeAttentionParams& p) {
  PVT_RETURN_IF_ERROR(check_decode_attention_params(p));
  PVT_RETURN_IF_ERROR(decode_plan::check_options(decode_plan::options_of(p)));
  PVT_RETURN_IF_ERROR(decode_plan::check_options_for(p));
  const bool varlen = p.cu_seqlens_q || p.kv_batch_index || p.cache_seqlens || p.kv_mapped;
  if (varlen && p.mask != nullptr) {
    return Status(Code::kInvalidArgument,
                  "decode_attention_cuda: a mask cannot be combined with cu_seqlens_q, kv_batch_index, "
                  "cache_seqlens or kv_mapped");
  }
  if (p.head_dim > kCudaMaxHeadDim) {
    return Status(Code::kUnsupported, "decode_attention_cuda: head_dim " + std::to_string(p.head_dim) +
                                          " is larger than the supported " + std::to_string(kCudaMaxHeadDim));
  }
  const int64_t rows = p.q_heads / p.kv_heads * p.q_len;  // row groups: at most this many
  if (p.batch * p.kv_heads > INT32_MAX || rows > 65535 || p.batch * p.q_heads * p.q_len > INT32_MAX ||
      p.kv_len > INT32_MAX) {
    return Status(Code::kUnsupported, "decode_attention_cuda: batch * kv_heads, the query rows per kv head, "
                                      "batch * q_heads * q_len or kv_len exceed the grid limits");
  }
  return Status::Ok();
}

}  // namespace

Status decode_attention_cuda_plan(const DecodeAttentionParams& p, Plan* plan) {
  PVT_RETURN_IF_ERROR(check_cuda_params(p));
  *plan = decode_plan::plan_kernel(p, decode_plan::DeviceFacts{sm_count(), mma_compiled()});
  return by_dtype(p.dtype, [&](auto t) {
    decode_plan::KernelOccupancy occ;
    PVT_RETURN_IF_ERROR(occupancy_of<decltype(t)>(p, *plan, &occ));
    return decode_plan::plan_grid(p, occ, plan);
  });
}

Status decode_attention_cuda_run(const DecodeAttentionParams& p, const Plan& plan, void* stream) {
  if (p.workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes > 0 && p.workspace == nullptr)) {
    return Status(Code::kInvalidArgument, "decode_attention_cuda: needs a workspace of " +
                                              std::to_string(plan.workspace_bytes) + " bytes, got " +
                                              std::to_string(p.workspace_bytes));
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return by_dtype(p.dtype, [&](auto t) { return launch_typed<decltype(t)>(p, plan, s); });
}

size_t decode_attention_cuda_workspace_bytes(const DecodeAttentionParams& p) {
  Plan plan;
  return decode_attention_cuda_plan(p, &plan).ok() ? plan.workspace_bytes : 0;
}

Status decode_attention_cuda(const DecodeAttentionParams& p, void* stream) {
  Plan plan;
  PVT_RETURN_IF_ERROR(decode_attention_cuda_plan(p, &plan));
  return decode_attention_cuda_run(p, plan, stream);
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

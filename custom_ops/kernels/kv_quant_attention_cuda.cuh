// What the CUDA kernels over 8-bit caches share: the split plan, what an entry reads, the workspace of
// partial softmax states that merge_kernel (kv_quant_attention_cuda.cu) combines, and how a merged
// state becomes an output row. Two kernels write those partials: the CUDA-core one
// (kv_quant_attention_cuda.cu) and the tensor-core one (kv_quant_attention_mma_cuda.cu), which writes
// its rows itself where it has one split (Launch::mma_writes_rows: no merge kernel).
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../core/status.h"
#include "float_convert_cuda.cuh"
#include "kv_quant_attention.h"

namespace pvt {
namespace quant_cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Block (split, kv head [x head chunk], entry) walks keys [split * keys_per_split, + keys_per_split).
// Query heads: group per kv head, heads_per_block of them per block (a chunk).
struct Launch {
  int splits = 1;
  int64_t keys_per_split = 0;
  int group = 1, heads_per_block = 1;
  bool mma = false;  // the tensor-core kernel (mma_takes) writes the partials
  int warps = 4;     // ... in blocks of this many warps (4 or 8), over tiles of mma_tile_keys(warps, warp_keys) keys
  int warp_keys = 16;  // ... each warp taking this many keys of a tile (16, or 32 with 4 warps)
  bool keys_on_m = false;  // ... with the keys on the MMA's M side (mma_keys_kernel: groups of at most 8)
  bool programmatic = true;  // tensor-core split and merge as programmatic dependent launches (!options.no_pdl)
  int prefetch_tiles = 0;    // ... each block's first tiles asked of L2 before it waits (choose_prefetch_tiles)
  // The tensor-core kernel with one split writes its rows itself and merge_kernel is not launched.
  __host__ __device__ bool mma_writes_rows() const { return mma && splits == 1; }
};

// What entry b reads: its query row (-1: none), cache row and key count (0 when refused).
struct EntryView {
  int64_t q_row, row, n;
  bool refused;
};

__device__ __forceinline__ EntryView entry_of(const DecodeAttentionParams& a, int64_t b) {
  EntryView e;
  const int64_t q_count = a.cu_seqlens_q ? a.cu_seqlens_q[b + 1] - a.cu_seqlens_q[b] : 1;
  e.q_row = q_count == 1 ? (a.cu_seqlens_q ? a.cu_seqlens_q[b] : b) : -1;
  e.row = a.kv_batch_index ? a.kv_batch_index[b] : b;
  e.n = a.cache_seqlens ? a.cache_seqlens[e.row] + q_count : a.kv_len;
  e.refused = e.q_row >= 0 && (e.n > a.kv_len || (a.kv_mapped && e.n > a.kv_mapped[e.row]));
  if (e.refused || e.q_row < 0) e.n = 0;
  return e;
}

// Where the partial state of (entry b, query head h, split) starts in the workspace (floats): max
// (log2 units), sum, then the D unnormalised outputs.
__device__ __forceinline__ int64_t partial_at(const DecodeAttentionParams& a, const Launch& l, int64_t b, int64_t h,
                                              int split) {
  return ((b * a.q_heads + h) * l.splits + split) * (a.head_dim + 2);
}

// Output element d of query head h of entry e (which has a query) from a merged softmax state: max m (log2
// units), sum l and unnormalised accumulator acc; at d == 0 also its lse (natural log; -inf where no key
// was seen, the output then zeros). What merge_kernel and the tensor-core kernel's own merge end with.
template <typename T>
__device__ __forceinline__ void write_head(const DecodeAttentionParams& a, const EntryView& e, int64_t h, int64_t d,
                                           float m, float l, float acc) {
  const int64_t row_stride = a.cu_seqlens_q ? a.out_stride[1] : a.out_stride[0];
  T* out = static_cast<T*>(a.out) + e.q_row * row_stride + h * a.out_stride[2];
  out[d * a.out_stride[3]] = cuda_float::from_float<T>(l > 0.f ? acc / l : 0.f);
  if (d == 0 && a.lse) a.lse[e.q_row * a.q_heads + h] = l > 0.f ? m * kLn2 + logf(l) : -INFINITY;
}

// Tensor-core path (kv_quant_attention_mma_cuda.cu): a block takes up to 16 query heads of one kv
// head (the M side of mma.m16n8k16) over tiles of 16 or 32 keys a warp; a split is whole tiles.
__host__ __device__ constexpr int mma_tile_keys(int warps, int warp_keys) { return warp_keys * warps; }
constexpr int kMmaHeads = 16;

// Whether the tensor-core kernel takes p (q and out float16 / bfloat16, head_dim 64 or 128, a device
// of compute capability 8.0 or newer, p.tensor_cores); else the CUDA-core kernel does.
bool mma_takes(const QuantAttentionParams& p, int device_major);

// Blocks of the tensor-core kernel instance for p, in blocks of `warps` warps of `warp_keys` keys (keys on
// M or query heads on M), resident on an SM of the current device (asked once per instance; 1 where the
// query fails): what the split count fills waves of.
int quant_mma_resident(const QuantAttentionParams& p, int warps, int warp_keys, bool keys_on_m);

// Queues the tensor-core split kernel for every (split, kv head, head chunk, entry) of `l`.
Status quant_mma_split(const QuantAttentionParams& p, const Launch& l, float* ws, cudaStream_t stream);

}  // namespace quant_cuda
}  // namespace pvt

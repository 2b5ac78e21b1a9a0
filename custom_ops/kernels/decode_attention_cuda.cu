// CUDA decode attention over a KV cache read in place (split-KV, flash-decoding style).
//
// Two kernels, one plan. Every block takes one (entry b, kv head), a group of query rows that share
// that kv head (GQA group x Tq) and one slice ("split") of the keys:
//   * decode_attention_kernel (here): up to ROWS rows held in registers. A "key group" of LANES lanes
//     holds one key: each lane loads VEC contiguous elements per chunk (16-byte loads when the layout
//     allows), so a head_dim-128 fp16 key is 16 lanes x 16 bytes and a warp reads two keys per load
//     instruction. Each lane first issues the loads of kTile keys of K and V (8 x 16 bytes in flight
//     per lane, what keeps HBM busy), then scores them and folds them into a float32 online softmax
//     with ONE rescale per tile. Key groups merge by shuffles, warps through shared memory. Used for
//     one row per kv head (MHA decode), masks, and layouts without 16-byte loads.
//   * decode_attention_mma_kernel (decode_attention_mma_cuda.cuh): 2-16 unmasked rows per kv head of
//     a 16-bit cache with head_dim 64 or 128 (GQA, Tq > 1) on tensor cores: K/V tiles in shared memory,
//     all rows at once as the M side of mma.sync.
//   * decode_attention_rows_kernel (decode_attention_rows_cuda.cuh): the other unmasked cases with
//     several rows per kv head; K/V tiles staged in shared memory by cp.async, one row per warp.
// With several splits of a short context, the tensor-core kernel on Hopper launches the splits of a
// kv head as one thread-block cluster and merges them through distributed shared memory at the end
// (decode_attention_finish_cuda.cuh): one kernel, no workspace. Otherwise a second small kernel
// merges the partial results from the workspace (as FlashInfer's and flash-attention's split-KV
// decode do), launched as a programmatic dependent launch. The main kernels are launched that way too,
// behind whatever kernel is ahead on the stream (programmatic_launch_cuda.cuh): their launch overlaps its
// end, and each waits for it before touching memory.
//
// The number of splits depends only on host-known sizes (kv_len as an upper bound, batch, heads,
// the device's SM count and the kernel's occupancy), so a launch never reads the device and can be
// captured in a CUDA graph; per-entry lengths (cache_seqlens) are read by the kernel, which spreads
// each entry's own keys over the splits (split_range), so a bound far above the lengths (a cache
// planned for its capacity) still keeps every split busy. Measured against PyTorch's SDPA:
// docs/H200_DECODE_PARITY.md.
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "../core/cuda_check.h"
#include "decode_attention.h"
#include "decode_attention_common_cuda.cuh"
#include "decode_attention_finish_cuda.cuh"
#include "decode_attention_mma_cuda.cuh"
#include "decode_attention_rows_cuda.cuh"

namespace pvt {
namespace {

using namespace decode_cuda;  // NOLINT: the kernels' shared helpers

constexpr int kTile = 4;                   // keys per key group whose loads are in flight together
constexpr int64_t kMinKeysPerSplit = 128;  // below this a split costs more than it saves (but balance_splits)
constexpr int kMaxSplits = 128;
constexpr int kFallbackChunks = 8;         // scalar path: 32 lanes x 8 elements = head_dim 256

// Keys one pass of a one-row block covers (its unit of work): kTile keys for each of its key groups.
__host__ __device__ constexpr int block_step(int lanes) { return kWarps * (32 / lanes) * kTile; }

struct Plan {
  bool vectorised = false;
  int vec = 1;           // elements per chunk
  int lanes = 32;        // LANES: lanes per key (power of two, 8..32)
  int chunks = 1;        // CPL: chunks per lane
  int rows = 1;          // ROWS: query rows per block
  int64_t row_groups = 1;
  int64_t splits = 1;
  int64_t keys_per_split = 0;  // of a bound-long entry: a host estimate (the kernels use split_range)
  int64_t rows_total = 0;  // B * Hq * Tq: rows of the workspace
  bool rows_kernel = false;  // decode_attention_rows_kernel: K/V tiles in shared memory, a row per warp
  bool mma_kernel = false;   // decode_attention_mma_kernel: all rows of a kv head on tensor cores
  int mma_warps = 4;         // ... with blocks of this many warps (4 or 8: tiles of 64 or 128 keys)
  bool cluster = false;      // the splits of a row group are one thread-block cluster: merged in the
                             // kernel (decode_attention_finish_cuda.cuh), no workspace, no merge kernel
  int64_t sms = 0;           // the current device's SM count, asked once per plan
};


template <typename T, int VEC, int CPL, int ROWS, int LANES, bool MASKED>
__global__ void __launch_bounds__(kThreads)
    decode_attention_kernel(const DecodeAttentionParams p, const SplitCount splits, Workspace ws,
                            const bool /*cluster: never, see plan_cluster*/) {
  constexpr int E = VEC * CPL;  // elements of one row a lane holds
  constexpr int kKeysPerWarp = 32 / LANES;
  constexpr int kGroups = kWarps * kKeysPerWarp;  // key groups in the block
  constexpr int kStep = block_step(LANES);
  const int64_t D = p.head_dim, Tq = p.q_len;
  const int64_t G = p.q_heads / p.kv_heads, R = G * Tq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int lk = lane % LANES;                        // lane within the key group
  const int kg = warp * kKeysPerWarp + lane / LANES;  // key group in the block
  const int64_t b = blockIdx.x / p.kv_heads, hk = blockIdx.x % p.kv_heads;
  const int64_t split = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.z) * ROWS;
  const int nrows = static_cast<int>(R - row0 < ROWS ? R - row0 : ROWS);

  wait_for_previous_grid();
  const Entry e = entry_of(p, b);
  if (e.refused && p.error_flag != nullptr && split == 0 && blockIdx.z == 0 && threadIdx.x == 0) {
    *p.error_flag = 1;
  }
  int64_t s_lo, s_hi;
  split_range<kStep, int64_t>(e.n, split, splits, &s_lo, &s_hi);

  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int64_t kbase = e.kv_row * p.k_stride[1] + hk * p.k_stride[2];
  const int64_t vbase = e.kv_row * p.v_stride[1] + hk * p.v_stride[2];

  float qf[ROWS][E], acc[ROWS][E], m[ROWS], l[ROWS];
  int64_t mask_off[ROWS], visible_end[ROWS];
  // Per-lane element offsets of its chunks within a key row.
  int64_t kd[CPL], vd[CPL];
#pragma unroll
  for (int j = 0; j < CPL; ++j) {
    const int64_t d = static_cast<int64_t>(j * LANES + lk) * VEC;
    kd[j] = d < D ? kbase + d * p.k_stride[3] : -1;
    vd[j] = vbase + d * p.v_stride[3];
  }
  const int64_t ks0 = p.k_stride[0], vs0 = p.v_stride[0];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
    const int64_t row = row0 + r, h = hk * G + row / Tq, t = row % Tq;
    const bool live = r < nrows && t < e.q_count;
    if constexpr (MASKED) mask_off[r] = b * p.mask_stride[0] + h * p.mask_stride[1] + t * p.mask_stride[2];
    // Causal, and clipped to this split's end; a row past the entry's queries sees nothing.
    visible_end[r] = live ? (e.past + t + 1 < s_hi ? e.past + t + 1 : s_hi) : 0;
    const int64_t qoff = p.cu_seqlens_q ? (e.q_begin + t) * p.q_stride[1]
                                        : b * p.q_stride[0] + t * p.q_stride[1];
#pragma unroll
    for (int j = 0; j < CPL; ++j) {
#pragma unroll
      for (int x = 0; x < VEC; ++x) {
        const int64_t d = static_cast<int64_t>(j * LANES + lk) * VEC + x;
        acc[r][j * VEC + x] = 0.f;
        qf[r][j * VEC + x] =
            live && d < D ? to_float(q[qoff + h * p.q_stride[2] + d * p.q_stride[3]]) * p.scale : 0.f;
      }
    }
  }

  // The loop bound is the warp's first key, the same for all its lanes: every lane of a warp must
  // reach each shuffle below, also the key groups whose key lies past the end (they score -inf).
  for (int64_t warp_s = s_lo + warp * kKeysPerWarp; warp_s < s_hi; warp_s += kStep) {
    const int64_t s0 = warp_s + (kg - warp * kKeysPerWarp);
    Raw<T, VEC> kr[kTile][CPL], vr[kTile][CPL];
    // All loads of the tile first: 2 * kTile * CPL independent loads in flight per lane.
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      const int64_t s = s0 + static_cast<int64_t>(u) * kGroups;
#pragma unroll
      for (int j = 0; j < CPL; ++j) {
        if (s < s_hi && kd[j] >= 0) {
          kr[u][j] = load_raw<T, VEC>(k + kd[j] + s * ks0);
          vr[u][j] = load_raw<T, VEC>(v + vd[j] + s * vs0);
        } else {
          kr[u][j] = Raw<T, VEC>{};
          vr[u][j] = Raw<T, VEC>{};
        }
      }
    }
    // Scores of the tile, each reduced over the key group's lanes (all lanes end with the sum).
    float x[kTile][ROWS];
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      float kf[E];
#pragma unroll
      for (int j = 0; j < CPL; ++j) unpack<T, VEC>(kr[u][j], &kf[j * VEC]);
      const int64_t s = s0 + static_cast<int64_t>(u) * kGroups;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < E; ++i) dot += qf[r][i] * kf[i];
#pragma unroll
        for (int off = LANES / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if constexpr (MASKED) {
          if (s >= s_hi) {
            dot = -INFINITY;
          } else if (r < nrows) {
            dot += mask_value(p.mask, mask_off[r] + s * p.mask_stride[3], p.mask_type);
          }
        } else if (s >= visible_end[r]) {  // clipped to this split's end at the start
          dot = -INFINITY;
        }
        x[u][r] = dot;
      }
    }
    // One online-softmax step per row for the whole tile.
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float mx = m[r];
#pragma unroll
      for (int u = 0; u < kTile; ++u) mx = fmaxf(mx, x[u][r]);
      if (mx == -INFINITY) continue;  // nothing visible yet
      const float corr = __expf(m[r] - mx);  // 0 when m was -inf
      l[r] *= corr;
#pragma unroll
      for (int i = 0; i < E; ++i) acc[r][i] *= corr;
      m[r] = mx;
#pragma unroll
      for (int u = 0; u < kTile; ++u) x[u][r] = __expf(x[u][r] - mx);  // weight; exp(-inf) = 0
    }
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      float vf[E];
#pragma unroll
      for (int j = 0; j < CPL; ++j) unpack<T, VEC>(vr[u][j], &vf[j * VEC]);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        if (m[r] == -INFINITY) continue;
        const float w = x[u][r];
        l[r] += w;
#pragma unroll
        for (int i = 0; i < E; ++i) acc[r][i] += w * vf[i];
      }
    }
  }

  // K/V are read: the merge kernel (or the next call) may be placed now; it waits for this grid's results.
  allow_next_grid();
  // Merge the key groups of each warp (lanes with the same lk), then the warps.
#pragma unroll
  for (int off = LANES; off < 32; off *= 2) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float m_b = __shfl_xor_sync(0xffffffffu, m[r], off);
      const float l_b = __shfl_xor_sync(0xffffffffu, l[r], off);
      float ca, cb, m_new;
      merge_scales(m[r], m_b, &ca, &cb, &m_new);
#pragma unroll
      for (int i = 0; i < E; ++i) {
        const float a_b = __shfl_xor_sync(0xffffffffu, acc[r][i], off);
        acc[r][i] = acc[r][i] * ca + a_b * cb;
      }
      l[r] = l[r] * ca + l_b * cb;
      m[r] = m_new;
    }
  }

  __shared__ float sm_m[kWarps][ROWS], sm_l[kWarps][ROWS];
  __shared__ float sm_acc[kWarps][ROWS][kCudaMaxHeadDim];
  if (lane < LANES) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (lane == 0) {
        sm_m[warp][r] = m[r];
        sm_l[warp][r] = l[r];
      }
#pragma unroll
      for (int j = 0; j < CPL; ++j) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const int64_t d = static_cast<int64_t>(j * LANES + lk) * VEC + i;
          if (d < D) sm_acc[warp][r][d] = acc[r][j * VEC + i];
        }
      }
    }
  }
  __syncthreads();

  for (int64_t i = threadIdx.x; i < nrows * D; i += kThreads) {
    const int r = static_cast<int>(i / D);
    const int64_t d = i % D;
    const int64_t row = row0 + r, h = hk * G + row / Tq, t = row % Tq;
    if (t >= e.q_count) continue;  // no such query in this entry: nothing to write
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w][r]);
    float sum = 0.f, a = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float c = __expf(sm_m[w][r] - mx);
        sum += sm_l[w][r] * c;
        a += sm_acc[w][r][d] * c;
      }
    }
    if (splits.n == 1) {
      write_row<T>(p, e, b, t, h, d, mx, sum, a);
    } else {
      const int64_t g = (b * p.q_heads + h) * Tq + t;  // row in [B, Hq, Tq]
      const int64_t rows_total = p.batch * p.q_heads * Tq;
      if (d == 0) {
        ws.ml[(split * rows_total + g) * 2] = mx;
        ws.ml[(split * rows_total + g) * 2 + 1] = sum;
      }
      ws.acc[(split * rows_total + g) * D + d] = a;  // zeros when the split saw nothing: the merge reads all
    }
  }
}

// One block per (b, h, t) row: merges the splits' partial softmax results. Splits that saw no key
// (m = -inf, e.g. past a shorter entry's length) get weight 0; every split wrote its accumulator
// (zeros then). Each thread merges its output elements on its own, kMergeChunk splits per step
// (an online softmax over chunks): the chunk's (m, l) and accumulators are loaded together, with
// clamped indices and no branch, so a step is ONE L2 round trip. (A loop over the splits with a
// load behind a branch per split waits out one L2 latency per split: under Nsight Compute 19 us for
// 32 splits on the H200; block-wide reductions of m and then l between the loads cost three round
// trips and four barriers: 3.3-5.2 us a merge against cuDNN's 1.9-2.8 for its own.)
constexpr int kMergeChunk = 16;
template <typename T>
__global__ void merge_splits_kernel(const DecodeAttentionParams p, const int64_t splits, Workspace ws) {
  const int64_t g = blockIdx.x, D = p.head_dim;
  const int tq = static_cast<int>(p.q_len), hq = static_cast<int>(p.q_heads);  // grid limits checked
  const int row = static_cast<int>(blockIdx.x), t = row % tq, h = (row / tq) % hq, b = row / (tq * hq);
  const int64_t rows_total = p.batch * p.q_heads * p.q_len;
  wait_for_previous_grid();  // the main kernel's partials are complete
  // The next kernel (the next layer's attention, launched the same way) may be placed while this one
  // merges: its blocks wait for this grid before they read or write anything.
  allow_next_grid();
  const Entry e = entry_of(p, b);
  if (t >= e.q_count) return;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float m = -INFINITY, l = 0.f, a = 0.f;
    for (int64_t j0 = 0; j0 < splits; j0 += kMergeChunk) {
      float mj[kMergeChunk], lj[kMergeChunk], aj[kMergeChunk];
#pragma unroll
      for (int u = 0; u < kMergeChunk; ++u) {
        const int64_t j = j0 + u < splits ? j0 + u : splits - 1;  // in range: loads without a branch
        const int64_t at = j * rows_total + g;
        mj[u] = ws.ml[at * 2];
        lj[u] = ws.ml[at * 2 + 1];
        aj[u] = ws.acc[at * D + d];
      }
      float mx = m;
#pragma unroll
      for (int u = 0; u < kMergeChunk; ++u) {
        if (j0 + u >= splits) mj[u] = -INFINITY;  // a repeat of the last split: no weight
        mx = fmaxf(mx, mj[u]);
      }
      if (mx == -INFINITY) continue;  // nothing seen yet
      const float c = __expf(m - mx);  // 0 while m is -inf
      l *= c;
      a *= c;
#pragma unroll
      for (int u = 0; u < kMergeChunk; ++u) {
        const float w = __expf(mj[u] - mx);  // 0 for a split that saw nothing
        l += w * lj[u];
        a += w * aj[u];
      }
      m = mx;
    }
    write_row<T>(p, e, b, t, h, d, m, l, a);
  }
}

int64_t elem_bytes(ScalarType t) { return t == ScalarType::kFloat32 ? 4 : 2; }

int next_pow2(int64_t x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    cudaGetLastError();  // clear: a missing count only makes the split choice less good
    return 108;
  }
  return n;
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Tuning knob for benchmarks of the split heuristic: PVT_DECODE_SPLITS=n forces n splits (clamped
// to the valid range). Unset in normal use.
int64_t forced_splits() {
  const char* s = std::getenv("PVT_DECODE_SPLITS");  // read per call: a sweep sets it between calls
  return s ? std::atoll(s) : 0;
}

// Splits of the keys: as many as make ONE full wave of resident blocks (SMs x blocks per SM at the
// kernel's occupancy), never a split of fewer than kMinKeysPerSplit keys. A sweep of forced split
// counts on the H200 (docs/H200_DECODE_PARITY.md) found the time flat or rising past one wave (more
// partials to write and merge, blocks queued behind others) and rising steeply below it (SMs idle).
// Host-known sizes only: capturable in a CUDA graph.
int64_t choose_splits(int64_t base_blocks, int64_t kv_len, int64_t slots) {
  const int64_t max_splits = std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, kv_len / kMinKeysPerSplit));
  // A forced count may go below kMinKeysPerSplit keys a split (to 16), for sweeps of short contexts.
  const int64_t forced = forced_splits();
  if (forced > 0) return std::min<int64_t>({forced, kMaxSplits, std::max<int64_t>(1, (kv_len + 15) / 16)});
  return std::max<int64_t>(1, std::min<int64_t>(max_splits, slots / std::max<int64_t>(1, base_blocks)));
}

// Blocks of `kernel` resident per SM with `threads` threads and `smem` bytes of dynamic shared memory
// (opting in to that much first: over the 48 KiB default for the tensor-core kernel), or `fallback`
// where a query fails. Not a stream operation: fine while a graph is being captured. The callers keep
// the answer in a static per kernel instance, so it is asked once.
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

template <typename T, int VEC, int CPL, int ROWS, int LANES, bool MASKED>
int resident_blocks() {
  static const int n = query_resident(decode_attention_kernel<T, VEC, CPL, ROWS, LANES, MASKED>, kThreads, 0, 4);
  return n;
}

// The tensor-core kernel needs sm_80 instructions (mma.sync, ldmatrix, cp.async). In a build whose code
// for this device comes from older targets (a T4 or V100 build, or PTX for one) they are compiled out,
// so the plan must not pick that kernel there. Asked once (not a stream operation).
bool mma_compiled() {
  static const bool ok = [] {
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, decode_attention_mma_kernel<__half, 128, 4>) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return fa.ptxVersion >= 80 && fa.binaryVersion >= 80;
  }();
  return ok;
}

Plan make_plan(const DecodeAttentionParams& p) {
  Plan plan;
  plan.sms = sm_count();
  const int64_t eb = elem_bytes(p.dtype), D = p.head_dim;
  const int64_t vec = 16 / eb;
  plan.vectorised = D % vec == 0 && p.k_stride[3] == 1 && p.v_stride[3] == 1 && aligned16(p.k) &&
                    aligned16(p.v) && p.k_stride[0] % vec == 0 && p.k_stride[1] % vec == 0 &&
                    p.k_stride[2] % vec == 0 && p.v_stride[0] % vec == 0 && p.v_stride[1] % vec == 0 &&
                    p.v_stride[2] % vec == 0;
  const int64_t R = p.q_heads / p.kv_heads * p.q_len;
  if (plan.vectorised) {
    plan.vec = static_cast<int>(vec);
    const int64_t n_chunks = D / vec;
    plan.lanes = std::max(8, next_pow2(std::min<int64_t>(n_chunks, 32)));
    plan.chunks = static_cast<int>((n_chunks + plan.lanes - 1) / plan.lanes);
    // Rows per block: more rows share each K/V load but cost registers (q and the accumulator
    // live in registers): at most 4, at most 2 when a lane holds two chunks (fp32, head_dim > 128).
    const int max_rows = p.mask != nullptr ? 1 : plan.chunks == 1 ? 4 : 2;
    plan.rows = std::min<int>(max_rows, R <= 1 ? 1 : R <= 2 ? 2 : 4);
  } else {
    plan.vec = 1;
    plan.lanes = 32;
    plan.chunks = kFallbackChunks;
    plan.rows = 1;
  }
  // Several rows per kv head (GQA, Tq > 1), unmasked, a key of 8/16/32 chunks of 16 bytes: the
  // shared-memory kernel (decode_attention_rows_cuda.cuh), one row per warp; for 16-bit caches with up
  // to 16 rows per kv head and head_dim 64 or 128, all rows in one MMA (it copies q rows in 16-byte
  // chunks too: contiguous head dim, 16-byte aligned rows). PVT_DECODE_NO_MMA=1 keeps the row-per-warp
  // kernel and PVT_DECODE_MMA_MHA=1 takes the tensor-core kernel for every unmasked one-row case:
  // benchmark knobs (both ways in one run).
  // One row per kv head (MHA decode) takes the tensor-core kernel where it covers every (entry, kv
  // head) in one wave of its two resident blocks per SM without splitting, and the context is short:
  // on the H200, B=8 S=1k 35.9 against 37.2 us for the one-row kernel, which splits in two and merges;
  // elsewhere the one-row kernel was as fast or faster (B=1, B=32, S=16k; docs/H200_DECODE_PARITY.md).
  const int64_t key_chunks = D * eb / 16, entries = p.batch * p.kv_heads;
  const bool one_wave_short = entries > plan.sms && entries <= 2 * plan.sms && p.kv_len <= 4096;
  const bool q16 = p.q_stride[3] == 1 && aligned16(p.q) && p.q_stride[0] % vec == 0 && p.q_stride[1] % vec == 0 &&
                   p.q_stride[2] % vec == 0;
  const bool mma = eb == 2 && q16 && R <= kMmaMaxRows && (D == 64 || D == 128) && mma_compiled() &&
                   std::getenv("PVT_DECODE_NO_MMA") == nullptr &&
                   (R >= 2 || one_wave_short || std::getenv("PVT_DECODE_MMA_MHA") != nullptr);
  if (plan.vectorised && p.mask == nullptr && (R >= 2 || mma) && D * eb % 16 == 0 &&
      (key_chunks == 8 || key_chunks == 16 || key_chunks == 32)) {
    plan.rows_kernel = !mma;
    plan.mma_kernel = mma;
    plan.lanes = static_cast<int>(key_chunks);
    plan.chunks = 1;
    plan.rows = mma ? kMmaMaxRows : kWarps;
  }
  plan.row_groups = (R + plan.rows - 1) / plan.rows;
  plan.rows_total = p.batch * p.q_heads * p.q_len;
  return plan;
}

// Keys of up to n equal splits; the count then drops where rounding would leave a split empty.
void set_splits(const DecodeAttentionParams& p, Plan* plan, int64_t n) {
  plan->keys_per_split = (p.kv_len + n - 1) / n;
  plan->splits = (p.kv_len + plan->keys_per_split - 1) / plan->keys_per_split;  // no empty split
}

void plan_splits(const DecodeAttentionParams& p, Plan* plan, int resident) {
  const int64_t base = p.batch * p.kv_heads * plan->row_groups;
  set_splits(p, plan, choose_splits(base, p.kv_len, plan->sms * resident));
}

// The one-row kernel's split count (it already splits; every count tried fits one wave of resident
// blocks): the fewest steps a block (split_range spreads an entry's steps evenly over the splits), a tie
// to fewer splits (fewer partials to merge). A block's step is a round trip to HBM: its loads are issued
// together, then used. Blocks resident on one SM overlap those round trips, so in one wave the time
// follows the steps of a block, not the blocks an SM. On the H200 (MHA B=1 S=1k, run 31), each call
// reading a cache not in L2 (as in a decode step, the layer's weights in between): 16 splits of 2 steps
// 10.89-10.94 us against 8 of 4 steps 11.22-11.39 (cuDNN 10.77), per-slot 11.11-11.20 against 11.43-11.56.
// With the same K/V read back to back (L2-resident), 8 splits were the faster (run 20: 8.32-8.46 against
// 8.59-8.72 us); this plans for HBM. It goes past the count choose_splits made only up to kMergeChunk
// splits: merge_splits_kernel reads kMergeChunk splits per L2 round trip, and each chunk more cost about
// 1 us, more than the steps it saved (run 35, MHA B=1 with 8 heads: S=2k, 64 splits 12.92 us against 16
// splits' 10.26; S=4k, 64 splits 14.80 against 32 splits' 12.52; 16 heads at S=2k, 32 splits 12.09
// against 16 splits' 11.52).
// With lengths from the device (cache_seqlens), kv_len only bounds them, and a count that fits the bound
// may not fit a little less: at the bound 1088 (34 steps), 12 and 16 splits both take 3 steps, but at 1024
// keys 12 splits still take 3 and 16 take 2. There the cost is the mean over the whole-step lengths from
// half the bound to the bound (16 splits, then); for a known length, that length's.
// Not for a forced split count (the caller checks).
void balance_splits(const DecodeAttentionParams& p, Plan* plan, int resident, int64_t step) {
  if (plan->splits < 2) return;  // no merge yet: one more kernel costs more than this saves
  const int64_t base = p.batch * p.kv_heads * plan->row_groups;
  // One wave, and no more merge chunks than choose_splits' count already needs (see above).
  const int64_t most = std::min<int64_t>(
      {kMaxSplits, plan->sms * resident / base, std::max<int64_t>(plan->splits, kMergeChunk)});
  const int64_t top = (p.kv_len + step - 1) / step;  // steps of a bound-long entry
  if (plan->splits >= std::min(most, top)) return;  // no other count to try (all long contexts)
  // Lengths costed: their steps from `low` to `top`, at most 65 of them (the host plans every call).
  const int64_t low = p.cache_seqlens != nullptr ? (top + 1) / 2 : top;
  const int64_t stride = std::max<int64_t>(1, (top - low) / 64);
  auto cost = [&](int64_t s) {
    int64_t sum = 0;
    for (int64_t t = top; t >= low; t -= stride) sum += (t + s - 1) / s;  // steps of the longest block
    return sum;
  };
  int64_t best = plan->splits, best_cost = cost(best);
  for (int64_t s = best + 1; s <= most && s <= top; ++s) {
    const int64_t c = cost(s);
    if (c < best_cost) best = s, best_cost = c;
  }
  set_splits(p, plan, best);
}

// Blocks of the tensor-core kernel instance resident per SM (0: it cannot run here, e.g. 196 KiB of
// shared memory on a GPU with less).
template <typename T, int D, int WARPS>
int mma_resident() {
  static const int n =
      query_resident(decode_attention_mma_kernel<T, D, WARPS>, WARPS * 32, mma_smem_bytes(D, WARPS), 0);
  return n;
}

// Dynamic shared memory for a launch of `kernel` that leaves room for ONE of its blocks on an SM: more
// than half of an SM's shared memory (opting in to it once per instance), or `smem` itself where that is
// already so (the 8-warp kernel's 196 KiB), where the device cannot give that much to one block, or where
// a query fails. Why: a plan of one block per SM (the tensor-core kernel's, below, with no more blocks than
// SMs) takes the block scheduler's usual spread of an empty GPU, one block an SM, for granted. A launch
// placed programmatically, while the previous kernel's blocks still run (launch_planned), found SMs in
// another state: on the H200 the 4-warp kernel's 100 KiB blocks doubled up on some SMs and left others
// idle, GQA B=8 S=16k 167 us against 127 launched in stream order (run 36, docs/H200_DECODE_PARITY.md).
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

// Warps per block of the tensor-core kernel, once the splits are known: 8 where every block of the
// grid has an SM to itself (the 8-warp kernel's shared memory allows one block an SM) and a split is
// short, else 4 (two blocks an SM); 4 where the 8-warp kernel cannot be resident. On the H200 (GQA
// 32/8, docs/H200_DECODE_PARITY.md) 8 warps took B=1 S=1k from 6.17 to 5.97 us, B=1 S=4k from 10.53
// to 9.69, B=8 S=1k from 12.52 to 10.66; equal at 2048 keys a split (B=8 S=4k) and slower past it
// (B=8 S=16k, 8192 keys: 128.8 against 125.2), and slower in two waves (B=32 S=1k: 39.3 against
// 35.8). PVT_DECODE_MMA_WARPS=4|8 forces one (benchmark and test knob, read per call).
constexpr int64_t kEightWarpsMaxKeys = 2048;  // keys of one split

// Whether the tensor-core kernel's grid (one block per entry, kv head and split) has no more blocks than
// SMs, so that each block can have an SM to itself.
bool mma_one_block_an_sm(const DecodeAttentionParams& p, const Plan& plan) {
  return p.batch * p.kv_heads * plan.splits <= plan.sms;
}

template <typename T>
int choose_mma_warps(const DecodeAttentionParams& p, const Plan& plan) {
  const char* knob = std::getenv("PVT_DECODE_MMA_WARPS");
  bool eight = knob ? std::atoi(knob) == 8
                    : mma_one_block_an_sm(p, plan) && plan.keys_per_split <= kEightWarpsMaxKeys;
  if (eight) eight = p.head_dim == 64 ? mma_resident<T, 64, 8>() > 0 : mma_resident<T, 128, 8>() > 0;
  return eight ? 8 : 4;
}

// Whether the attention kernels are launched programmatically (wait_for_previous_grid in
// decode_attention_common_cuda.cuh). PVT_DECODE_NO_PDL=1 is a benchmark and test knob (read per call):
// plain stream order instead, to compare both in one process.
bool programmatic_launch() { return std::getenv("PVT_DECODE_NO_PDL") == nullptr; }

// A launch of `threads`-thread blocks on `grid`; with cluster_y > 1 the blocks form clusters of
// (1, cluster_y, 1), with `programmatic` the launch may overlap the end of the kernel ahead of it on the
// stream (attr holds the attributes, so it must outlive the launch).
cudaLaunchConfig_t block_launch(dim3 grid, int threads, size_t smem, cudaStream_t stream, unsigned cluster_y,
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
// compiled out). Asked once per kernel instance, outside any stream work (fine during graph capture).
// PVT_DECODE_NO_CLUSTER=1 is a benchmark and test knob (read per call): the workspace and merge
// kernel instead, to compare both in one process.
template <typename Kernel>
int cluster_limit(Kernel kernel, int threads, size_t smem, int* cached) {
  if (std::getenv("PVT_DECODE_NO_CLUSTER") != nullptr) return 1;
  if (*cached != 0) return *cached;
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
  *cached = limit;
  return limit;
}

// Cluster or workspace, once the split count is known (tensor-core kernel only: the one-row kernel's
// cluster variant measured slower, its main loop compiled to fewer registers). On the H200 (GQA 32/8,
// fp16, third session's kernels; docs/H200_DECODE_PARITY.md) a cluster saves the merge kernel, 1.3-1.6 us, where all blocks fit
// one wave and they are short: B=1 S=1k (8 splits) 9.1 against 10.7 us, B=8 S=1k (2) 14.6 against
// 16.4, B=8 S=4k (2) 38.7 against 40.0. It costs more than that where a cluster's blocks, placed
// within one GPC, are long or many: B=8 S=16k (2 splits) 135.8 against 128.3 us, B=1 S=4k (16)
// 14.3 against 13.6, B=8 S=1k forced to 8 splits 30.5 against 23.2.
constexpr int64_t kClusterMaxKeys = 4096;  // keys of all the splits of one cluster
void plan_cluster(const DecodeAttentionParams& p, Plan* plan, int limit) {
  const bool forced = forced_splits() > 0;
  // A few splits more than a cluster holds (a bound a little past a round length, as a per-slot
  // cache's capacity is): `limit` slightly longer splits as one cluster instead. GQA B=1 with 1088
  // keys, when choose_splits still rounded up to 9 splits: 8 in a cluster 7.17 us against 9 through
  // the workspace 7.92 (H200). Rounding down, 1088 keys plan 8 directly; 1152-1280 keys still plan 9-10.
  if (limit > 1 && !forced && plan->splits > limit && plan->splits <= limit + limit / 4 &&
      p.kv_len <= kClusterMaxKeys && p.batch * p.kv_heads * plan->row_groups * limit <= plan->sms) {
    set_splits(p, plan, limit);
  }
  const int64_t blocks = p.batch * p.kv_heads * plan->row_groups * plan->splits;
  plan->cluster = plan->splits > 1 && plan->splits <= limit && p.kv_len <= kClusterMaxKeys && blocks <= plan->sms;
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

// A main kernel on the plan's grid: with plan.cluster the splits of a row group form one cluster.
template <typename Kernel>
Status launch_planned(Kernel kernel, dim3 grid, int threads, size_t smem, const Plan& plan, cudaStream_t stream,
                      const DecodeAttentionParams& p, Workspace ws) {
  return launch_kernel(kernel, grid, threads, smem, plan.cluster ? static_cast<unsigned>(plan.splits) : 1,
                       programmatic_launch(), stream, p, SplitCount(plan.splits), ws, plan.cluster);
}

template <typename T, int VEC, int CPL, int ROWS, int LANES, bool MASKED>
Status launch_main(const DecodeAttentionParams& p, const Plan& plan, Workspace ws, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads), static_cast<unsigned>(plan.splits),
                  static_cast<unsigned>(plan.row_groups));
  return launch_planned(decode_attention_kernel<T, VEC, CPL, ROWS, LANES, MASKED>, grid, kThreads, 0, plan, stream, p,
                        ws);
}

// The one place that maps a plan to a kernel instance. With launch == false it only completes the
// plan (splits from that instance's occupancy); with launch == true it also queues the kernel.
template <typename T>
Status dispatch(const DecodeAttentionParams& p, Plan* plan, Workspace ws, cudaStream_t stream, bool launch) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  auto go = [&](auto vec_c, auto cpl_c, auto rows_c, auto lanes_c) -> Status {
    constexpr int V = decltype(vec_c)::value, C = decltype(cpl_c)::value;
    constexpr int Rw = decltype(rows_c)::value, L = decltype(lanes_c)::value;
    if (p.mask != nullptr) {  // masked: one row per block (plan.rows is 1), the mask read per key
      if constexpr (Rw == 1) {
        if (!launch) {
          plan_splits(p, plan, resident_blocks<T, V, C, 1, L, true>());
          return Status::Ok();
        }
        return launch_main<T, V, C, 1, L, true>(p, *plan, ws, stream);
      }
      return Status(Code::kUnsupported, "decode_attention_cuda: a masked plan must have one row per block");
    }
    if (!launch) {
      const int resident = resident_blocks<T, V, C, Rw, L, false>();
      plan_splits(p, plan, resident);
      if (forced_splits() == 0) {
        balance_splits(p, plan, resident, block_step(L));
      }
      return Status::Ok();
    }
    return launch_main<T, V, C, Rw, L, false>(p, *plan, ws, stream);
  };
  using I1 = std::integral_constant<int, 1>;
  using I2 = std::integral_constant<int, 2>;
  using I4 = std::integral_constant<int, 4>;
  using I8 = std::integral_constant<int, 8>;
  using I16 = std::integral_constant<int, 16>;
  using I32 = std::integral_constant<int, 32>;
  using IV = std::integral_constant<int, kVec>;
  using IF = std::integral_constant<int, kFallbackChunks>;
  if (plan->mma_kernel) {
    if constexpr (sizeof(T) == 2) {
      auto mma = [&](auto d_c, auto warps_c) -> Status {
        constexpr int Dh = decltype(d_c)::value, W = decltype(warps_c)::value;
        constexpr size_t smem = mma_smem_bytes(Dh, W);
        const auto kernel = decode_attention_mma_kernel<T, Dh, W>;
        if (mma_resident<T, Dh, W>() == 0) {
          return Status(Code::kDriver, "decode_attention_cuda: the tensor-core kernel cannot be resident (" +
                                           std::to_string(smem) + " bytes of shared memory)");
        }
        if (!launch) {
          static int limit = 0;
          plan_cluster(p, plan, cluster_limit(kernel, W * 32, smem, &limit));
          return Status::Ok();
        }
        const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads), static_cast<unsigned>(plan->splits), 1);
        // No more blocks than SMs: one an SM, kept so by their shared memory (sm_exclusive_smem). More
        // (B=32: 256 blocks) run two an SM, as the 4-warp kernel's occupancy allows.
        static const size_t alone = sm_exclusive_smem(kernel, smem);
        return launch_planned(kernel, grid, W * 32, mma_one_block_an_sm(p, *plan) ? alone : smem, *plan, stream, p,
                              ws);
      };
      using I64 = std::integral_constant<int, 64>;
      using I128 = std::integral_constant<int, 128>;
      if (!launch) {
        // One block per SM, not the 2 resident ones of the 4-warp kernel: on the H200 (GQA 32/8, fp16)
        // that was as fast or faster on all 12 shapes of B x S, up to 9% (B = 1, S = 16k); fewer,
        // longer blocks keep their tile pipeline full and leave half the partials to merge
        // (docs/H200_DECODE_PARITY.md).
        const char* knob = std::getenv("PVT_DECODE_MMA_BLOCKS_PER_SM");  // benchmark knob, unset in use
        plan_splits(p, plan, knob ? std::max(1, std::atoi(knob)) : 1);
        plan->mma_warps = choose_mma_warps<T>(p, *plan);
      }
      const bool eight = plan->mma_warps == 8;
      if (p.head_dim == 64) return eight ? mma(I64{}, I8{}) : mma(I64{}, I4{});
      return eight ? mma(I128{}, I8{}) : mma(I128{}, I4{});
    }
    return Status(Code::kInvalidArgument, "decode_attention_cuda: the tensor-core kernel needs a 16-bit cache");
  }
  if (plan->rows_kernel) {
    auto rows = [&](auto lanes_c) -> Status {
      constexpr int L = decltype(lanes_c)::value;
      if (!launch) {
        static const int resident = query_resident(decode_attention_rows_kernel<T, L>, kThreads, 0, 4);
        plan_splits(p, plan, resident);
        return Status::Ok();
      }
      const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads), static_cast<unsigned>(plan->splits),
                      static_cast<unsigned>(plan->row_groups));
      return launch_kernel(decode_attention_rows_kernel<T, L>, grid, kThreads, 0, 1, programmatic_launch(), stream, p,
                           SplitCount(plan->splits), ws);
    };
    switch (plan->lanes) {
      case 8: return rows(I8{});
      case 16: return rows(I16{});
      default: return rows(I32{});
    }
  }
  if (!plan->vectorised) return go(I1{}, IF{}, I1{}, I32{});
  auto by_lanes = [&](auto cpl_c, auto rows_c) -> Status {
    switch (plan->lanes) {
      case 8: return go(IV{}, cpl_c, rows_c, I8{});
      case 16: return go(IV{}, cpl_c, rows_c, I16{});
      default: return go(IV{}, cpl_c, rows_c, I32{});
    }
  };
  if (plan->chunks == 1) {
    switch (plan->rows) {
      case 1: return by_lanes(I1{}, I1{});
      case 2: return by_lanes(I1{}, I2{});
      default: return by_lanes(I1{}, I4{});
    }
  }
  if constexpr (sizeof(T) == 4) {  // only fp32 with head_dim > 128 needs two chunks per lane
    if (plan->chunks == 2) {
      if (plan->rows == 1) return go(IV{}, I2{}, I1{}, I32{});
      return go(IV{}, I2{}, I2{}, I32{});
    }
  }
  return Status(Code::kInvalidArgument, "decode_attention_cuda: no kernel for " + std::to_string(plan->chunks) +
                                            " chunks per lane");
}

Status full_plan(const DecodeAttentionParams& p, Plan* plan) {
  *plan = make_plan(p);
  switch (p.dtype) {
    case ScalarType::kFloat32: return dispatch<float>(p, plan, Workspace{}, nullptr, false);
    case ScalarType::kFloat16: return dispatch<__half>(p, plan, Workspace{}, nullptr, false);
    case ScalarType::kBFloat16: return dispatch<__nv_bfloat16>(p, plan, Workspace{}, nullptr, false);
    default:
      return Status(Code::kInvalidArgument,
                    std::string("decode_attention_cuda: unsupported dtype ") + scalar_type_name(p.dtype));
  }
}

size_t workspace_bytes(const DecodeAttentionParams& p, const Plan& plan) {
  if (plan.splits <= 1 || plan.cluster) return 0;
  return static_cast<size_t>(plan.splits * plan.rows_total * (p.head_dim + 2)) * sizeof(float);
}

template <typename T>
Status launch_typed(const DecodeAttentionParams& p, Plan plan, cudaStream_t stream) {
  Workspace ws;
  const bool merge_kernel = plan.splits > 1 && !plan.cluster;
  if (merge_kernel) {
    ws.acc = static_cast<float*>(p.workspace);
    ws.ml = ws.acc + plan.splits * plan.rows_total * p.head_dim;
  }
  PVT_RETURN_IF_ERROR(dispatch<T>(p, &plan, ws, stream, true));
  if (merge_kernel) {
    // Programmatic dependent launch (Hopper), always: the merge's launch overlaps the main kernel's
    // tail instead of following its end; older GPUs ignore the attribute and serialise as usual.
    const int threads = static_cast<int>(std::min<int64_t>(256, (p.head_dim + 31) / 32 * 32));
    PVT_RETURN_IF_ERROR(launch_kernel(merge_splits_kernel<T>, dim3(static_cast<unsigned>(plan.rows_total)), threads, 0,
                                      1, true, stream, p, plan.splits, ws));
  }
  return Status::Ok();
}

Status check_cuda_params(const DecodeAttentionParams& p) {
  PVT_RETURN_IF_ERROR(check_decode_attention_params(p));
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

size_t decode_attention_cuda_workspace_bytes(const DecodeAttentionParams& p) {
  Plan plan;
  if (!check_cuda_params(p).ok() || !full_plan(p, &plan).ok()) return 0;
  return workspace_bytes(p, plan);
}

Status decode_attention_cuda(const DecodeAttentionParams& p, void* stream) {
  PVT_RETURN_IF_ERROR(check_cuda_params(p));
  Plan plan;
  PVT_RETURN_IF_ERROR(full_plan(p, &plan));
  const size_t need = workspace_bytes(p, plan);
  if (p.workspace_bytes < need || (need > 0 && p.workspace == nullptr)) {
    return Status(Code::kInvalidArgument, "decode_attention_cuda: needs a workspace of " + std::to_string(need) +
                                              " bytes, got " + std::to_string(p.workspace_bytes));
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case ScalarType::kFloat32: return launch_typed<float>(p, plan, s);
    case ScalarType::kFloat16: return launch_typed<__half>(p, plan, s);
    case ScalarType::kBFloat16: return launch_typed<__nv_bfloat16>(p, plan, s);
    default:
      return Status(Code::kInvalidArgument,
                    std::string("decode_attention_cuda: unsupported dtype ") + scalar_type_name(p.dtype));
  }
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

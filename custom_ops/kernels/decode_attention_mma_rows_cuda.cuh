// Decode attention on tensor cores with warps that own query rows, FlashAttention-2's split-KV layout
// (flash_fwd_kernel.h, compute_attn_1rowblock_splitkv), for large row groups (MQA: Falcon 71/1,
// StarCoder 48/1; group x Tq >= 32). The key-slice kernel (decode_attention_mma_cuda.cuh) gives each warp
// 16 keys of a tile and all of the block's rows: a block pays a barrier, a wait and a softmax round per
// 16 keys, and at 2-8 M-tiles its tiles are 16-32 keys long. Nsight Compute on the H200 (Falcon B=16
// S=32k) found that kernel latency-bound: 0.41 instructions a cycle per scheduler, DRAM 14% busy
// (docs/H200_DECODE_PARITY.md).
//
// Block = WARPS warps (2, 4, 5 or 8), one (entry, kv head), one row group of 16 x WARPS query rows and one
// split of the keys. Warp w owns rows [16w, 16w + 16) of the row group for the whole split. K/V tiles of
// mma_rows_tile_keys(D) keys (128 at head_dim 64, else 64) go to shared memory by cp.async,
// mma_rows_stages(D) deep, shared by every warp; each warp computes S = Q K^T for its 16 rows over the
// whole tile, one online-softmax round, and O += P V with P straight from the S accumulators (no shared
// memory, no cross-warp reduction): one barrier per tile. A warp whose rows are all past the group's
// (Falcon's last row group: 7 of 64 rows) only loads. The rows' partials end in shared memory for
// finish_block (one split: written; a cluster: merged there; else the workspace and merge_splits_kernel),
// as the key-slice kernel's do.
#pragma once

#include "decode_attention_mma_cuda.cuh"  // mma_16816, ldmatrix, swz, TileLoader, load_query_rows, softmax

namespace pvt {
namespace decode_cuda {

// The 5-warp instance exists for two blocks an SM (mma_rows_two_an_sm), hence its second launch bound: 10 warps
// put 3 on one of the SM's 4 schedulers, whose 16K registers then allow 168 a thread (ptxas -v at head_dim 64:
// 168, 40 bytes spilled; 182 without the bound, which the device then runs one block an SM). The others keep
// ptxas's own count (a bound of 2 blocks raised theirs to 248).
template <typename T, int D, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, WARPS == 5 ? 2 : 1)
    decode_attention_mma_rows_kernel(const DecodeAttentionParams p, const SplitCount splits, Workspace ws,
                                     const bool cluster, const int row_groups) {
  constexpr int CH = D / 8, CHS = mma_row_chunks(D), KS = D / 16, NT = D / 8;
  constexpr int NTHR = WARPS * 32, KT = mma_rows_tile_keys(D), KN = KT / 8;  // keys a tile; its n8 tiles
  constexpr int STAGES = mma_rows_stages(D);
  constexpr int ROWS = kMmaMaxRows * WARPS;
  constexpr bool kQInRegisters = D <= 128;  // at 256, Q's fragments are read per tile (registers: O is 128)
  static_assert(mma_rows_instance_exists(D, WARPS), "an instance the planner can pick");
  extern __shared__ __align__(16) uint4 smem[];
  auto sk = [&](int st) { return smem + st * (KT * CHS); };
  auto sv = [&](int st) { return smem + (STAGES + st) * (KT * CHS); };
  uint4* sq = smem + 2 * STAGES * (KT * CHS);  // the query rows, [ROWS][CHS] swizzled

  // The grid as the key-slice kernel's: x = (entry x kv head) x row_groups + row group, y = split.
  const int eh = row_groups == 1 ? static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x) / row_groups;
  const int rg = static_cast<int>(blockIdx.x) - eh * row_groups;
  const int kvh = static_cast<int>(p.kv_heads), bi = eh / kvh;
  const int64_t G = static_cast<int>(p.q_heads) / kvh, R = G * p.q_len;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = bi, hk = eh - bi * kvh, split = blockIdx.y;

  wait_for_previous_grid();
  const Entry e = entry_of(p, b);
  if (e.refused && p.error_flag != nullptr && split == 0 && threadIdx.x == 0) *p.error_flag = 1;
  int64_t s_lo, s_hi;
  split_range<KT, uint32_t>(e.n, split, splits, &s_lo, &s_hi);
  if (past_own_keys(splits, s_lo, s_hi)) return;

  const T* kb = static_cast<const T*>(p.k) + e.kv_row * p.k_stride[1] + hk * p.k_stride[2];
  const T* vb = static_cast<const T*>(p.v) + e.kv_row * p.v_stride[1] + hk * p.v_stride[2];
  const int64_t n_tiles = s_hi > s_lo ? (s_hi - s_lo + KT - 1) / KT : 0;
  // The tiles are loaded by the first LOADERS threads: 5 warps' 160 threads do not divide a tile's 16-byte
  // columns into whole passes, and the general loader's unrolled addresses took 246 registers a thread
  // there (ptxas -v), too many for two blocks an SM; with 128 loaders, 182 as the other instances. Blocks of
  // at most 128 threads (2 and 4 warps) and multiples of 128 load with every thread.
  constexpr int LOADERS = NTHR > 128 && NTHR % 128 != 0 ? 128 : NTHR;
  const TileLoader<T, CH, CHS, LOADERS, KT> load{kb, vb, p.k_stride[0], p.v_stride[0]};
  const bool loader = static_cast<int>(threadIdx.x) < LOADERS;
  auto load_tile = [&](int64_t tile, int stage, bool commit = true) {
    const int64_t t0 = s_lo + tile * KT;
    const int left = t0 + KT <= s_hi ? KT : static_cast<int>(s_hi - t0);
    if constexpr (LOADERS == NTHR) {
      load(sk(stage), sv(stage), t0, left, commit);
    } else {
      if (loader) load(sk(stage), sv(stage), t0, left, false);
      if (commit) cp_async_commit();  // every thread: each thread's count of groups stays the same
    }
  };

  // The first tile, then the rows, one group; then the rest of the primed tiles (decode_attention_mma_cuda.cuh).
  if (n_tiles > 0) load_tile(0, 0, false);
  const int tq = static_cast<int>(p.q_len), row0 = rg * ROWS;
  const int rows = static_cast<int>(R) - row0 < ROWS ? static_cast<int>(R) - row0 : ROWS;
  load_query_rows<T, CH, CHS, ROWS, NTHR>(p, e, b, hk, G, tq, row0, rows, sq);
  prime_pipeline<STAGES, 1>(n_tiles, load_tile);

  // The warp's M-tile: rows m0 .. m0 + 15; this lane's two rows of each fragment, r0 and r0 + 8.
  const int r0 = lane / 4, m0 = warp * kMmaMaxRows;
  const bool warp_live = m0 < rows;  // warp-uniform
  const int64_t vis_end[2] = {visible_end(e, tq, row0, m0 + r0, rows, s_lo, s_hi),
                              visible_end(e, tq, row0, m0 + r0 + 8, rows, s_lo, s_hi)};

  cp_async_wait<STAGES - 2>();  // the first group (tile 0 and the rows) has landed
  __syncthreads();
  const uint4* sq_lane = sq + (m0 + (lane & 7) + ((lane >> 3) & 1) * 8) * CHS;
  const int q_swz = (lane & 7) + ((lane >> 3) & 1) * 8;
  auto q_frag = [&](uint32_t* r, int ks) { ldmatrix_x4(r, sq_lane + ((2 * ks + (lane >> 4)) ^ (q_swz & 7))); };
  uint32_t qa[kQInRegisters ? KS : 1][4];
  if constexpr (kQInRegisters) {
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) q_frag(qa[ks], ks);
  }

  const float scale2 = p.scale * 1.4426950408889634f;  // log2 domain
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

  for (int64_t i = 0; i < n_tiles; ++i) {
    next_tile<STAGES>(i, n_tiles, load_tile);  // one barrier a tile
    const int stage = static_cast<int>(i % STAGES);
    const int64_t s_t = s_lo + i * KT;  // the tile's first key
    if (!warp_live || !__any_sync(0xffffffffu, s_t < vis_end[0] || s_t < vis_end[1])) continue;
    // S = Q K^T: 16 rows x KT keys, KN n8 tiles.
    float s[KN][4];
#pragma unroll
    for (int nt = 0; nt < KN; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      qk_n8<T, KS, CHS, kQInRegisters>(s[nt], sk(stage), nt * 8 + (lane & 7), lane, qa, q_frag);
    }
    float corr[2];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int64_t ahead = vis_end[hi] - s_t;
      const int visible = ahead <= 0 ? 0 : ahead >= KT ? KT : static_cast<int>(ahead);
      corr[hi] = online_softmax_row(s, hi, 2 * (lane % 4), visible, m[hi], l[hi], [=](int, int) { return scale2; });
    }
    rescale_rows(o, corr);
    pv_tiles<T, KN, NT, CHS>(o, s, sv(stage), 0, lane);  // O += P V over the whole tile
  }
  cp_async_wait<0>();
  __syncthreads();  // the tiles' space is free for the rows' partials

  allow_next_grid();
  // Each row's l over its 4 lanes; the warp's rows straight into the block's partials (no other warp
  // holds them): O [ROWS][D], then m (natural log) and l [ROWS].
  float* sm_o = reinterpret_cast<float*>(smem);
  float* st_m = sm_o + ROWS * D;
  float* st_l = st_m + ROWS;
  static_assert(static_cast<size_t>(ROWS) * (D + 2) * 4 <= mma_rows_smem_bytes(D, WARPS), "the partials fit");
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    l[hi] += __shfl_xor_sync(0xffffffffu, l[hi], 1);
    l[hi] += __shfl_xor_sync(0xffffffffu, l[hi], 2);
    const int r = m0 + r0 + 8 * hi;
    if (r >= rows) continue;
    if (lane % 4 == 0) {
      st_m[r] = m[hi] * 0.6931471805599453f;
      st_l[r] = l[hi];
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int d = n * 8 + 2 * (lane % 4);
      sm_o[r * D + d] = o[n][2 * hi];
      sm_o[r * D + d + 1] = o[n][2 * hi + 1];
    }
  }
  __syncthreads();
  // No 16-byte pieces in the 5-warp instance: their code moved its tile loop's register allocation under the
  // (160, 2) bound (4 local-memory accesses a tile where it had 2; Falcon's 5-warp rows 3-4 % slower, H100). Without
  // them (H100, 2026-12-07 14:20 UTC): those rows 0.5-2.6 % faster (B=64 S=32k 216.89 -> 211.18 µs).
  finish_block<T, D, NTHR, WARPS != 5>(p, e, b, hk, rows, split, splits.n, ws, cluster,
                                       BlockRows{st_m, st_l, sm_o, D, row0});
}

}  // namespace decode_cuda
}  // namespace pvt

// Decode attention on tensor cores for the query rows that share one kv head (GQA groups, Tq > 1),
// fp16/bf16, as FlashInfer does for grouped heads: the rows of one (entry, kv head), up to 16, are the
// M = 16 side of mma.sync.m16n8k16, so each key element is read from shared memory ONCE for all of
// them and the dot products and their sums happen inside the MMA. (The row-per-warp kernel,
// decode_attention_rows_cuda.cuh, converts and multiplies every key once per row: 1.3-2x slower than
// cuDNN for GQA 32/8 on the H200, docs/H200_DECODE_PARITY.md.)
//
// Block = WARPS warps (4 or 8), one (entry, kv head), one row group of its query rows (16 x MT rows: all of
// them, or a share where the plan spreads a large group over several blocks, Plan::row_groups) and one
// split of its keys. Tiles of 16 x WARPS / MT keys of K and V go to shared memory by 16-byte cp.async,
// kMmaStages deep, rows XOR-swizzled so that ldmatrix reads 8 keys without bank conflicts. Warp w takes
// keys [16w, 16w + 16) of every tile (one M-tile; see the kernel for several) and keeps its own online
// softmax (m, l, O as MMA accumulators), FlashAttention-2 style: S = Q K^T
// (K via ldmatrix), P = exp(S - m) re-packed in registers as the A operand of O += P V (V via
// ldmatrix.trans). The warps' partial states merge through shared memory at the end into the
// block's partials, which finish_block (decode_attention_merge_cuda.cuh) writes, merges within a
// cluster or leaves to merge_splits_kernel. P is rounded to the cache's 16-bit type for the second
// MMA, as flash-attention does; everything else accumulates in float32.
#pragma once

#include "decode_attention_balance_cuda.cuh"
#include "decode_attention_common_cuda.cuh"
#include "decode_attention_merge_cuda.cuh"  // finish_block

namespace pvt {
namespace decode_cuda {

template <typename T>
__device__ __forceinline__ void mma_16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* smem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* smem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
#endif
}

// Two floats as one register of two 16-bit values, the lower index in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// Chunk c (16 bytes) of key n in a tile of CH chunks per key: XOR-swizzled within 8-chunk groups.
template <int CH>
__device__ __forceinline__ int swz(int n, int c) {
  return n * CH + (c ^ (n & 7));
}

// 2^x as one MUFU.EX2, subnormal results flushed to 0. exp2f compiles to ex2.approx.f32 without .ftz, which
// ptxas wraps in a range test and two multiplies for subnormal results; a softmax weight below 2^-126 adds
// nothing to a float32 sum, so the plain instruction loses nothing (flash-attention builds with
// --use_fast_math for the same instruction).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One online-softmax step of one query row over a warp's 8 x N keys (16 in the key-slice kernels, a
// whole K/V tile in the row-owning one), as a lane holds it: the lane's 2 x N scores of row `hi`
// (s[nt][2 hi + j], key column nt * 8 + col0 + j), raw from the mma. Keys
// at columns >= visible are masked; the rest are scaled by kscale(nt, j) (the softmax scale in
// log2 units, times a per-key scale for 8-bit caches). The scores become P = exp2(x - m_new), the
// row's max m and this lane's share of its sum l are updated, and the factor that rescales the old
// state is returned. Shared by the float16 and the 8-bit tensor-core kernels.
template <int N, class KScale>
__device__ __forceinline__ float online_softmax_row(float (&s)[N][4], int hi, int col0, int visible, float& m, float& l,
                                                    KScale kscale) {
  float mx = -INFINITY;
  if (visible >= 8 * N) {  // every key of the slice visible (all but a split's last tile): no mask to test
#pragma unroll
    for (int nt = 0; nt < N; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float& x = s[nt][2 * hi + j];
        x *= kscale(nt, j);
        mx = fmaxf(mx, x);
      }
    }
  } else {
#pragma unroll
    for (int nt = 0; nt < N; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float& x = s[nt][2 * hi + j];
        x = nt * 8 + col0 + j < visible ? x * kscale(nt, j) : -INFINITY;
        mx = fmaxf(mx, x);
      }
    }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // lanes 4r .. 4r + 3 share a row
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(m, mx);
  // A row that has seen nothing yet (m_new = -inf: every score so far masked) subtracts 0 instead, so its
  // scores, all -inf, give exp2 = 0 without a test a score.
  const float m_sub = m_new == -INFINITY ? 0.f : m_new;
  const float c = exp2_ftz(m - m_sub);
  float sum = 0.f;
#pragma unroll
  for (int nt = 0; nt < N; ++nt) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float& x = s[nt][2 * hi + j];
      x = exp2_ftz(x - m_sub);
      sum += x;
    }
  }
  l = l * c + sum;
  m = m_new;
  return c;
}

// O's accumulators rescaled after an online-softmax step: rows g (o[n][0..1]) by corr[0], rows g + 8
// (o[n][2..3]) by corr[1]; skipped when neither maximum moved (most tiles past the first).
template <int NT>
__device__ __forceinline__ void rescale_rows(float (&o)[NT][4], const float (&corr)[2]) {
  if (corr[0] != 1.f || corr[1] != 1.f) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
    }
  }
}

// The pipeline's step into tile i: wait until it has landed for every thread (and every warp is done with
// tile i - 1), then load tile i + STAGES - 1 into tile i - 1's stage (an empty group past the last tile,
// so the wait counts stay the same).
template <int STAGES, class I, class LoadTile>
__device__ __forceinline__ void next_tile(I i, I n_tiles, LoadTile& load_tile) {
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  const I next = i + STAGES - 1;
  if (next < n_tiles) {
    load_tile(next, static_cast<int>(next % STAGES));
  } else {
    cp_async_commit();
  }
}

// One n8 tile of scores, s += Q K^T over the head dim: the 8 keys whose rows in the swizzled tile sk this
// lane's `key` names (lane & 7), Q's fragments from registers (qa, one per k16 step) or, at head_dim 256,
// read from shared memory per step (q_frag). Shared by both tensor-core kernels.
template <typename T, int KS, int CHS, bool kQInRegisters, int QN, class QFrag>
__device__ __forceinline__ void qk_n8(float (&s)[4], const uint4* sk, int key, int lane, const uint32_t (&qa)[QN][4],
                                      QFrag& q_frag) {
#pragma unroll
  for (int kp = 0; kp < KS; kp += 2) {  // two k16 steps per ldmatrix.x4: chunks 2kp .. 2kp + 3
    uint32_t kf[4];
    ldmatrix_x4(kf, sk + swz<CHS>(key, 2 * kp + (lane >> 3)));  // past D (odd KS): padding
    if constexpr (kQInRegisters) {
      mma_16816<T>(s, qa[kp], kf[0], kf[1]);
      if (kp + 1 < KS) mma_16816<T>(s, qa[kp + 1], kf[2], kf[3]);
    } else {
      uint32_t qf[4];
      q_frag(qf, kp);
      mma_16816<T>(s, qf, kf[0], kf[1]);
      if (kp + 1 < KS) {
        q_frag(qf, kp + 1);
        mma_16816<T>(s, qf, kf[2], kf[3]);
      }
    }
  }
}

// O += P V over the KN n8 tiles of scores in s (keys key0 .. key0 + 8 KN - 1 of the swizzled V tile sv), 16 keys a
// step: P's A fragment straight from two n8 tiles of S, V's B fragments two n8 tiles of dims an ldmatrix.trans.
// Shared by both tensor-core kernels.
template <typename T, int KN, int NT, int CHS>
__device__ __forceinline__ void pv_tiles(float (&o)[NT][4], const float (&s)[KN][4], const uint4* sv, int key0, int lane) {
#pragma unroll
  for (int kk = 0; kk < KN / 2; ++kk) {
    const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                            pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
    const int vkey = key0 + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int dn = 0; dn < NT; dn += 2) {
      uint32_t vf[4];
      ldmatrix_x4_trans(vf, sv + swz<CHS>(vkey, dn + (lane >> 4)));
      mma_16816<T>(o[dn], pa, vf[0], vf[1]);
      mma_16816<T>(o[dn + 1], pa, vf[2], vf[3]);
    }
  }
}

// The cp.async pipeline's prologue: tiles FIRST .. STAGES - 2 in flight (load_tile(stage, tile) commits
// its group; tiles before FIRST the caller has loaded, one group each), and one empty group for each stage
// past the last tile, so the wait counts stay the same.
template <int STAGES, int FIRST = 0, class Count, class LoadTile>
__device__ __forceinline__ void prime_pipeline(Count n_tiles, LoadTile& load_tile) {
#pragma unroll
  for (int st = FIRST; st < STAGES - 1; ++st) {
    if (st < n_tiles) {
      load_tile(st, st);
    } else {
      cp_async_commit();
    }
  }
}

// K/V tiles of KEYS keys (CH 16-byte chunks a key) into shared memory (rows of CHS chunks, swizzled) by
// the block's NTHR threads, 16-byte cp.async, one commit group a tile. Each thread copies one chunk column
// `ch` of every KPI-th key of a tile: the addresses of its chunks differ by a constant step, computed once
// (a short block's fixed cost is its instruction count: one warp per scheduler, every dependency exposed;
// Nsight Compute, H200). Where the block's threads are not a whole number of keys (D = 80, 96) or cover
// more than a tile (short tiles of several M-tiles), chunk by chunk instead. Shared by both tensor-core
// kernels (this one and decode_attention_mma_rows_cuda.cuh).
template <typename T, int CH, int CHS, int NTHR, int KEYS>
struct TileLoader {
  static constexpr int KPI = NTHR / CH;  // keys per pass of the block over a tile
  static constexpr bool kColumns = NTHR % CH == 0 && KEYS % KPI == 0;
  static constexpr int kChunksPerThread = (KEYS * CH + NTHR - 1) / NTHR;
  const T* kb;
  const T* vb;
  int64_t ks0, vs0;
  const T* kp0;  // this thread's first chunk of key 0 (its column, its first key of a pass)
  const T* vp0;

  __device__ __forceinline__ TileLoader(const T* k, const T* v, int64_t k_step, int64_t v_step)
      : kb(k), vb(v), ks0(k_step), vs0(v_step),
        kp0(k + static_cast<int>(threadIdx.x) / CH * k_step + static_cast<int>(threadIdx.x) % CH * 8),
        vp0(v + static_cast<int>(threadIdx.x) / CH * v_step + static_cast<int>(threadIdx.x) % CH * 8) {}

  // Keys t0 .. t0 + KEYS - 1 into sk and sv; those from `left` on (past the split) as zeros, never read.
  // One commit group, unless `commit` is false (the caller adds more to the group and commits it).
  __device__ __forceinline__ void operator()(uint4* sk, uint4* sv, int64_t t0, int left, bool commit = true) const {
    if constexpr (kColumns) {
      const T* kp = kp0 + t0 * ks0;
      const T* vp = vp0 + t0 * vs0;
      const int64_t kstep = KPI * ks0, vstep = KPI * vs0;
      const int ch = static_cast<int>(threadIdx.x) % CH, key0 = static_cast<int>(threadIdx.x) / CH;
      if (left == KEYS) {  // a whole tile (all but a split's last): no per-key condition
#pragma unroll
        for (int it = 0; it < KEYS / KPI; ++it) {
          const int key = key0 + it * KPI;
          cp_async16(sk + swz<CHS>(key, ch), kp + it * kstep, true);
          cp_async16(sv + swz<CHS>(key, ch), vp + it * vstep, true);
        }
      } else {
#pragma unroll
        for (int it = 0; it < KEYS / KPI; ++it) {
          const int key = key0 + it * KPI;
          const bool ok = key < left;
          cp_async16(sk + swz<CHS>(key, ch), ok ? kp + it * kstep : kb, ok);
          cp_async16(sv + swz<CHS>(key, ch), ok ? vp + it * vstep : vb, ok);
        }
      }
    } else {
#pragma unroll
      for (int it = 0; it < kChunksPerThread; ++it) {
        const int c = it * NTHR + static_cast<int>(threadIdx.x);
        const int key = c / CH, cc = c - key * CH;  // CH a constant: a multiply-high
        if (KEYS * CH % NTHR == 0 || c < KEYS * CH) {
          const bool ok = key < left;
          const int64_t s = t0 + key;
          cp_async16(sk + swz<CHS>(key, cc), ok ? kb + s * ks0 + cc * 8 : kb, ok);
          cp_async16(sv + swz<CHS>(key, cc), ok ? vb + s * vs0 + cc * 8 : vb, ok);
        }
      }
    }
    if (commit) cp_async_commit();
  }
};

// A block's query rows row0 .. row0 + ROWS - 1 of kv head hk (row r: head hk * G + r / Tq, token r % Tq)
// into sq ([ROWS][CHS] swizzled) by 16-byte cp.async (the plan asks for a 16-byte-loadable q), zeros for
// rows that are not live (past `rows`, or past the entry's queries); one commit group.
template <typename T, int CH, int CHS, int ROWS, int NTHR>
__device__ __forceinline__ void load_query_rows(const DecodeAttentionParams& p, const Entry& e, int64_t b, int64_t hk,
                                                int64_t G, int tq, int row0, int rows, uint4* sq) {
  const T* q = static_cast<const T*>(p.q);
#pragma unroll
  for (int c = static_cast<int>(threadIdx.x); c < ROWS * CH; c += NTHR) {
    const int row = c / CH, qc = c % CH;
    const int hg = tq == 1 ? row0 + row : (row0 + row) / tq, t = row0 + row - hg * tq;  // decode: no division
    const bool live = row < rows && t < e.q_count;
    const int64_t at = live ? (p.cu_seqlens_q ? (e.q_begin + t) * p.q_stride[1] : b * p.q_stride[0] + t * p.q_stride[1]) +
                                  (hk * G + hg) * p.q_stride[2] + qc * 8
                            : 0;
    cp_async16(sq + swz<CHS>(row, qc), q + at, live);
  }
  cp_async_commit();
}

// The keys block row `row` (of row0 + row of its kv head) sees in split [s_lo, s_hi): s < the returned end
// (causal, clipped to the split; s_lo for a row that is not live).
__device__ __forceinline__ int64_t visible_end(const Entry& e, int tq, int row0, int row, int rows, int64_t s_lo,
                                               int64_t s_hi) {
  const int hg = tq == 1 ? row0 + row : (row0 + row) / tq, t = row0 + row - hg * tq;
  const bool live = row < rows && t < e.q_count;
  return live ? (e.past + t + 1 < s_hi ? e.past + t + 1 : s_hi) : s_lo;
}

// T: __half or __nv_bfloat16; D: 64, 80, 96, 128 or 256 (CH = D / 8 chunks of 16 bytes per key, rows of
// CHS = mma_row_chunks(D) chunks in shared memory); WARPS: 4 or 8; MT: M-tiles of 16 rows (1, 2, 4, 8).
// Warp w computes M-tile w % MT over key slice w / MT (KW keys: 16, or 32 for the instances of
// mma_instance_exists) of every tile. 8 warps put two warps on
// each scheduler, so one hides the other's dependency stalls, and halve the instructions each warp issues
// per key (its share of the tile loads and MMAs): what a short block, bound by its instruction latency,
// pays for (Nsight Compute on the H200, docs/H200_DECODE_PARITY.md).
// BALANCED: a balanced grid (decode_attention_balance_cuda.cuh), each block's work found from the lengths;
// its own instances, so that the other plans' code is the same as without it.
template <typename T, int D, int WARPS, int MT, bool BALANCED, int KW = 16>
__global__ void __launch_bounds__(WARPS * 32)
    decode_attention_mma_kernel(const DecodeAttentionParams p, const SplitCount splits, Workspace ws,
                                const bool cluster, const int row_groups) {
  constexpr int CH = D / 8;                  // 16-byte chunks per key
  constexpr int CHS = mma_row_chunks(D);     // ... per row in shared memory
  constexpr int KS = D / 16;                 // k16 steps of Q K^T (odd at D = 80)
  constexpr int NT = D / 8;                  // n8 tiles of O (even for every D here)
  constexpr int NTHR = WARPS * 32, kMmaKeys = mma_tile_keys(WARPS, MT, KW);  // threads; keys per tile
  constexpr int STAGES = mma_stages(D, WARPS, MT, KW);
  constexpr int KN = KW / 8;                 // n8 tiles of a warp's scores
  constexpr int ROWS = kMmaMaxRows * MT;     // rows of the block
  constexpr bool kQInRegisters = D <= 128;   // at 256, Q's fragments (64 registers) are read per tile instead
  static_assert(mma_instance_exists(D, WARPS, MT, KW), "an instance the planner can pick");
  static_assert(NT % 2 == 0, "two n8 tiles of O per ldmatrix");
  extern __shared__ __align__(16) uint4 smem[];
  // Stage st of the K tile, and of the V tile.
  auto sk = [&](int st) { return smem + st * (kMmaKeys * CHS); };
  auto sv = [&](int st) { return smem + (STAGES + st) * (kMmaKeys * CHS); };

  // 32-bit index arithmetic (the host checks batch x kv heads and the rows per kv head against the grid
  // limits): a 64-bit division is a subroutine call, and a short block's cost is its instruction count.
  // blockIdx.x = (entry x kv head) x row_groups + row group: the row groups of one kv head are launched
  // side by side, so that they read its K/V tiles at about the same time (once from HBM, then from L2).
  int eh = row_groups == 1 ? static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x) / row_groups;
  int rg = static_cast<int>(blockIdx.x) - eh * row_groups;
  const int kvh = static_cast<int>(p.kv_heads);
  int bi = eh / kvh;
  const int64_t Tq = p.q_len, G = static_cast<int>(p.q_heads) / kvh, R = G * Tq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int mt = MT == 1 ? 0 : warp % MT, slice = MT == 1 ? warp : warp / MT;  // the warp's M-tile, key slice
  int64_t b = bi, hk = eh - bi * kvh;
  int64_t split = blockIdx.y, n_splits = splits.n, s_lo = 0, s_hi = 0;  // s_lo, s_hi: whole tiles of its keys

  if constexpr (!BALANCED) {  // where the plan allows it (host-known keys: kv_len of row b), before the wait
    if (splits.prefetch_tiles > 0) {
      int64_t lo, hi;
      split_range<kMmaKeys, uint32_t>(p.kv_len, split, splits, &lo, &hi);
      const int64_t want = static_cast<int64_t>(splits.prefetch_tiles) * kMmaKeys;
      const int n = static_cast<int>(hi - lo < want ? hi - lo : want);
      const int64_t ks = p.k_stride[0] * sizeof(T), vs = p.v_stride[0] * sizeof(T);
      prefetch_rows_l2<NTHR, D * sizeof(T)>(
          reinterpret_cast<const uint8_t*>(static_cast<const T*>(p.k) + b * p.k_stride[1] + hk * p.k_stride[2]) + lo * ks, ks, n);
      prefetch_rows_l2<NTHR, D * sizeof(T)>(
          reinterpret_cast<const uint8_t*>(static_cast<const T*>(p.v) + b * p.v_stride[1] + hk * p.v_stride[2]) + lo * vs, vs, n);
    }
  }
  wait_for_previous_grid();
  [[maybe_unused]] bool plain_block = false;  // a balanced grid's block that took the plain grid's (the rule)
  if constexpr (BALANCED) {  // the block's work from the lengths (shared memory free until the tiles load)
    BalancedBlock w;
    if (!balanced_block(p, splits, row_groups, ws, reinterpret_cast<int64_t*>(smem), &w)) return;
    eh = w.eh, rg = w.rg, split = w.split, n_splits = w.splits, s_lo = w.lo, s_hi = w.hi, plain_block = w.plain;
    bi = eh / kvh, b = bi, hk = eh - bi * kvh;
  }
  const Entry e = entry_of(p, b);
  if (e.refused && p.error_flag != nullptr && split == 0 && threadIdx.x == 0) *p.error_flag = 1;
  if constexpr (!BALANCED) {  // (a split's last tile is partial only at the end)
    split_range<kMmaKeys, uint32_t>(e.n, split, splits, &s_lo, &s_hi);
    if (past_own_keys(splits, s_lo, s_hi)) return;  // the merge does not read it (own_splits)
  } else if (plain_block) {  // as the plain grid's block: its keys from its entry's length, every split
    split_range<kMmaKeys, uint32_t>(e.n, split, splits.plain(), &s_lo, &s_hi);
  }

  const T* kb = static_cast<const T*>(p.k) + e.kv_row * p.k_stride[1] + hk * p.k_stride[2];
  const T* vb = static_cast<const T*>(p.v) + e.kv_row * p.v_stride[1] + hk * p.v_stride[2];
  const int64_t ks0 = p.k_stride[0], vs0 = p.v_stride[0];
  const int64_t n_tiles = s_hi > s_lo ? (s_hi - s_lo + kMmaKeys - 1) / kMmaKeys : 0;

  uint4* sq = smem + 2 * STAGES * (kMmaKeys * CHS);  // the query rows, [ROWS][CHS] swizzled

  const TileLoader<T, CH, CHS, NTHR, kMmaKeys> load{kb, vb, ks0, vs0};
  auto load_tile = [&](int64_t tile, int stage, bool commit = true) {
    const int64_t t0 = s_lo + tile * kMmaKeys;
    load(sk(stage), sv(stage), t0, t0 + kMmaKeys <= s_hi ? kMmaKeys : static_cast<int>(s_hi - t0),
         commit);  // keys inside the split
  };

  // The first tile goes first, then the query rows (16-byte chunks by cp.async: the plan asks for a
  // 16-byte-loadable q; zeros for rows that are not live), one commit group for both; then tiles 1 ..
  // STAGES - 2, one group each (empty past the last tile, so that wait_group counts stay the same). The
  // first tile before the rows: a short block's time runs from its start to its first tile's arrival, and
  // the rows' index work (about 150 instructions a warp, one warp a scheduler) came before it.
  // This block's rows: rows row0 .. row0 + rows - 1 of the kv head's R (row r: head hk * G + r / Tq,
  // token r % Tq); below, `row` counts from row0.
  if (n_tiles > 0) load_tile(0, 0, false);
  const int tq = static_cast<int>(Tq), row0 = rg * ROWS;
  const int rows = static_cast<int>(R) - row0 < ROWS ? static_cast<int>(R) - row0 : ROWS;
  load_query_rows<T, CH, CHS, ROWS, NTHR>(p, e, b, hk, G, tq, row0, rows, sq);  // commits the group
  prime_pipeline<STAGES, 1>(n_tiles, load_tile);

  // This thread's two rows of every accumulator fragment, r0 = lane / 4 and r0 + 8 of the warp's M-tile:
  // the keys they see, s < vis_end (causal, clipped to the split; s_lo for a row that is not this entry's).
  const int r0 = lane / 4, m0 = mt * kMmaMaxRows;
  const int64_t vis_end[2] = {visible_end(e, tq, row0, m0 + r0, rows, s_lo, s_hi),
                              visible_end(e, tq, row0, m0 + r0 + 8, rows, s_lo, s_hi)};

  // Q as the A operand, one fragment per k16 step, by ldmatrix (matrices: rows 0-7 / 8-15 of the warp's
  // M-tile x the step's two 8-element halves); the softmax scale is applied to the float32 scores.
  cp_async_wait<STAGES - 2>();  // the first group (tile 0 and the rows) has landed; the later tiles may fly
  __syncthreads();
  const uint4* sq_lane = sq + (m0 + (lane & 7) + ((lane >> 3) & 1) * 8) * CHS;  // this lane's ldmatrix row
  const int q_swz = (lane & 7) + ((lane >> 3) & 1) * 8;  // that row's index within its 8-row swizzle group
  auto q_frag = [&](uint32_t* r, int ks) { ldmatrix_x4(r, sq_lane + ((2 * ks + (lane >> 4)) ^ (q_swz & 7))); };
  uint32_t qa[kQInRegisters ? KS : 1][4];
  if constexpr (kQInRegisters) {
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) q_frag(qa[ks], ks);
  }

  // Scores in the log2 domain: exp(x) = exp2(x * log2 e).
  const float scale2 = p.scale * 1.4426950408889634f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

  // 32-bit tile counts (an entry's keys are at most INT32_MAX: the host checks kv_len): a 64-bit index and its
  // modulo by STAGES cost ~25 instructions a tile.
  const int tiles = static_cast<int>(n_tiles);
  for (int i = 0; i < tiles; ++i) {
    next_tile<STAGES>(i, tiles, load_tile);
    const int stage = i % STAGES;
    const int kw = slice * KW;                                            // the warp's first key in the tile
    const int64_t s_w = s_lo + static_cast<int64_t>(i) * kMmaKeys + kw;  // its global index
    if (__any_sync(0xffffffffu, s_w < vis_end[0] || s_w < vis_end[1])) {  // warp-uniform: MMAs need every lane
      // S = Q K^T for the warp's KW keys: KN n8 tiles.
      float s[KN][4];
#pragma unroll
      for (int nt = 0; nt < KN; ++nt) {
        s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
        const int key = kw + nt * 8 + (lane & 7);
        qk_n8<T, KS, CHS, kQInRegisters>(s[nt], sk(stage), key, lane, qa, q_frag);
      }
      // Online softmax of rows r0 (s[.][0..1]) and r0 + 8 (s[.][2..3]); lanes 4r..4r+3 share a row.
      // Visibility as a 32-bit count of the warp's KW keys (a short block's cost is its instruction
      // count: one warp per scheduler, every dependency exposed).
      float corr[2];
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int64_t ahead = vis_end[hi] - s_w;
        const int visible = ahead <= 0 ? 0 : ahead >= KW ? KW : static_cast<int>(ahead);
        // this lane's share of the row sum; the 4 lanes of a row add up at the end
        corr[hi] = online_softmax_row(s, hi, 2 * (lane % 4), visible, m[hi], l[hi], [=](int, int) { return scale2; });
      }
      rescale_rows(o, corr);
      pv_tiles<T, KN, NT, CHS>(o, s, sv(stage), kw, lane);  // O += P V over this warp's keys of the tile
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the tiles' space is free for the merge below

  allow_next_grid();  // see decode_attention_kernel
  // Each row's l over its 4 lanes, then the key slices' states through shared memory (the tiles' space).
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    l[hi] += __shfl_xor_sync(0xffffffffu, l[hi], 1);
    l[hi] += __shfl_xor_sync(0xffffffffu, l[hi], 2);
  }
  float* sm_o = reinterpret_cast<float*>(smem);               // [WARPS][16][D]
  float* sm_m = sm_o + WARPS * kMmaMaxRows * D;                // [WARPS][16]
  float* sm_l = sm_m + WARPS * kMmaMaxRows;                    // [WARPS][16]
  float* st_m = sm_l + WARPS * kMmaMaxRows;                    // [ROWS]: the block's partials (natural log)
  float* st_l = st_m + ROWS;                                   // [ROWS]
  static_assert(mma_merge_bytes(D, WARPS, MT) <= mma_smem_bytes(D, WARPS, MT, KW), "the merge fits the tiles' space");
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int r = r0 + 8 * hi;
    if (m0 + r >= rows) continue;  // not a live row (rows 8-15 of a GQA group of 4: the whole warp skips)
    if (lane % 4 == 0) {
      sm_m[warp * kMmaMaxRows + r] = m[hi];
      sm_l[warp * kMmaMaxRows + r] = l[hi];
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int d = n * 8 + 2 * (lane % 4);
      sm_o[(warp * kMmaMaxRows + r) * D + d] = o[n][2 * hi];
      sm_o[(warp * kMmaMaxRows + r) * D + d + 1] = o[n][2 * hi + 1];
    }
  }
  __syncthreads();

  // The key slices of each M-tile merged into its first slice's slot, warp mt's: row mt * 16 + r of the
  // block is element (mt * 16 + r) * D + d there, so the merged rows lie in order. First each row's weights,
  // a thread a row: the slices' maximum, then each slice's factor exp2(m - max) in place of its m (0 for a
  // slice that saw nothing, and for every slice of a row that saw nothing), the row's l and m. Then the
  // accumulators, four elements a thread a step (float4 from shared memory): the weights are read, not
  // recomputed per element. (The factors once per element made the end of a short block as long as its
  // tiles: MQA 32/1 B = 1 S = 2k, 4 warps, 2 tiles, 4138 instructions a warp against cuDNN's 1439 for the
  // same grid; Nsight Compute, H200, 2026-12-03.) The sums run over the slices in order, as before: the
  // same floats.
  constexpr int SLICES = WARPS / MT;
  for (int row = threadIdx.x; row < rows; row += NTHR) {
    const int tile = row / kMmaMaxRows, r = row % kMmaMaxRows;
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < SLICES; ++j) mx = fmaxf(mx, sm_m[(tile + j * MT) * kMmaMaxRows + r]);
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < SLICES; ++j) {
      float& w = sm_m[(tile + j * MT) * kMmaMaxRows + r];
      const float c = mx == -INFINITY ? 0.f : exp2f(w - mx);
      sum += sm_l[(tile + j * MT) * kMmaMaxRows + r] * c;
      w = c;
    }
    st_m[row] = mx * 0.6931471805599453f;  // back to natural-log units for lse and the merge
    st_l[row] = sum;
  }
  __syncthreads();
  // In place: the four elements at (row, 4 q) are read and written by one thread only.
  constexpr int D4 = D / 4;
  float4* sm_o4 = reinterpret_cast<float4*>(sm_o);
  for (int idx = threadIdx.x; idx < rows * D4; idx += NTHR) {
    const int row = idx / D4, q = idx % D4;  // D4 is a constant: no division
    const int tile = row / kMmaMaxRows, r = row % kMmaMaxRows;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int j = 0; j < SLICES; ++j) {
      const int w = tile + j * MT;
      const float c = sm_m[w * kMmaMaxRows + r];
      const float4 x = sm_o4[(w * kMmaMaxRows + r) * D4 + q];
      a.x += x.x * c;
      a.y += x.y * c;
      a.z += x.z * c;
      a.w += x.w * c;
    }
    sm_o4[row * D4 + q] = a;
  }
  __syncthreads();
  finish_block<T, D, NTHR>(p, e, b, hk, rows, split, n_splits, ws, cluster, BlockRows{st_m, st_l, sm_o, D, row0});
}

}  // namespace decode_cuda
}  // namespace pvt

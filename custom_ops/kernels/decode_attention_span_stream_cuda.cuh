// Streamed span grids (DecodeOptions::balance_span = 2; decode_attention_span_cuda.cuh for the ranges): the
// span grid's pieces as ONE stream of K/V tiles a block, so that the next piece's query rows and first tiles
// are in flight while the current piece's last tiles are computed. A span block that starts a second piece
// otherwise waits out the first tile's DRAM round trip with nothing else on its SM (one block an SM): on the
// H200 that made the span grid of one block an SM 16 % slower than the plain plan of the same shape
// (docs/H200_DECODE_PARITY.md). Here a piece's end (the warps' merge and finish_block) uses its own shared
// memory, not the tiles', and the query rows take three buffers in turn, each loaded in the commit group of
// its piece's first tile: the loads run STAGES - 1 = 2 tiles ahead, so at most two pieces ahead of the
// piece being computed, and a third buffer is never the one its query rows are read from. The entries' fields live in shared memory (read once), so a piece change reads no global memory.
// One instance shape: 4 warps, one M-tile, head_dim <= 128 (query fragments in registers); one block an SM.
// Internal to the CUDA build of the kernels; include only from .cu files compiled by nvcc.
#pragma once

#include "decode_attention_span_cuda.cuh"

namespace pvt {
namespace decode_cuda {

// An entry as entry_of gives it, in 32 bits (the host bounds kv_len and the rows below 2^31 for these grids).
struct SpanEntry {
  int32_t q_begin, q_count, kv_row, past, n, refused;
};

__device__ __forceinline__ Entry entry_from(const SpanEntry& s) {
  Entry e;
  e.q_begin = s.q_begin;
  e.q_count = s.q_count;
  e.kv_row = s.kv_row;
  e.past = s.past;
  e.n = s.n;
  e.refused = s.refused != 0;
  return e;
}

// A piece of a block's range: keys [s_lo, s_hi) of pair (b, hk), split `split` of `count`.
struct SpanPiece {
  bool valid = false;
  uint32_t b = 0, hk = 0, split = 0, count = 1, units = 0;  // units: of the range it takes
  int32_t s_lo = 0, s_hi = 0;
};

// The piece holding unit cur of a range ending at hi (cur < hi < = total), as decode_attention_mma_span_kernel
// finds it.
__device__ __forceinline__ SpanPiece span_piece(uint32_t cur, uint32_t hi, const uint32_t* pre, const SpanEntry* ents,
                                                uint32_t B, uint32_t H, uint32_t total, uint32_t G) {
  SpanPiece pc;
  if (cur >= hi) return pc;
  uint32_t lo_b = 0, hi_b = B - 1;
  while (lo_b < hi_b) {
    const uint32_t mid = (lo_b + hi_b + 1) / 2;
    if (pre[mid] * H <= cur) {
      lo_b = mid;
    } else {
      hi_b = mid - 1;
    }
  }
  const uint32_t b = lo_b, steps = pre[b + 1] - pre[b], local = cur - pre[b] * H;
  const uint32_t hk = local / steps, off = local - hk * steps;
  const uint32_t end = off + (hi - cur) < steps ? off + (hi - cur) : steps;
  const uint32_t start = pre[b] * H + hk * steps;
  const uint32_t g0 = span_block_of(start, total, G), g1 = span_block_of(start + steps - 1, total, G);
  const int32_t n = ents[b].n;
  pc.valid = true;
  pc.b = b;
  pc.hk = hk;
  pc.split = span_block_of(cur, total, G) - g0;
  pc.count = g1 - g0 + 1;
  pc.units = end - off;
  pc.s_lo = static_cast<int32_t>(off * kSplitKeysUnit);
  pc.s_hi = static_cast<int32_t>(end * kSplitKeysUnit) < n ? static_cast<int32_t>(end * kSplitKeysUnit) : n;
  return pc;
}

template <int D>
PVT_HOST_DEVICE constexpr size_t span_stream_tiles_bytes() {
  return static_cast<size_t>(2 * mma_stages(D, 4, 1) * mma_tile_keys(4, 1)) * mma_row_chunks(D) * 16;
}
template <int D>
PVT_HOST_DEVICE constexpr size_t span_stream_q_bytes() {
  return static_cast<size_t>(kMmaMaxRows) * mma_row_chunks(D) * 16;
}
constexpr int kSpanQueryBuffers = 3;
// Tiles, the query buffers, the merge's own space, the prefix and the entries.
template <int D>
PVT_HOST_DEVICE constexpr size_t span_stream_smem_bytes() {
  return span_stream_tiles_bytes<D>() + kSpanQueryBuffers * span_stream_q_bytes<D>() + (mma_merge_bytes(D, 4, 1) + 15) / 16 * 16 +
         kSpanSmemBytes + static_cast<size_t>(kBalanceMaxBatch) * sizeof(SpanEntry);
}

template <typename T, int D>
__global__ void __launch_bounds__(128)
    decode_attention_mma_span_stream_kernel(const DecodeAttentionParams p, const SplitCount splits, Workspace ws,
                                            const bool cluster, const int row_groups) {
  constexpr int WARPS = 4, NTHR = 128, CH = D / 8, CHS = mma_row_chunks(D), KS = D / 16, NT = D / 8;
  constexpr int KEYS = mma_tile_keys(WARPS, 1), STAGES = mma_stages(D, WARPS, 1), ROWS = kMmaMaxRows;
  static_assert(D <= 128 && NT % 2 == 0, "query fragments in registers, two n8 tiles of O per ldmatrix");
  extern __shared__ __align__(16) uint4 smem[];
  char* base = reinterpret_cast<char*>(smem);
  uint4* sq0 = reinterpret_cast<uint4*>(base + span_stream_tiles_bytes<D>());
  float* merge = reinterpret_cast<float*>(base + span_stream_tiles_bytes<D>() + kSpanQueryBuffers * span_stream_q_bytes<D>());
  uint32_t* pre = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(merge) + (mma_merge_bytes(D, 4, 1) + 15) / 16 * 16);
  uint32_t* zero = pre + kBalanceMaxBatch + 1;
  uint32_t* zero_count = zero + kBalanceMaxBatch;
  SpanEntry* ents = reinterpret_cast<SpanEntry*>(reinterpret_cast<char*>(pre) + kSpanSmemBytes);
  auto sk = [&](int st) { return smem + st * (KEYS * CHS); };
  auto sv = [&](int st) { return smem + (STAGES + st) * (KEYS * CHS); };
  auto sq = [&](int buf) { return sq0 + buf * (ROWS * CHS); };

  wait_for_previous_grid();
  const uint32_t B = static_cast<uint32_t>(p.batch), H = static_cast<uint32_t>(p.kv_heads);
  for (uint32_t b = threadIdx.x; b < B; b += NTHR) {
    const Entry e = entry_of(p, b);
    ents[b] = SpanEntry{static_cast<int32_t>(e.q_begin), static_cast<int32_t>(e.q_count), static_cast<int32_t>(e.kv_row),
                        static_cast<int32_t>(e.past), static_cast<int32_t>(e.n), e.refused ? 1 : 0};
  }
  span_prefix(p, pre, zero, zero_count);  // its entry_of reads hit L1/L2 after the loop above

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t Tq = p.q_len, Gq = static_cast<int>(p.q_heads) / static_cast<int>(p.kv_heads), R = Gq * Tq;
  const int tq = static_cast<int>(Tq);
  const int rows = static_cast<int>(R) < ROWS ? static_cast<int>(R) : ROWS;  // one row group (the plan's condition)
  const uint32_t g = blockIdx.x, total = pre[B] * H;
  const uint32_t G = gridDim.x < total ? gridDim.x : total;
  const uint32_t lo = g < G ? span_edge(g, total, G) : 0, hi = g < G ? span_edge(g + 1, total, G) : 0;

  // The load stream: piece lp, its tile lt, its query buffer lbuf; every thread the same.
  SpanPiece lp = span_piece(lo, hi, pre, ents, B, H, total, G);
  uint32_t lcur = lo;
  int32_t lt = 0;
  int lbuf = 0;
  auto n_tiles = [&](const SpanPiece& pc) { return (pc.s_hi - pc.s_lo + KEYS - 1) / KEYS; };
  // One commit group: the stream's next tile into `stage` (with its piece's query rows where it is the piece's
  // first), or an empty group past the range's last tile.
  auto issue = [&](int stage) {
    if (!lp.valid) {
      cp_async_commit();
      return;
    }
    const Entry e = entry_from(ents[lp.b]);
    if (lt == 0) {  // the piece's query rows, zeros for rows past the group or the entry's queries
      for (int c = static_cast<int>(threadIdx.x); c < ROWS * CH; c += NTHR) {
        const int row = c / CH, qc = c % CH;
        const int hg = row / tq, t = row - hg * tq;
        const bool live = row < rows && t < e.q_count;
        const int64_t at = live ? (p.cu_seqlens_q ? (e.q_begin + t) * p.q_stride[1]
                                                  : static_cast<int64_t>(lp.b) * p.q_stride[0] + t * p.q_stride[1]) +
                                      (static_cast<int64_t>(lp.hk) * Gq + hg) * p.q_stride[2] + qc * 8
                                : 0;
        cp_async16(sq(lbuf) + swz<CHS>(row, qc), static_cast<const T*>(p.q) + at, live);
      }
    }
    const T* kb = static_cast<const T*>(p.k) + e.kv_row * p.k_stride[1] + static_cast<int64_t>(lp.hk) * p.k_stride[2];
    const T* vb = static_cast<const T*>(p.v) + e.kv_row * p.v_stride[1] + static_cast<int64_t>(lp.hk) * p.v_stride[2];
    const TileLoader<T, CH, CHS, NTHR, KEYS> load{kb, vb, p.k_stride[0], p.v_stride[0]};
    const int64_t t0 = lp.s_lo + static_cast<int64_t>(lt) * KEYS;
    load(sk(stage), sv(stage), t0, t0 + KEYS <= lp.s_hi ? KEYS : static_cast<int>(lp.s_hi - t0));  // commits
    if (++lt == n_tiles(lp)) {
      lcur += lp.units;
      lp = span_piece(lcur, hi, pre, ents, B, H, total, G);
      lt = 0;
      lbuf = lbuf + 1 == kSpanQueryBuffers ? 0 : lbuf + 1;
    }
  };

  SpanPiece cp = lp;  // the compute stream: piece cp, its tile ct, its query buffer cbuf
  uint32_t ccur = lo;
  int32_t ct = 0;
  int cbuf = 0;
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) issue(st);

  const int r0 = lane / 4;
  const float scale2 = p.scale * 1.4426950408889634f;
  const int q_swz = (lane & 7) + ((lane >> 3) & 1) * 8;
  uint32_t qa[KS][4];
  float m[2], l[2], o[NT][4];
  int64_t vis_end[2] = {0, 0};
  float* sm_o = merge;                            // [WARPS][16][D]
  float* sm_m = sm_o + WARPS * kMmaMaxRows * D;   // [WARPS][16]
  float* sm_l = sm_m + WARPS * kMmaMaxRows;       // [WARPS][16]
  float* st_m = sm_l + WARPS * kMmaMaxRows;       // [16]
  float* st_l = st_m + ROWS;                      // [16]
  for (int64_t gc = 0; cp.valid; ++gc) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // tile gc (and at a piece's start its query rows) landed; tile gc - 1's stage is free
    issue(static_cast<int>((gc + STAGES - 1) % STAGES));
    const Entry e = entry_from(ents[cp.b]);
    if (ct == 0) {  // a piece's start: its query fragments, visibility, a fresh softmax state
      const uint4* sq_lane = sq(cbuf) + ((lane & 7) + ((lane >> 3) & 1) * 8) * CHS;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) ldmatrix_x4(qa[ks], sq_lane + ((2 * ks + (lane >> 4)) ^ (q_swz & 7)));
      vis_end[0] = visible_end(e, tq, 0, r0, rows, cp.s_lo, cp.s_hi);
      vis_end[1] = visible_end(e, tq, 0, r0 + 8, rows, cp.s_lo, cp.s_hi);
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.f;
#pragma unroll
      for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    }
    const int stage = static_cast<int>(gc % STAGES);
    const int kw = warp * 16;
    const int64_t s_w = cp.s_lo + static_cast<int64_t>(ct) * KEYS + kw;
    if (__any_sync(0xffffffffu, s_w < vis_end[0] || s_w < vis_end[1])) {
      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      auto q_frag = [&](uint32_t*, int) {};
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int key = kw + nt * 8 + (lane & 7);
        qk_n8<T, KS, CHS, true>(s[nt], sk(stage), key, lane, qa, q_frag);
      }
      float corr[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int64_t ahead = vis_end[hf] - s_w;
        const int visible = ahead <= 0 ? 0 : ahead >= 16 ? 16 : static_cast<int>(ahead);
        corr[hf] = online_softmax_row(s, hf, 2 * (lane % 4), visible, m[hf], l[hf], [=](int, int) { return scale2; });
      }
      rescale_rows(o, corr);
      uint32_t pa[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]), pack2<T>(s[1][0], s[1][1]),
                        pack2<T>(s[1][2], s[1][3])};
      const int vkey = kw + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int dn = 0; dn < NT; dn += 2) {
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, sv(stage) + swz<CHS>(vkey, dn + (lane >> 4)));
        mma_16816<T>(o[dn], pa, vf[0], vf[1]);
        mma_16816<T>(o[dn + 1], pa, vf[2], vf[3]);
      }
    }
    if (++ct < n_tiles(cp)) continue;
    // The piece's end: the warps' states merged through the merge space (the tiles in flight stay), then
    // finish_block writes its rows or leaves its split's partials.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
      l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = r0 + 8 * hf;
      if (r >= rows) continue;
      if (lane % 4 == 0) {
        sm_m[warp * kMmaMaxRows + r] = m[hf];
        sm_l[warp * kMmaMaxRows + r] = l[hf];
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const int d = n * 8 + 2 * (lane % 4);
        sm_o[(warp * kMmaMaxRows + r) * D + d] = o[n][2 * hf];
        sm_o[(warp * kMmaMaxRows + r) * D + d + 1] = o[n][2 * hf + 1];
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < rows * D; idx += NTHR) {
      const int r = idx / D, d = idx % D;
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, sm_m[w * kMmaMaxRows + r]);
      float sum = 0.f, a = 0.f;
      if (mx != -INFINITY) {
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
          const float c = exp2f(sm_m[w * kMmaMaxRows + r] - mx);
          sum += sm_l[w * kMmaMaxRows + r] * c;
          a += sm_o[(w * kMmaMaxRows + r) * D + d] * c;
        }
      }
      sm_o[r * D + d] = a;
      if (d == 0) {
        st_m[r] = mx * 0.6931471805599453f;
        st_l[r] = sum;
      }
    }
    __syncthreads();
    if (cp.split == 0 && threadIdx.x == 0) {
      if (e.refused && p.error_flag != nullptr) *p.error_flag = 1;
      if (ws.pair_splits != nullptr) ws.pair_splits[cp.b * H + cp.hk] = static_cast<int32_t>(cp.count);
    }
    finish_block<T, D, NTHR>(p, e, cp.b, cp.hk, rows, cp.split, cp.count, ws, false, BlockRows{st_m, st_l, sm_o, D, 0});
    // (the next piece's end writes the merge space only after the next step's barrier)
    ccur += cp.units;
    cp = span_piece(ccur, hi, pre, ents, B, H, total, G);
    ct = 0;
    cbuf = cbuf + 1 == kSpanQueryBuffers ? 0 : cbuf + 1;
  }
  cp_async_wait<0>();
  allow_next_grid();
  // Pairs with queries and no unit (refused): their rows in one split, no key.
  const uint32_t zero_pairs = *zero_count * H;
  for (uint32_t z = g; z < zero_pairs; z += gridDim.x) {
    __syncthreads();  // the merge space is free
    for (int r = threadIdx.x; r < ROWS; r += NTHR) {
      st_m[r] = -INFINITY;
      st_l[r] = 0.f;
    }
    for (int i = threadIdx.x; i < ROWS * D; i += NTHR) sm_o[i] = 0.f;
    __syncthreads();
    const uint32_t b = zero[z / H], hk = z % H;
    const Entry e = entry_from(ents[b]);
    if (threadIdx.x == 0 && e.refused && p.error_flag != nullptr) *p.error_flag = 1;
    finish_block<T, D, NTHR>(p, e, b, hk, rows, 0, 1, ws, false, BlockRows{st_m, st_l, sm_o, D, 0});
  }
}

}  // namespace decode_cuda
}  // namespace pvt

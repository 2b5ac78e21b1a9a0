// See decode_attention_plan.h. The measurements behind each choice are the H200's unless a comment names an H100
// (docs/H200_DECODE_PARITY.md).
#include "decode_attention_plan.h"

#include <algorithm>
#include <string>

#include "decode_attention_balance_plan.h"

namespace pvt {
namespace decode_plan {
namespace {

int64_t elem_bytes(ScalarType t) { return t == ScalarType::kFloat32 ? 4 : 2; }

int next_pow2(int64_t x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Splits of the keys: as many as make ONE full wave of resident blocks (SMs x blocks per SM at the
// kernel's occupancy), never a split of fewer than kMinKeysPerSplit keys. A sweep of forced split
// counts on the H200 found the time flat or rising past one wave (more partials to write and merge,
// blocks queued behind others) and rising steeply below it (SMs idle). A forced count
// (DecodeOptions::splits) may go below kMinKeysPerSplit keys a split (to 16), for sweeps of short contexts.
int64_t choose_splits(int64_t base_blocks, int64_t kv_len, int64_t slots, int64_t forced) {
  const int64_t max_splits = std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, kv_len / kMinKeysPerSplit));
  if (forced > 0) return std::min<int64_t>({forced, kMaxSplits, std::max<int64_t>(1, (kv_len + 15) / 16)});
  return std::max<int64_t>(1, std::min<int64_t>(max_splits, slots / std::max<int64_t>(1, base_blocks)));
}

// Keys of up to n equal splits; the count then drops where rounding would leave a split empty.
void set_splits(const DecodeAttentionParams& p, Plan* plan, int64_t n) {
  plan->keys_per_split = (p.kv_len + n - 1) / n;
  plan->splits = (p.kv_len + plan->keys_per_split - 1) / plan->keys_per_split;  // no empty split
}

void plan_splits(const DecodeAttentionParams& p, Plan* plan, int resident) {
  const int64_t base = p.batch * p.kv_heads * plan->row_groups;
  set_splits(p, plan, choose_splits(base, p.kv_len, plan->sms * resident, options_of(p).splits));
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

// Warps per block of the tensor-core kernel, once the splits are known: 8 where every block of the
// grid has an SM to itself (the 8-warp kernel's shared memory allows one block an SM) and a split is
// short, else 4 (two blocks an SM); 4 where the 8-warp kernel cannot be resident, and for one row a kv head
// (MHA: H100, 2026-12-07 14:49 UTC, 4 warps 0.92-1.00x the time of 8 at B = 1 and 4, S = 512 and 2k, head dims
// 64-128, but 16/16 at head_dim 64 B = 4 S = 2k: 16.43 against 15.95 µs). On the H200 (GQA
// 32/8) 8 warps took B=1 S=1k from 6.17 to 5.97 us, B=1 S=4k from 10.53 to 9.69, B=8 S=1k from 12.52
// to 10.66; equal at 2048 keys a split (B=8 S=4k) and slower past it (B=8 S=16k, 8192 keys: 128.8
// against 125.2), and slower in two waves (B=32 S=1k: 39.3 against 35.8). 8 warps put two warps on each
// scheduler and halve the instructions each warp issues per key: what a short block pays for.
// But not where a split holds less than one and a half 8-warp tiles (192 keys): little then overlaps a tile's load,
// where 4 warps have two or three 64-key tiles in the pipeline. H100, 2026-12-07, today's kernels, fp16, 8 -> 4 warps
// in one process (16:28 UTC): every row of 72-144 keys a split 4-13 % faster (per slot, 64 keys past S: Llama-3-70B
// B=1 S=512 7.36 -> 6.50 µs, B=4 S=512 10.37 -> 9.35; MQA 32/1 B=16 S=512 10.16 -> 9.67; StarCoder B=4 S=512 7.74
// -> 7.01); at 256-264 keys mixed (GQA mostly faster, Qwen2-7B B=16 S=512 -7 %, but MQA 32/1 B=1 S=2k +9 %); at 512
// and more within +-3 % but for MQA B=64 S=512 (+8 %). Nothing between 144 and 256 keys was timed. (The H200's B=1
// S=1k above had 128 keys a split with the kernels of 2026-11-30; not timed there since.)
constexpr int64_t kEightWarpsMaxKeys = 2048;  // keys of one split
constexpr int64_t kEightWarpsMinKeys = mma_tile_keys(8, 1) * 3 / 2;
constexpr int64_t kMhaOneWaveMaxKeys = 2304;  // plan_kernel's one-wave MHA batches: measured to 2k + 64 keys

// Whether the tensor-core kernel's grid (one block per entry, kv head, row group and split) has no more
// blocks than SMs, so that each block can have an SM to itself.
bool mma_one_block_an_sm(const DecodeAttentionParams& p, const Plan& plan) {
  return p.batch * p.kv_heads * plan.row_groups * plan.splits <= plan.sms;
}

// Several M-tiles: 8 warps (the only 16-key instances: each warp one M-tile of one key slice); 32 keys a warp: 4.
int choose_mma_warps(const DecodeAttentionParams& p, const Plan& plan, const KernelOccupancy& occ) {
  if (plan.mma_warp_keys == 32) return 4;  // its only instances
  if (plan.mma_tiles > 1) return 8;
  const int forced = options_of(p).mma_warps;
  const bool one_row = p.q_heads == p.kv_heads && p.q_len == 1;
  bool eight = forced != 0 ? forced == 8
                           : !one_row && mma_one_block_an_sm(p, plan) && plan.keys_per_split >= kEightWarpsMinKeys &&
                                 plan.keys_per_split <= kEightWarpsMaxKeys;
  if (eight) eight = occ.mma_resident[1] > 0 && mma_instance_exists(static_cast<int>(p.head_dim), 8, 1);
  return eight ? 8 : 4;
}

// Cluster or workspace, once the split count is known (tensor-core kernel only: the one-row kernel's
// cluster variant measured slower, its main loop compiled to fewer registers). On the H200 (GQA 32/8,
// fp16, third session's kernels) a cluster saves the merge kernel, 1.3-1.6 us, where all blocks fit one
// wave and they are short: B=1 S=1k (8 splits) 9.1 against 10.7 us, B=8 S=1k (2) 14.6 against 16.4,
// B=8 S=4k (2) 38.7 against 40.0. It costs more than that where a cluster's blocks, placed within one
// GPC, are long or many: B=8 S=16k (2 splits) 135.8 against 128.3 us, B=1 S=4k (16) 14.3 against 13.6,
// B=8 S=1k forced to 8 splits 30.5 against 23.2.
// Only where all clusters are resident at once (max_clusters[n], when known): a cluster is placed within
// one GPC, so fewer clusters of 4 or 8 blocks an SM each fit than SMs / n, and the rest would wait for a
// second wave (twice the time of the merge kernel's way).
constexpr int64_t kClusterMaxKeys = 4096;  // keys of all the splits of one cluster
bool clusters_fit(int64_t clusters, int64_t n, const int* max_clusters) {
  return n < 2 || n > kMaxClusterSplits || max_clusters[n] < 0 || clusters <= max_clusters[n];
}
void plan_cluster(const DecodeAttentionParams& p, Plan* plan, int limit, const int* max_clusters) {
  const bool forced = options_of(p).splits > 0;
  const int64_t clusters = p.batch * p.kv_heads * plan->row_groups;
  // A few splits more than a cluster holds (a bound a little past a round length, as a per-slot
  // cache's capacity is): `limit` slightly longer splits as one cluster instead. GQA B=1 with 1088
  // keys, when choose_splits still rounded up to 9 splits: 8 in a cluster 7.17 us against 9 through
  // the workspace 7.92 (H200). Rounding down, 1088 keys plan 8 directly; 1152-1280 keys still plan 9-10.
  if (limit > 1 && !forced && plan->splits > limit && plan->splits <= limit + limit / 4 &&
      p.kv_len <= kClusterMaxKeys && clusters * limit <= plan->sms && clusters_fit(clusters, limit, max_clusters)) {
    set_splits(p, plan, limit);
  }
  plan->cluster = plan->splits > 1 && plan->splits <= limit && p.kv_len <= kClusterMaxKeys &&
                  clusters * plan->splits <= plan->sms && clusters_fit(clusters, plan->splits, max_clusters);
}

// M-tiles of 16 rows per tensor-core block for R query rows per kv head; the kv head's rows are spread
// over ceil(R / (16 x tiles)) row groups, each a block that reads the same K/V (once from HBM, the other
// row groups from L2: they are launched side by side). All rows in one block (up to 8 M-tiles) made MQA
// 1.4-3.0x slower than the best SDPA backend on the H200 (family table, docs/H200_DECODE_PARITY.md):
// with 8 warps over 8 (4) M-tiles a K/V tile holds 16 (32) keys, so a block pays a barrier, a wait and
// a softmax chain every 16 keys, and 71 rows (Falcon) leave 3 of 8 warps idle and 45% of the MMAs on
// padding; and with few (entry, kv head) pairs the block count comes from the splits alone.
// One M-tile a block (R / 16 times the blocks, the GQA kernel's 128-key tiles) where its plan gets 8 warps
// (every block an SM, splits of at most kEightWarpsMaxKeys) or where its row groups are two or more an
// SM; otherwise two (fewer L2 re-reads, and 8 warps where one M-tile would get 4 warps alone on an SM).
// H200, per-slot fp16 (run of 2026-12-02 02:31 UTC, one against two M-tiles): Falcon 71/1 B=1 S=8k
// 11.2 against 13.7 us, B=64 S=8k (320 row groups) 126.7 against 167.4; MQA 32/1 B=16 S=32k, where one
// M-tile plans 4 warps, 122.4 against 86.7; StarCoder 48/1 B=16 S=8k 68.5 against 50.7.
int choose_row_tiles(const DecodeAttentionParams& p, int64_t R, int64_t entries, int64_t sms) {
  const DecodeOptions& o = options_of(p);
  const int need = mma_tiles_for(R);
  if (o.mma_row_tiles > 0) return std::min(o.mma_row_tiles, need);
  if (need == 1) return 1;
  if (o.split_keys > 0) return 2;  // batch-invariant: fixed by the rows alone (the usual choice past one wave)
  const int64_t base = entries * ((R + kMmaMaxRows - 1) / kMmaMaxRows);  // blocks a split with one M-tile
  if (base >= 2 * sms) return 1;
  const int64_t n = choose_splits(base, p.kv_len, sms * std::max(1, o.mma_blocks_per_sm), o.splits);
  const int64_t keys = (p.kv_len + n - 1) / n;
  return base * ((p.kv_len + keys - 1) / keys) <= sms && keys <= kEightWarpsMaxKeys ? 1 : 2;
}

// The row-owning tensor-core kernel (decode_attention_mma_rows_cuda.cuh) for R query rows per kv head,
// and its warps (one M-tile each): 0 where the key-slice kernel runs instead. Forced by
// DecodeOptions::mma_row_warps; never with split_keys (the batch-invariant plan is the key-slice
// kernel's) or where the key-slice kernel's M-tiles are forced (mma_row_tiles).
// By default only where it measured faster than the key-slice kernel (H200, per-slot fp16, both timed in
// one process, run of 2026-12-02 05:53 UTC; ratios to the best SDPA backend): row groups of 4 warps (64
// rows) at least 3/4 full, a long context and splits of at least kMmaRowsMinKeys keys in its plan (one
// wave of kMmaRowsResident blocks an SM). StarCoder 48/1 B=16 S=32k 1.24 against 1.92, B=64 S=32k 1.35
// against 2.20, B=16 S=8k 1.36 against 1.68, B=4 S=32k (497 keys a split) 1.30 against 1.39; Qwen2 28/4
// verifying 8 tokens (56 rows) B=16 S=8k 0.30 against 0.39. Slower: short splits (StarCoder B=1 S=32k,
// 256 keys a split: 1.77 against 1.18; B=64 S=2k 1.80 against 1.64), 32 rows (MQA 32/1 and Llama-3-8B x
// Tq 8 as 2 warps a block: 1.09-2.21 against 0.39-1.54, within 2% where faster but at MQA B=64 S=32k,
// 1.09 against 1.19) and part-empty row groups (Falcon 71/1: two groups of 64 rows for 71, 1.49-3.06
// against 0.88-1.88, one group of 128 rows no better).
constexpr int64_t kMmaRowsMinRows = 48, kMmaRowsMinContext = 8192, kMmaRowsMinKeys = 384;
constexpr int kMmaRowsResident = 2;  // blocks an SM of the 4-warp instance at head_dim 64-128 (H200)
// One-token decode (MQA) since its softmax issues one MUFU.EX2 a score and tests no mask on whole tiles
// (2026-12-03, decode_attention_mma_cuda.cuh): the row-owning kernel on any 32+ rows a kv head, on a grid of 16+
// (entry, kv head)s over 2k+ keys. H200, per-slot fp16, both kernels timed in one process (16:28 UTC, µs,
// key-slice -> row-owning): Falcon 71/1 B=16 S=2k 15.98 -> 13.99 (8 warps), S=32k 112.45 -> 88.27, B=64 S=32k
// 443.05 -> 328.57; StarCoder 48/1 B=16 S=2k 18.74 -> 14.90 (8), B=64 S=2k 43.78 -> 33.82 (4); MQA 32/1 B=16
// S=8k 29.13 -> 28.41 (4), B=64 S=32k 283.77 -> 255.99 (4), B=16 S=2k 14.30 -> 14.12 (8). Its warps: one
// group of up to 128 rows past 64 (Falcon: 4 warps made two groups of 64, the second 7 rows, 339.48 at B=64
// S=32k), else 4 warps on a long or wide grid and 8 on a short narrow one (StarCoder B=16 S=2k 8 warps 14.90,
// 4 warps 17.80; B=64 S=32k 8 warps 349.24, 4 warps 259.33). Smaller grids (B=1-4) were measured mixed (MQA
// 32/1 B=4 S=32k 8 warps 29.83 against 28.76) and keep the rule below; Tq > 1 was not measured.
// 65-80 rows (Falcon's 71) at head_dim 64: 5 warps, two blocks an SM (10 warps with rows, where one 8-warp
// block has 5), on a grid of at least 128k keys (entries x keys) over 2k+ keys. H100, per-slot fp16, 2026-12-07
// 09:08 UTC, 5 warps against 8 (µs; SDPA's best in brackets): Falcon B=64 S=32k 213.67 / 320.13 (251.68), S=8k
// 67.83 / 89.18 (69.57), S=2k 31.18 / 31.91 (24.80); B=16 S=32k 65.69 / 86.02 (81.28), S=8k 29.19 / 28.79; B=4
// S=32k 30.55 against the key-slice plan's 34.41 (30.08). Smaller grids lost: B=16 S=2k 15.62 / 14.30, B=4 S=8k
// 16.93 against the key-slice kernel's 14.20, B=1 S=32k 15.00 against 14.69.
constexpr int64_t kMmaRowsDecodeMinRows = 32, kMmaRowsDecodeMinEntries = 16, kMmaRowsDecodeMinContext = 2048;
constexpr int64_t kFiveWarpsMinGridKeys = int64_t{1} << 17;
int choose_rows_warps(const DecodeAttentionParams& p, int64_t R, int64_t entries, int64_t sms) {
  const DecodeOptions& o = options_of(p);
  if (o.split_keys > 0 || o.mma_row_warps < 0 || o.balance > 0) return 0;  // balanced grids: the key-slice kernel
  if (o.mma_row_warps > 0) return o.mma_row_warps;
  if (o.mma_row_tiles > 0) return 0;
  const int D = static_cast<int>(p.head_dim);
  if (p.q_len == 1 && R > 4 * kMmaMaxRows && R <= 5 * kMmaMaxRows && p.kv_len >= kMmaRowsDecodeMinContext &&
      entries * p.kv_len >= kFiveWarpsMinGridKeys && mma_rows_instance_exists(D, 5)) {
    return 5;
  }
  if (p.q_len == 1 && R >= kMmaRowsDecodeMinRows && entries >= kMmaRowsDecodeMinEntries &&
      p.kv_len >= kMmaRowsDecodeMinContext) {
    const int w = R > 4 * kMmaMaxRows || (p.kv_len < kMmaRowsMinContext && entries < 64) ? 8 : 4;
    if (mma_rows_instance_exists(D, w)) return w;
  }
  const int64_t groups = (R + 4 * kMmaMaxRows - 1) / (4 * kMmaMaxRows);
  if (R < kMmaRowsMinRows || 4 * R < 3 * groups * 4 * kMmaMaxRows || p.kv_len < kMmaRowsMinContext) {
    return 0;
  }
  const int64_t n = choose_splits(entries * groups, p.kv_len, sms * kMmaRowsResident, o.splits);
  return (p.kv_len + n - 1) / n >= kMmaRowsMinKeys ? 4 : 0;
}

// Keys a warp of the key-slice kernel takes of each tile: 32 where DecodeOptions::mma_warp_keys asks or, by default,
// on short one-token calls of many rows a kv head at head_dim 64 (Falcon 71/1) whose row groups fit one wave of one
// block an SM (the plans that would give each block 8 warps), and where such an instance exists (4 warps: none of
// 8); never for batch-invariant (split_keys) or balanced plans (their kernels are the 16-key instances), nor with 8
// warps forced. H100, per-slot fp16, 2026-12-07 14:20 UTC, one process (tests/gpu/run_warp_keys.sh; µs, 8 warps of
// 16 keys -> 4 of 32): Falcon B=1 S=512 6.02 -> 5.58, S=2k 6.80 -> 6.39; B=4 S=512 6.30 -> 6.13, S=2k 8.88 -> 8.75;
// B=16 S=512 7.12 -> 6.97. Slower elsewhere: longer calls (B=1 S=8k 9.72 -> 9.88, B=4 S=8k 14.64 -> 15.25), grids
// past one wave (B=64 S=512, 320 blocks of 4 warps: 11.72 -> 15.69, two blocks an SM where the 16-key instance
// holds four), and two M-tiles of 32 keys a warp on most MQA and StarCoder rows (1.1-1.5x at B <= 4).
constexpr int64_t kWarpKeys32MaxKeys = 2304;  // measured to a per-slot bound of 2k + 64 keys
int choose_warp_keys(const DecodeAttentionParams& p, int64_t R, int tiles, int64_t entries, int64_t sms) {
  const DecodeOptions& o = options_of(p);
  const int D = static_cast<int>(p.head_dim);
  if (o.split_keys > 0 || o.balance != 0 || o.mma_warps == 8 || o.mma_warp_keys == 16 ||
      !mma_instance_exists(D, 4, tiles, 32)) {
    return 16;
  }
  if (o.mma_warp_keys == 32) return 32;
  const int64_t groups = (R + kMmaMaxRows * tiles - 1) / (kMmaMaxRows * tiles);
  const bool rule = D == 64 && tiles == 1 && p.q_len == 1 && R > kMmaMaxRows && p.kv_len <= kWarpKeys32MaxKeys &&
                    entries * groups <= sms;
  return rule ? 32 : 16;
}

// Short contexts on a small grid: the splits of each (entry, kv head, row group) as one full cluster of
// `limit` blocks of at least kFullClusterMinKeys keys each, rather than fewer, longer splits
// (kMinKeysPerSplit stops B=1 S=512 at 4 splits of 128 keys) or more, shorter ones merged by the second
// kernel (16 at S=2k). H200, per-slot fp16, B=1 (run of 2026-12-02 02:31 UTC): S=512 (576 keys), 8
// splits in a cluster against 4: Gemma 8/1 8.32 against 10.94 us, StarCoder 7.74 against 8.75, MQA 32/1
// 7.78 against 8.77, Falcon 5.50 against 5.85; Falcon S=2k (2112 keys), 8 in a cluster 6.26 against 16
// merged by the kernel 8.12. Measured up to 2112 keys: only there (kFullClusterMaxKeys). At head_dim 256 a key is
// twice the bytes, and the cluster's 8 blocks too few past the bytes of 2304 keys at 128 (kFullClusterMaxKeyDims):
// H100, 2026-12-07 17:13 UTC, Gemma 8/1 B=1 S=2k (2112 keys) per slot fp16, 8 splits in a cluster 11.43 us against
// 16 merged by the kernel 10.03 and 32 9.23 (SDPA 10.19); B=4 11.49 against 11.53. At head_dim 128 the cluster stays
// the faster there (MQA 32/1 B=1 S=2k 8.49 against 8.68, StarCoder 8.47 against 9.02, Qwen2-7B 8.12 against 8.61).
constexpr int64_t kFullClusterMinKeys = 64, kFullClusterMaxKeys = 2304, kFullClusterMaxKeyDims = kFullClusterMaxKeys * 128;
void fill_cluster(const DecodeAttentionParams& p, Plan* plan, int limit, const int* max_clusters) {
  const int64_t clusters = p.batch * p.kv_heads * plan->row_groups;
  if (limit < 2 || options_of(p).splits > 0 || p.kv_len > kFullClusterMaxKeys ||
      p.kv_len * p.head_dim > kFullClusterMaxKeyDims ||
      p.kv_len < limit * kFullClusterMinKeys || clusters * limit > plan->sms ||
      !clusters_fit(clusters, limit, max_clusters)) {
    return;
  }
  set_splits(p, plan, limit);
}

// Row groups of two M-tiles whose 8-warp instance fits two blocks an SM (head_dim 64 on the H200; 80-256
// fit one): splits for two blocks an SM, not one. Such a plan is long (choose_row_tiles takes two M-tiles
// where one would not get 8 warps), and one 8-warp block an SM leaves it latency-bound: Falcon 71/1 B=16
// S=32k (96 blocks) under Nsight Compute issued 0.41 instructions a cycle per scheduler, 2 warps each,
// DRAM 14% busy. H200, per-slot fp16 (run of 2026-12-02 02:38 UTC), one against two blocks an SM: B=16
// S=8k 61.9 against 45.8 us, S=32k 213.2 against 141.5, B=4 S=32k 46.9 against 42.7; at head_dim 128
// (one block an SM: a second wave) two were 5-50% slower.
bool two_row_tiles_per_sm(const Plan& plan, const KernelOccupancy& occ) {
  return plan.row_groups > 1 && plan.mma_tiles == 2 && occ.mma_resident[1] >= 2;
}

}  // namespace

// kDriver where the plan's tensor-core instance (its warps and M-tiles) cannot be resident on this device.
Status check_mma_resident(const DecodeAttentionParams& p, const Plan& plan, const KernelOccupancy& occupancy) {
  if (occupancy.mma_resident[plan.mma_warps == 8 ? 1 : 0] != 0) return Status::Ok();
  const int D = static_cast<int>(p.head_dim);
  return Status(Code::kDriver, "decode_attention_cuda: the tensor-core kernel cannot be resident (" +
                                   std::to_string(plan.mma_rows ? mma_rows_smem_bytes(D, plan.mma_warps)
                                                                : mma_smem_bytes(D, plan.mma_warps, plan.mma_tiles,
                                                                                 plan.mma_warp_keys)) +
                                   " bytes of shared memory)");
}

// Scratch for the splits' partials: none with one split or a cluster (merged in the kernel).
size_t workspace_of(const DecodeAttentionParams& p, const Plan& plan) {
  return plan.splits <= 1 || plan.cluster ? 0
                                          : static_cast<size_t>(plan.splits * plan.rows_total * (p.head_dim + 2)) * sizeof(float);
}

namespace {

// DecodeOptions::split_keys: the split boundaries, the warps and the merge fixed by the options and the
// rows per kv head alone (never by the batch, kv_len or the device's SM count), so that each row's
// arithmetic is the same in every call that sees its keys. The merge kernel merges in split order, and
// an empty split (m = -inf, zeros) adds exact zeros; one split writes what the merge of one would. A
// cluster merge is left out: its arithmetic is the merge kernel's, but a second compiled site need not
// contract its multiply-adds the same way.
Status plan_fixed_splits(const DecodeAttentionParams& p, const KernelOccupancy& occupancy, Plan* plan) {
  const DecodeOptions& o = options_of(p);
  const int64_t n = (p.kv_len + o.split_keys - 1) / o.split_keys;
  if (n > kMaxSplits) {
    return Status(Code::kInvalidArgument, "decode_attention_cuda: options.split_keys " + std::to_string(o.split_keys) +
                                              " gives " + std::to_string(n) + " splits of kv_len " +
                                              std::to_string(p.kv_len) + ", more than " + std::to_string(kMaxSplits));
  }
  plan->splits = n;
  plan->keys_per_split = plan->split_keys = o.split_keys;
  plan->cluster = false;
  if (plan->mma_kernel) {
    plan->mma_warps = plan->mma_tiles > 1 ? 8 : o.mma_warps != 0 ? o.mma_warps : 4;
    if (!mma_instance_exists(static_cast<int>(p.head_dim), plan->mma_warps, plan->mma_tiles)) plan->mma_warps = 4;
    PVT_RETURN_IF_ERROR(check_mma_resident(p, *plan, occupancy));
    plan->mma_sm_exclusive = mma_one_block_an_sm(p, *plan);  // residency only: not the arithmetic
  }
  plan->workspace_bytes = workspace_of(p, *plan);
  return Status::Ok();
}

// The tensor-core kernel's plain grid (a block an (entry, kv head, row group) and split): its splits, warps
// and cluster.
Status plan_mma_grid(const DecodeAttentionParams& p, const KernelOccupancy& occupancy, Plan* plan) {
  const DecodeOptions& o = options_of(p);
  // One block per SM, not the 2 resident ones of the 4-warp kernel: on the H200 (GQA 32/8, fp16)
  // that was as fast or faster on all 12 shapes of B x S, up to 9% (B = 1, S = 16k); fewer, longer
  // blocks keep their tile pipeline full and leave half the partials to merge.
  const bool two = o.mma_blocks_per_sm == 1 && two_row_tiles_per_sm(*plan, occupancy);  // 1: the default
  plan_splits(p, plan, two ? 2 : std::max(1, o.mma_blocks_per_sm));
  if (!o.no_cluster) {  // the cluster limit of the 8-warp instance where it runs here (it then gets 8 warps)
    const int cw = occupancy.mma_resident[1] > 0 ? 1 : 0;
    fill_cluster(p, plan, occupancy.mma_cluster_limit[cw], occupancy.mma_max_clusters[cw]);
  }
  plan->mma_warps = choose_mma_warps(p, *plan, occupancy);
  const int w = plan->mma_warps == 8 ? 1 : 0;
  PVT_RETURN_IF_ERROR(check_mma_resident(p, *plan, occupancy));
  plan_cluster(p, plan, o.no_cluster ? 1 : occupancy.mma_cluster_limit[w], occupancy.mma_max_clusters[w]);
  // No more blocks than SMs: one an SM, kept so by their shared memory. More (B=32: 256 blocks) run
  // two an SM, as the 4-warp kernel's occupancy allows.
  plan->mma_sm_exclusive = mma_one_block_an_sm(p, *plan);
  return Status::Ok();
}

}  // namespace

const DecodeOptions& options_of(const DecodeAttentionParams& p) {
  static const DecodeOptions defaults;
  return p.options != nullptr ? *p.options : defaults;
}

bool keys_known_on_host(const DecodeAttentionParams& p) {
  return !p.cache_seqlens && !p.kv_batch_index && !p.kv_mapped && !p.cu_seqlens_q;
}

int choose_prefetch_tiles(bool host_range, bool programmatic, int forced, int64_t tiles, int64_t first_wave,
                          int64_t tile_bytes, int64_t l2_bytes) {
  if (!host_range || !programmatic || forced < 0 || tiles < 1) return 0;
  if (forced > 0) return static_cast<int>(std::min<int64_t>(forced, tiles));
  const int64_t fit = l2_bytes / 4 / std::max<int64_t>(1, first_wave * tile_bytes);
  return static_cast<int>(std::min<int64_t>({kPrefetchTiles, tiles, fit}));
}

Status check_options(const DecodeOptions& o) {
  if (o.split_keys < 0 || o.split_keys % kSplitKeysUnit != 0 || (o.split_keys > 0 && o.splits > 0)) {
    return Status(Code::kInvalidArgument,
                  "decode_attention_cuda: options.split_keys must be 0 or a positive multiple of " +
                      std::to_string(kSplitKeysUnit) + " and cannot be combined with splits; got split_keys " +
                      std::to_string(o.split_keys) + ", splits " + std::to_string(o.splits));
  }
  if (o.prefetch_tiles < -1) {
    return Status(Code::kInvalidArgument, "decode_attention_cuda: options.prefetch_tiles must be -1 (none), 0 (the "
                                          "plan's) or a number of tiles; got " + std::to_string(o.prefetch_tiles));
  }
  if (o.balance < -1 || o.balance_blocks_per_sm < 0) {
    return Status(Code::kInvalidArgument,
                  "decode_attention_cuda: options.balance must be 0 (off), -1 (the rule) or a number of blocks an SM >= 1 "
                  "and options.balance_blocks_per_sm >= 0; got " + std::to_string(o.balance) + ", " +
                      std::to_string(o.balance_blocks_per_sm));
  }
  if (o.merge_wide < -1 || o.merge_wide > 1 || (o.merge_wide == 1 && o.split_keys > 0)) {
    return Status(Code::kInvalidArgument,
                  "decode_attention_cuda: options.merge_wide must be 0 (the plan's), 1 or -1, and not 1 with split_keys "
                  "(its merge is in split order); got " + std::to_string(o.merge_wide));
  }
  if ((o.merge_chunk != 0 && o.merge_chunk != kMergeChunk && o.merge_chunk != kMergeChunkWide) ||
      (o.merge_chunk == kMergeChunkWide && o.split_keys > 0)) {
    return Status(Code::kInvalidArgument,
                  "decode_attention_cuda: options.merge_chunk must be 0, " + std::to_string(kMergeChunk) + " or " +
                      std::to_string(kMergeChunkWide) + " (not with split_keys); got " + std::to_string(o.merge_chunk));
  }
  const int t = o.mma_row_tiles, rw = o.mma_row_warps;
  if (rw != 0 && rw != -1 && rw != 2 && rw != 4 && rw != 5 && rw != 8) {
    return Status(Code::kInvalidArgument,
                  "decode_attention_cuda: options.mma_row_warps must be 0, -1, 2, 4, 5 (head_dim 64) or 8; got " +
                      std::to_string(rw));
  }
  if (o.balance > 0 && rw > 0) {  // balanced grids are the key-slice kernel's only
    return Status(Code::kInvalidArgument,
                  "decode_attention_cuda: options.balance > 0 cannot be combined with options.mma_row_warps > 0");
  }
  if (o.mma_warp_keys != 0 && o.mma_warp_keys != 16 && o.mma_warp_keys != 32) {
    return Status(Code::kInvalidArgument,
                  "decode_attention_cuda: options.mma_warp_keys must be 0, 16 or 32; got " + std::to_string(o.mma_warp_keys));
  }
  if (o.splits < 0 || (o.mma_warps != 0 && o.mma_warps != 4 && o.mma_warps != 8) || o.mma_blocks_per_sm < 1 ||
      (t != 0 && t != 1 && t != 2 && t != 4 && t != 8)) {
    return Status(Code::kInvalidArgument,
                  "decode_attention_cuda: options need splits >= 0, mma_warps 0, 4 or 8, mma_blocks_per_sm >= 1 and "
                  "mma_row_tiles 0, 1, 2, 4 or 8; got splits " + std::to_string(o.splits) + ", mma_warps " +
                      std::to_string(o.mma_warps) + ", mma_blocks_per_sm " + std::to_string(o.mma_blocks_per_sm) +
                      ", mma_row_tiles " + std::to_string(t));
  }
  return Status::Ok();
}

Status check_options_for(const DecodeAttentionParams& p) {
  const int rw = options_of(p).mma_row_warps, d = static_cast<int>(p.head_dim);
  if (rw > 0 && mma_head_dim(d) && !mma_rows_instance_exists(d, rw)) {
    return Status(Code::kInvalidArgument, "decode_attention_cuda: options.mma_row_warps " + std::to_string(rw) +
                                              ": no row-owning tensor-core kernel of that many warps at head_dim " +
                                              std::to_string(d));
  }
  return Status::Ok();
}

Plan plan_kernel(const DecodeAttentionParams& p, const DeviceFacts& device) {
  const DecodeOptions& o = options_of(p);
  Plan plan;
  plan.sms = device.sms;
  plan.programmatic = !o.no_pdl;
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
  // Several rows per kv head (GQA, Tq > 1), unmasked: for 16-bit caches with up to 128 rows per kv head
  // and head_dim 64, 80, 96, 128 or 256, all rows of a kv head on tensor cores (decode_attention_mma_cuda.cuh:
  // 16-row M-tiles, 1-8 a block, more blocks for the rest: choose_row_tiles; it copies q rows in 16-byte
  // chunks too: contiguous head dim, 16-byte aligned rows); otherwise, for a key of 8/16/32 chunks of 16
  // bytes, the shared-memory kernel (decode_attention_rows_cuda.cuh), one row per warp. Options no_mma keeps
  // the row-per-warp kernel and mma_mha takes the tensor-core kernel for every unmasked one-row case.
  // One row per kv head (MHA decode) takes the tensor-core kernel where it covers every (entry, kv
  // head) in one wave of its two resident blocks per SM without splitting, and the context is short:
  // on the H200, B=8 S=1k 35.9 against 37.2 us for the one-row kernel, which splits in two and merges;
  // elsewhere the one-row kernel was as fast or faster (B=1, B=32, S=16k). Measured at head_dim 64 and
  // 128 only, so only there.
  const int64_t key_chunks = D * eb / 16, entries = p.batch * p.kv_heads;
  // Not with split_keys: the kernel may then depend on nothing but the rows per kv head, D and the dtype.
  const bool one_wave_short = o.split_keys == 0 && entries > plan.sms && entries <= 2 * plan.sms && p.kv_len <= 4096 && (D == 64 || D == 128);
  // And where a batch of more than one entry fits one wave of one block an SM over a short context, with 4 warps
  // (choose_mma_warps). H100, per-slot fp16, 2026-12-07 14:49 UTC, one process (one-row -> tensor-core, µs): Llama-2-7B
  // B=4 S=512 16.70 -> 14.22, S=2k 49.70 -> 46.43; Phi-3 (head_dim 96) B=4 S=512 14.30 -> 11.97, S=2k 41.23 -> 37.71;
  // 16/16 at head_dim 64 B=4 S=512 8.65 -> 7.64, S=2k 17.12 -> 16.43. Not at B=1 (the H200 measured the one-row
  // kernel as fast there; on this H100 the tensor-core kernel was 2-8 % faster, but 1 % slower for Phi-3 S=512) nor
  // past one wave (Llama-2-7B B=16 S=512: 47.40 against 48.56).
  const bool one_wave_batch = o.split_keys == 0 && p.batch > 1 && entries <= plan.sms && p.kv_len <= kMhaOneWaveMaxKeys && D <= 128;
  const bool q16 = p.q_stride[3] == 1 && aligned16(p.q) && p.q_stride[0] % vec == 0 && p.q_stride[1] % vec == 0 &&
                   p.q_stride[2] % vec == 0;
  const bool mma = eb == 2 && q16 && R <= kMmaMaxRows * kMmaMaxTiles && mma_head_dim(D) && device.mma_compiled &&
                   !o.no_mma && (R >= 2 || one_wave_short || one_wave_batch || o.mma_mha);
  const bool rows_kernel = R >= 2 && D * eb % 16 == 0 && (key_chunks == 8 || key_chunks == 16 || key_chunks == 32);
  if (plan.vectorised && p.mask == nullptr && (mma || rows_kernel)) {
    plan.rows_kernel = !mma;
    plan.mma_kernel = mma;
    plan.lanes = static_cast<int>(key_chunks);
    plan.chunks = 1;
    const int rows_warps = mma ? choose_rows_warps(p, R, entries, plan.sms) : 0;
    plan.mma_rows = rows_warps > 0;
    if (plan.mma_rows) plan.mma_warps = rows_warps;
    plan.mma_tiles = plan.mma_rows ? rows_warps : mma ? choose_row_tiles(p, R, entries, plan.sms) : 1;
    plan.mma_warp_keys = mma && !plan.mma_rows ? choose_warp_keys(p, R, plan.mma_tiles, entries, plan.sms) : 16;
    plan.rows = mma ? kMmaMaxRows * plan.mma_tiles : kWarps;
  }
  plan.row_groups = (R + plan.rows - 1) / plan.rows;
  plan.rows_total = p.batch * p.q_heads * p.q_len;
  return plan;
}

bool merge_warp_of(const DecodeAttentionParams& p, const Plan& plan) {
  const int64_t v = p.head_dim % 32 == 0 ? p.head_dim / 32 : 0;
  // Not for fixed splits (split_keys): a batch-invariant row would then take one kernel or the other by the batch.
  return !plan.merge_wide && plan.split_keys == 0 && v >= 2 && v <= 4 && plan.rows_total >= kMergeWarpMinRows;
}

bool merge_wide_of(const DecodeOptions& o, const Plan& plan) {
  if (plan.splits <= 1 || plan.cluster || plan.split_keys > 0 || o.merge_wide < 0) return false;
  // Balanced grids: `splits` is the longest entry's count; most entries merge a few, where the wide kernel
  // lost (H200, skewed batches: 1.02-1.04x the time on 5 of 6 rows).
  return o.merge_wide > 0 || (plan.splits > kMergeChunk && plan.balance_blocks == 0);
}

namespace {

Status plan_grid_splits(const DecodeAttentionParams& p, const KernelOccupancy& occupancy, Plan* plan) {
  const DecodeOptions& o = options_of(p);
  if (o.split_keys > 0) return plan_fixed_splits(p, occupancy, plan);
  if (plan->mma_rows) {
    // The row-owning kernel: its warps are fixed by plan_kernel; one wave of its resident blocks (its
    // occupancy in the slot of its warps), then the key-slice kernel's cluster rules.
    const int w = plan->mma_warps == 8 ? 1 : 0;
    PVT_RETURN_IF_ERROR(check_mma_resident(p, *plan, occupancy));
    plan_splits(p, plan, occupancy.mma_resident[w]);
    if (!o.no_cluster) {
      fill_cluster(p, plan, occupancy.mma_cluster_limit[w], occupancy.mma_max_clusters[w]);
      plan_cluster(p, plan, occupancy.mma_cluster_limit[w], occupancy.mma_max_clusters[w]);
    }
    plan->mma_sm_exclusive = mma_one_block_an_sm(p, *plan);
  } else if (balance_wanted(p, *plan)) {
    // Under the rule the blocks may take the plain plan instead, from the lengths (balance_skewed).
    Plan plain = *plan;
    if (o.balance == kBalanceRule) PVT_RETURN_IF_ERROR(plan_mma_grid(p, occupancy, &plain));
    return plan_balanced(p, occupancy, o.balance == kBalanceRule ? &plain : nullptr, plan);
  } else if (plan->mma_kernel) {
    PVT_RETURN_IF_ERROR(plan_mma_grid(p, occupancy, plan));
  } else {
    plan_splits(p, plan, occupancy.resident);
    // The one-row kernel, unmasked and not forced: the fewest steps a block (balance_splits).
    if (!plan->rows_kernel && p.mask == nullptr && o.splits == 0) {
      balance_splits(p, plan, occupancy.resident, block_step(plan->lanes));
    }
  }
  plan->workspace_bytes = workspace_of(p, *plan);
  return Status::Ok();
}

}  // namespace

Status plan_grid(const DecodeAttentionParams& p, const KernelOccupancy& occupancy, Plan* plan) {
  PVT_RETURN_IF_ERROR(plan_grid_splits(p, occupancy, plan));
  plan->merge_wide = merge_wide_of(options_of(p), *plan);
  return Status::Ok();
}

}  // namespace decode_plan
}  // namespace pvt

// The plan of a CUDA decode-attention call (decode_attention_cuda.cu launches it): which kernel family
// and instance, how many splits of the keys, how the splits are merged. Pure host code: the shapes, the
// options and a few numbers about the device (SM count, the chosen kernel's occupancy) go in as plain
// values, so the planner is tested without a GPU (tests/native/test_decode_plan.cc).
//
// Planning has two steps because the occupancy that sets the split count is that of the kernel instance
// the first step picks: plan_kernel (family, rows per block, lanes per key), then the launcher asks the
// device about that instance, then plan_grid (splits, warps, cluster, workspace).
//
// The number of splits depends only on host-known sizes (kv_len as an upper bound, batch, heads, the
// device's SM count and the kernel's occupancy), so a launch never reads the device and can be captured
// in a CUDA graph; per-entry lengths (cache_seqlens) are read by the kernel, which spreads each entry's
// own keys over the splits (split_range in decode_attention_common_cuda.cuh).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../core/status.h"
#include "decode_attention.h"

#if defined(__CUDACC__)
#define PVT_HOST_DEVICE __host__ __device__
#else
#define PVT_HOST_DEVICE
#endif

namespace pvt {
namespace decode_plan {

// Shared by the planner and the kernels.
constexpr int kWarps = 4;                 // warps of a one-row or row-per-warp block
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 4;                  // keys per key group whose loads are in flight together (one-row)
constexpr int kFallbackChunks = 8;        // scalar path: 32 lanes x 8 elements = head_dim 256
constexpr int kMaxSplits = 128;
constexpr int64_t kMinKeysPerSplit = 128; // below this a split costs more than it saves (but balance_splits)
constexpr int kMmaMaxRows = 16;           // the M of the tensor-core kernel's MMA: rows of one M-tile
constexpr int kMmaMaxTiles = 8;           // M-tiles of one tensor-core block: 128 query rows per kv head
constexpr int kMmaStages = 3;             // tiles in flight with one M-tile: two load while one is used
constexpr int kMaxClusterSplits = 8;      // most blocks of a cluster: the portable limit (16 measured slower)
constexpr int kMergeChunk = 16;           // splits merge_splits_kernel reads per L2 round trip
constexpr int kMergeThreads = 256;        // threads of a merge_splits_wide_kernel block (one row)
constexpr int kMergeWarpRows = 8;         // rows (warps) of a merge_splits_warp_kernel block
constexpr int kMergeLoads = 8;            // splits a merge_splits_wide_kernel thread loads per L2 round trip
constexpr int kMergeChunkWide = 32;       // the 8-bit merge's past kMergeChunk splits (quant_plan::merge_chunk_of)

// Keys one pass of a one-row block covers (its unit of work): kTile keys for each of its key groups.
PVT_HOST_DEVICE constexpr int block_step(int lanes) { return kWarps * (32 / lanes) * kTile; }

// ---- The tensor-core kernel's shapes (decode_attention_mma_cuda.cuh), for head dim D, WARPS warps, MT
// M-tiles of 16 rows and KW keys a warp. Its warps form MT row tiles x WARPS / MT key slices: each warp holds
// one 16-row tile of accumulators (what a thread's registers allow at D = 256) over KW keys (16 or 32) of
// every K/V tile, so a tile has KW x WARPS / MT keys and all M-tiles share each tile's single trip from HBM.
PVT_HOST_DEVICE constexpr bool mma_head_dim(int64_t D) { return D == 64 || D == 80 || D == 96 || D == 128 || D == 256; }
// 16-byte chunks of a key row in shared memory: whole groups of 8, the XOR swizzle's span (80 and 96 pad
// to 128: ldmatrix then reads the same conflict-free pattern).
PVT_HOST_DEVICE constexpr int mma_row_chunks(int D) { return (D / 8 + 7) / 8 * 8; }
PVT_HOST_DEVICE constexpr int mma_tile_keys(int WARPS, int MT, int KW = 16) { return KW * WARPS / MT; }
constexpr size_t kMmaSmemBudget = 220 * 1024;  // of the H200's 227 KiB a block may opt in to
// K and V stages plus the query rows, in bytes.
PVT_HOST_DEVICE constexpr size_t mma_tiles_bytes(int D, int WARPS, int MT, int stages, int KW = 16) {
  return (static_cast<size_t>(stages) * 2 * mma_tile_keys(WARPS, MT, KW) + kMmaMaxRows * MT) * mma_row_chunks(D) * 16;
}
// Stages: kMmaStages with one M-tile (the measured kernels of the tables) or 32 keys a warp (two blocks an SM
// where they fit); with more M-tiles of 16 keys a warp the tiles are shorter, so more of them (about 384 keys)
// stay in flight, as many as the budget allows.
PVT_HOST_DEVICE constexpr int mma_stages(int D, int WARPS, int MT, int KW = 16) {
  int s = MT == 1 || KW == 32 ? kMmaStages : 384 / mma_tile_keys(WARPS, MT, KW);
  s = s < 3 ? 3 : s > 12 ? 12 : s;
  while (s > 2 && mma_tiles_bytes(D, WARPS, MT, s, KW) > kMmaSmemBudget) --s;
  return s;
}
// The warps' partial states at the end, in floats (they reuse the tiles' space): O, m and l per warp and
// row, then the block's m and l per row.
PVT_HOST_DEVICE constexpr size_t mma_merge_bytes(int D, int WARPS, int MT) {
  return (static_cast<size_t>(WARPS) * kMmaMaxRows * (D + 2) + 2 * kMmaMaxRows * MT) * 4;
}
// Dynamic shared memory of the tensor-core kernel. One M-tile, D = 128: 100 KiB with 4 warps (two blocks
// an SM), 196 KiB with 8 (one).
PVT_HOST_DEVICE constexpr size_t mma_smem_bytes(int D, int WARPS, int MT, int KW = 16) {
  const size_t tiles = mma_tiles_bytes(D, WARPS, MT, mma_stages(D, WARPS, MT, KW), KW);
  const size_t merge = mma_merge_bytes(D, WARPS, MT);
  return tiles > merge ? tiles : merge;
}
// The instances built (decode_attention_mma_d*_cuda.cu): 16 keys a warp with 4 or 8 warps for one M-tile, 8
// for 2, 4 or 8 M-tiles; none whose shared memory is over the budget (8 warps, one M-tile at D = 256).
// 32 keys a warp (half the tiles, so half the barriers, waits and softmax rounds a key: a short block's cost
// is its instruction count) with 4 warps where two blocks still fit an SM: one M-tile at head_dim 64 (128-key
// tiles, 100 KiB), two M-tiles (32 rows: MQA 32/1, GQA x Tq) at 64-128 (64-key tiles, at most 106 KiB).
PVT_HOST_DEVICE constexpr bool mma_instance_exists(int D, int WARPS, int MT, int KW = 16) {
  const bool shape = KW == 16   ? (MT == 1 ? (WARPS == 4 || WARPS == 8) : (WARPS == 8 && (MT == 2 || MT == 4 || MT == 8)))
                     : KW == 32 ? WARPS == 4 && ((MT == 1 && D == 64) || (MT == 2 && D <= 128))
                                : false;
  return mma_head_dim(D) && shape && mma_smem_bytes(D, WARPS, MT, KW) <= kMmaSmemBudget;
}
// ---- The row-owning tensor-core kernel (decode_attention_mma_rows_cuda.cuh), for head dim D and WARPS
// warps: each warp one M-tile of 16 rows over every key of a K/V tile of mma_rows_tile_keys(D) keys (one
// barrier and one softmax round per tile, not per 16 keys), mma_rows_stages(D) tiles in flight. 32 keys
// at head_dim 256: O already takes 128 registers a thread there (64 keys spilled).
PVT_HOST_DEVICE constexpr int mma_rows_tile_keys(int D) { return D <= 64 ? 128 : D <= 128 ? 64 : 32; }
PVT_HOST_DEVICE constexpr int mma_rows_stages(int) { return 3; }
// K and V stages and the query rows; at the end the rows' O, m and l (floats) in the same space.
PVT_HOST_DEVICE constexpr size_t mma_rows_smem_bytes(int D, int WARPS) {
  const size_t tiles = (static_cast<size_t>(mma_rows_stages(D)) * 2 * mma_rows_tile_keys(D) + kMmaMaxRows * WARPS) *
                       mma_row_chunks(D) * 16;
  const size_t merge = static_cast<size_t>(kMmaMaxRows) * WARPS * (D + 2) * 4;
  return tiles > merge ? tiles : merge;
}
// Whether two blocks of WARPS warps fit one SM's shared memory (an H100/H200 SM: 228 KiB, 1 KiB of it reserved
// a block) and its registers: 2 x 5 warps put 3 on one of its 4 schedulers, 16K registers each, so at most 168
// a thread (the 5-warp instance's launch bound asks ptxas for that; more warps would need fewer).
constexpr size_t kSmSmemBytes = 228 * 1024, kBlockReservedSmem = 1024;
PVT_HOST_DEVICE constexpr bool mma_rows_two_an_sm(int D, int WARPS) {
  return WARPS <= 5 && 2 * (mma_rows_smem_bytes(D, WARPS) + kBlockReservedSmem) <= kSmSmemBytes;
}
// Its instances: 2, 4 or 8 warps (32, 64 or 128 rows a block), and 5 (80 rows: Falcon's 71) where two
// 5-warp blocks fit an SM (head_dim 64). An 8-warp block for 71 rows holds one block an SM by its
// registers, and 3 of its warps have no rows: 5 warps of work an SM, where two 5-warp blocks run 10.
PVT_HOST_DEVICE constexpr bool mma_rows_instance_exists(int D, int WARPS) {
  return mma_head_dim(D) &&
         (WARPS == 2 || WARPS == 4 || WARPS == 8 || (WARPS == 5 && mma_rows_two_an_sm(D, 5))) &&
         mma_rows_smem_bytes(D, WARPS) <= kMmaSmemBudget;
}

// M-tiles for R query rows per kv head: a power of two, at most kMmaMaxTiles.
PVT_HOST_DEVICE constexpr int mma_tiles_for(int64_t R) { return R <= 16 ? 1 : R <= 32 ? 2 : R <= 64 ? 4 : 8; }

// What plan_kernel needs from the device.
struct DeviceFacts {
  int64_t sms = 108;          // SM count
  bool mma_compiled = false;  // the tensor-core kernel has sm_80 code for this device
};

// What plan_grid needs from the device about the kernel instance plan_kernel picked.
struct KernelOccupancy {
  int resident = 4;                      // blocks an SM of the one-row or row-per-warp instance
  int mma_resident[2] = {0, 0};          // of the tensor-core instance (the plan's M-tiles) with 4 and with
                                         // 8 warps (0: cannot run, or no such instance)
  int mma_cluster_limit[2] = {1, 1};     // kMaxClusterSplits where the device co-schedules clusters of
                                         // that many blocks of the 4- and 8-warp instance, else 1
  // Clusters of n blocks (index n, 2..kMaxClusterSplits) of the 4- and 8-warp instance resident at once
  // when each block has an SM to itself (launched with sm_exclusive_smem, as every cluster plan is); -1:
  // not known (a plan then takes one wave for granted). A GPC holds whole clusters: on an H200 fewer
  // clusters of 4 or 8 fit than SMs / n, and a grid of more clusters than fit runs in two waves.
  int mma_max_clusters[2][kMaxClusterSplits + 1] = {{-1, -1, -1, -1, -1, -1, -1, -1, -1},
                                                    {-1, -1, -1, -1, -1, -1, -1, -1, -1}};
};

struct Plan {
  bool vectorised = false;
  int vec = 1;           // elements per chunk
  int lanes = 32;        // LANES: lanes per key (power of two, 8..32)
  int chunks = 1;        // CPL: chunks per lane
  int rows = 1;          // ROWS: query rows per block
  int64_t row_groups = 1;      // blocks that share the query rows of one (entry, kv head)
  int64_t splits = 1;
  int64_t keys_per_split = 0;  // of a bound-long entry: a host estimate (the kernels use split_range)
  int64_t split_keys = 0;      // > 0: every split exactly this many keys from key 0 (DecodeOptions::split_keys)
  int64_t balance_blocks = 0;  // > 0: balanced splits (decode_attention_balance_plan.h): each entry's keys cut
                               // on the device into splits of one size that make at most this many blocks;
                               // `splits` is then the most an entry can get (the workspace's depth)
  int64_t balance_grid = 0;    // ... blocks launched (those past the batch's splits leave at once)
  int64_t balance_min_units = 0;  // ... the shortest split, in kSplitKeysUnit keys
  int64_t balance_wave = 0;    // ... the blocks resident at once (one wave), preferred where as good
  int64_t balance_plain_splits = 0;  // ... > 0 (the rule): the splits of the plain plan, which the blocks take
                                    // instead where the lengths are even (balance_skewed): the grid and the
                                    // workspace hold both
  int64_t rows_total = 0;      // B * Hq * Tq: rows of the workspace
  bool rows_kernel = false;    // decode_attention_rows_kernel: K/V tiles in shared memory, a row per warp
  bool mma_kernel = false;     // decode_attention_mma_kernel: the rows of a kv head on tensor cores
  int mma_warps = 4;           // ... with blocks of this many warps (4 or 8)
  int mma_tiles = 1;           // ... and this many M-tiles of 16 rows (1, 2, 4, 8): rows = 16 x mma_tiles a
                               // block, row_groups = ceil(rows per kv head / rows) blocks a kv head
  int mma_warp_keys = 16;      // ... each warp over this many keys of a K/V tile (16 or 32; key-slice kernel)
  bool mma_rows = false;       // ... its row-owning variant (decode_attention_mma_rows_cuda.cuh): each of
                               // the mma_warps warps one M-tile (mma_tiles = mma_warps) over whole K/V tiles
  bool mma_sm_exclusive = false;  // ... and no more blocks than SMs: launched with the shared memory
                                  // that keeps one block an SM (sm_exclusive_smem in the launcher)
  bool cluster = false;        // the splits of a row group are one thread-block cluster: merged in the
                               // kernel (decode_attention_merge_cuda.cuh), no workspace, no merge kernel
  bool merge_wide = false;     // the merge kernel is merge_splits_wide_kernel (a row's threads spread over
                               // the splits; decode_attention_merge_wide_cuda.cuh), not merge_splits_kernel
  bool programmatic = true;    // main kernels as programmatic dependent launches (DecodeOptions::no_pdl)
  int64_t sms = 0;             // the device's SM count the plan was made for
  size_t workspace_bytes = 0;  // scratch for the splits' partials (0 with one split or a cluster)
};

// Whether the merge kernel (where the plan has one: splits > 1 and no cluster) is merge_splits_wide_kernel:
// past kMergeChunk splits but not for a balanced grid, or as DecodeOptions::merge_wide forces; never for
// split_keys plans (their merge is in split order, merge_splits_kernel's).
bool merge_wide_of(const DecodeOptions& o, const Plan& plan);
// Otherwise whether it is merge_splits_warp_kernel (a warp a row) rather than merge_splits_kernel (a block a
// row): at head dim 64, 96 or 128 with at least kMergeWarpMinRows rows, not for fixed splits. H100, every family
// row timed with each in turn: 0.90-1.02x the time from 224 rows (Falcon B=64 S=2k 31.21 -> 28.11 µs, StarCoder B=64
// S=2k 41.16 -> 37.62), up to 8 % slower at 128 rows or fewer over 16 splits (MQA 32/1 B=4 S=8k 14.29 -> 15.39,
// Llama-2 B=1 S=512 8.95 -> 9.46), where a block a row has more warps in flight for the few rows.
constexpr int64_t kMergeWarpMinRows = 256;
bool merge_warp_of(const DecodeAttentionParams& p, const Plan& plan);

// The options a call runs with: p.options, or the defaults.
const DecodeOptions& options_of(const DecodeAttentionParams& p);

// Tiles of its split's start a block asks L2 for before it waits for the kernel ahead (a programmatic launch:
// its blocks are placed while that kernel ends, the last call's merge or this step's append, and HBM would idle
// meanwhile; an L2 prefetch reads nothing into the block, so whatever that kernel still writes is read after the
// wait as always). Only where the keys' range is known on the host (`host_range`: no cache_seqlens,
// kv_batch_index, kv_mapped or cu_seqlens_q, which the kernel ahead may write and which bound what is mapped)
// and the launch is programmatic; kPrefetchTiles a block, at most a split's `tiles`, and no more than a quarter
// of `l2_bytes` over the blocks of the first wave (`first_wave` blocks of `tile_bytes` tiles). `forced`
// (DecodeOptions::prefetch_tiles): -1 none, N > 0 that many (still only where host_range), 0 the rule.
constexpr int64_t kPrefetchTiles = 4;
// choose_prefetch_tiles' `host_range` for p: none of those device-side fields given.
bool keys_known_on_host(const DecodeAttentionParams& p);
int choose_prefetch_tiles(bool host_range, bool programmatic, int forced, int64_t tiles, int64_t first_wave,
                          int64_t tile_bytes, int64_t l2_bytes);

// Options out of range (negative splits, warps other than 0, 4 or 8, blocks an SM below 1, split_keys
// negative, not a multiple of kSplitKeysUnit or given with splits): kInvalidArgument.
Status check_options(const DecodeOptions& o);
// The options against the call's shape: mma_row_warps forced to an instance not built for its head dim
// (5 warps other than at head_dim 64): kInvalidArgument.
Status check_options_for(const DecodeAttentionParams& p);

// Step 1: kernel family and block shape (p checked by the caller).
Plan plan_kernel(const DecodeAttentionParams& p, const DeviceFacts& device);

// Step 2: splits, the tensor-core kernel's warps and cluster, the workspace. kDriver where the chosen
// tensor-core instance cannot be resident on this device.
Status plan_grid(const DecodeAttentionParams& p, const KernelOccupancy& occupancy, Plan* plan);

// Shared by plan_grid's variants: kDriver where the plan's tensor-core instance cannot be resident; the
// scratch its splits' partials need (none with one split or a cluster).
Status check_mma_resident(const DecodeAttentionParams& p, const Plan& plan, const KernelOccupancy& occupancy);
size_t workspace_of(const DecodeAttentionParams& p, const Plan& plan);

}  // namespace decode_plan

// The CUDA implementation in two calls (decode_attention_cuda.cu), so that a caller plans once: the plan
// (for the current device) gives the workspace size, and the launch takes the plan as it is.
// decode_attention_cuda(p, stream) is both in one.
Status decode_attention_cuda_plan(const DecodeAttentionParams& p, decode_plan::Plan* plan);
Status decode_attention_cuda_run(const DecodeAttentionParams& p, const decode_plan::Plan& plan, void* stream);

}  // namespace pvt

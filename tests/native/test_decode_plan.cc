// The CUDA decode-attention planner (decode_attention_plan.h) on the host, no GPU: the plan of every shape
// of a table against the plans the planner made before it was split out of the launcher (commit 362e68b:
// decode_attention_cuda.cu, compiled with its device queries answered by the numbers below; the program
// that printed them is not kept). A change of heuristic shows up here as a changed row, on purpose.
//
// Device: an H200 as the planner sees it: 132 SMs, the tensor-core kernel compiled for it; occupancy of
// the kernel instance the plan picks: the one-row kernel 4 blocks an SM (110-112 registers, ptxas -v,
// docs/H200_DECODE_PARITY.md), the row-per-warp kernel 6 (an input chosen to differ from the one-row
// kernel's, so that a mixed-up input shows), the tensor-core kernel 2 blocks an SM with 4 warps and 1
// with 8 (100 and 196 KiB of shared memory of 228 KiB), clusters of 8 co-scheduled for both.
#include <cstdint>
#include <cstdio>
#include <string>

#include "harness.h"
#include "kernels/decode_attention_balance_plan.h"
#include "kernels/decode_attention_plan.h"
#include "kernels/kv_quant_attention_plan.h"

using namespace pvt;
using namespace pvt::decode_plan;
using pvt_test::Report;

namespace {

struct Expected {
  int vectorised, vec, lanes, chunks, rows;
  int64_t row_groups, splits, keys_per_split, rows_total;
  int rows_kernel, mma_kernel, mma_warps, cluster, programmatic;
  size_t workspace_bytes;
  int mma_sm_exclusive;
};

struct Case {
  const char* name;
  int dtype;  // ScalarType
  int64_t B, S, Hq, Hkv, D, Tq;
  int slot;       // per-slot cache [B, S, Hkv, D] with cache_seqlens (else seq-major [S, B, Hkv, D])
  int mask;       // a bool mask
  int unaligned;  // K 2 bytes off 16-byte alignment: the scalar path
  const char* option;  // one DecodeOptions field set ("" : none, options null)
  int64_t value;
  Expected want;
  int tiles = 1;  // the tensor-core kernel's M-tiles (Plan::mma_tiles; 1 for every other kernel)
  int mma_rows = 0;  // Plan::mma_rows: the row-owning tensor-core kernel (its warps are its M-tiles)
  int warp_keys = 16;  // Plan::mma_warp_keys: keys a warp of the key-slice kernel takes of a tile
};

// B in {1, 8, 32} x S in {1k, 4k, 16k, 64k} x MHA 32/32 and GQA 32/8 x seq-major and per-slot, fp16,
// head_dim 128; then each option, other dtypes and head dims, a mask, Tq 4, an unaligned cache; then the
// tensor-core families of issue 32 (frozen from this planner: the rows print_row prints for an empty want).
const Case kCases[] = {
    {"table", 1, 1, 1024, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 64, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 1, 1024, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 64, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 1, 1024, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 8, 128, 32, 0, 1, 4, 1, 1, 0, 1}},
    {"table", 1, 1, 1024, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 8, 128, 32, 0, 1, 4, 1, 1, 0, 1}},
    {"table", 1, 1, 4096, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 256, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 1, 4096, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 256, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 1, 4096, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 16, 256, 32, 0, 1, 8, 0, 1, 266240, 1}},
    {"table", 1, 1, 4096, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 16, 256, 32, 0, 1, 8, 0, 1, 266240, 1}},
    {"table", 1, 1, 16384, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 1024, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 1, 16384, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 1024, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 1, 16384, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 16, 1024, 32, 0, 1, 8, 0, 1, 266240, 1}},
    {"table", 1, 1, 16384, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 16, 1024, 32, 0, 1, 8, 0, 1, 266240, 1}},
    {"table", 1, 1, 65536, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 4096, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 1, 65536, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 4096, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 1, 65536, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 16, 4096, 32, 0, 1, 4, 0, 1, 266240, 1}},
    {"table", 1, 1, 65536, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 16, 4096, 32, 0, 1, 4, 0, 1, 266240, 1}},
    {"table", 1, 8, 1024, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 1024, 256, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 8, 1024, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 1024, 256, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 8, 1024, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 2, 512, 256, 0, 1, 8, 1, 1, 0, 1}},
    {"table", 1, 8, 1024, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 2, 512, 256, 0, 1, 8, 1, 1, 0, 1}},
    {"table", 1, 8, 4096, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 4096, 256, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 8, 4096, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 4096, 256, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 8, 4096, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 2, 2048, 256, 0, 1, 8, 1, 1, 0, 1}},
    {"table", 1, 8, 4096, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 2, 2048, 256, 0, 1, 8, 1, 1, 0, 1}},
    {"table", 1, 8, 16384, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 2, 8192, 256, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 8, 16384, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 2, 8192, 256, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 8, 16384, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 2, 8192, 256, 0, 1, 4, 0, 1, 266240, 1}},
    {"table", 1, 8, 16384, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 2, 8192, 256, 0, 1, 4, 0, 1, 266240, 1}},
    {"table", 1, 8, 65536, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 2, 32768, 256, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 8, 65536, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 2, 32768, 256, 0, 0, 4, 0, 1, 266240, 0}},
    {"table", 1, 8, 65536, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 2, 32768, 256, 0, 1, 4, 0, 1, 266240, 1}},
    {"table", 1, 8, 65536, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 2, 32768, 256, 0, 1, 4, 0, 1, 266240, 1}},
    {"table", 1, 32, 1024, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 1, 1024, 1024, 0, 0, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 1024, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 1, 1024, 1024, 0, 0, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 1024, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 1024, 1024, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 1024, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 1024, 1024, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 4096, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 1, 4096, 1024, 0, 0, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 4096, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 1, 4096, 1024, 0, 0, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 4096, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 4096, 1024, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 4096, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 4096, 1024, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 16384, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 1, 16384, 1024, 0, 0, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 16384, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 1, 16384, 1024, 0, 0, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 16384, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 16384, 1024, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 16384, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 16384, 1024, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 65536, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 1, 65536, 1024, 0, 0, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 65536, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 1, 65536, 1024, 0, 0, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 65536, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 65536, 1024, 0, 1, 4, 0, 1, 0, 0}},
    {"table", 1, 32, 65536, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 1, 65536, 1024, 0, 1, 4, 0, 1, 0, 0}},
    {"gqa_no_mma", 1, 1, 4096, 32, 8, 128, 1, 0, 0, 0, "no_mma", 1, {1, 8, 16, 1, 4, 1, 32, 128, 32, 1, 0, 4, 0, 1, 532480, 0}},
    {"gqa_no_mma_b8", 1, 8, 16384, 32, 8, 128, 1, 0, 0, 0, "no_mma", 1, {1, 8, 16, 1, 4, 1, 12, 1366, 256, 1, 0, 4, 0, 1, 1597440, 0}},
    {"gqa_warps4", 1, 1, 4096, 32, 8, 128, 1, 0, 0, 0, "mma_warps", 4, {1, 8, 16, 1, 16, 1, 16, 256, 32, 0, 1, 4, 0, 1, 266240, 1}},
    {"gqa_warps8", 1, 8, 16384, 32, 8, 128, 1, 0, 0, 0, "mma_warps", 8, {1, 8, 16, 1, 16, 1, 2, 8192, 256, 0, 1, 8, 0, 1, 266240, 1}},
    {"gqa_no_cluster", 1, 1, 4096, 32, 8, 128, 1, 0, 0, 0, "no_cluster", 1, {1, 8, 16, 1, 16, 1, 16, 256, 32, 0, 1, 8, 0, 1, 266240, 1}},
    {"gqa_splits3", 1, 1, 4096, 32, 8, 128, 1, 0, 0, 0, "splits", 3, {1, 8, 16, 1, 16, 1, 3, 1366, 32, 0, 1, 8, 1, 1, 0, 1}},
    {"gqa_blocks2", 1, 1, 16384, 32, 8, 128, 1, 0, 0, 0, "mma_blocks_per_sm", 2, {1, 8, 16, 1, 16, 1, 33, 497, 32, 0, 1, 4, 0, 1, 549120, 0}},
    {"mha_mma_mha", 1, 1, 1024, 32, 32, 128, 1, 0, 0, 0, "mma_mha", 1, {1, 8, 16, 1, 16, 1, 4, 256, 32, 0, 1, 4, 1, 1, 0, 1}},
    {"mha_no_mma_b8", 1, 8, 1024, 32, 32, 128, 1, 0, 0, 0, "no_mma", 1, {1, 8, 16, 1, 1, 1, 2, 512, 256, 0, 0, 4, 0, 1, 266240, 0}},
    {"mha_splits40", 1, 1, 1024, 32, 32, 128, 1, 0, 0, 0, "splits", 40, {1, 8, 16, 1, 1, 1, 40, 26, 32, 0, 0, 4, 0, 1, 665600, 0}},
    {"mha_no_pdl", 1, 1, 1024, 32, 32, 128, 1, 0, 0, 0, "no_pdl", 1, {1, 8, 16, 1, 1, 1, 16, 64, 32, 0, 0, 4, 0, 0, 266240, 0}},
    {"gqa_slot_1088", 1, 1, 1088, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 8, 136, 32, 0, 1, 4, 1, 1, 0, 1}},
    {"mha_slot_1088", 1, 1, 1088, 32, 32, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 68, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"mha_1088", 1, 1, 1088, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 12, 91, 32, 0, 0, 4, 0, 1, 199680, 0}},
    {"mha_slot_1088_h8", 1, 1, 1088, 8, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 68, 8, 0, 0, 4, 0, 1, 66560, 0}},
    {"mha_1088_h8", 1, 1, 1088, 8, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 12, 91, 8, 0, 0, 4, 0, 1, 49920, 0}},
    {"gqa_1280", 1, 1, 1280, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 8, 160, 32, 0, 1, 4, 1, 1, 0, 1}},
    {"mha_slot_2048_h8", 1, 1, 2048, 8, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 128, 8, 0, 0, 4, 0, 1, 66560, 0}},
    {"fp32_mha", 0, 1, 4096, 32, 32, 128, 1, 0, 0, 0, "", 0, {1, 4, 32, 1, 1, 1, 16, 256, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"fp32_d256", 0, 2, 4096, 8, 8, 256, 2, 0, 0, 0, "", 0, {1, 4, 32, 2, 2, 1, 32, 128, 32, 0, 0, 4, 0, 1, 1056768, 0}},
    {"bf16_gqa", 2, 8, 4096, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 2, 2048, 256, 0, 1, 8, 1, 1, 0, 1}},
    {"fp16_d64_gqa", 1, 1, 1024, 32, 8, 64, 1, 0, 0, 0, "", 0, {1, 8, 8, 1, 16, 1, 8, 128, 32, 0, 1, 4, 1, 1, 0, 1}},
    // Was the row-per-warp kernel (49 splits) until the tensor-core kernel took head_dim 256 (issue 32).
    {"fp16_d256_gqa", 1, 4, 8192, 16, 4, 256, 1, 0, 0, 0, "", 0, {1, 8, 32, 1, 16, 1, 8, 1024, 64, 0, 1, 4, 0, 1, 528384, 1}},
    {"masked_mha", 1, 1, 1024, 32, 32, 128, 1, 0, 1, 0, "", 0, {1, 8, 16, 1, 1, 1, 8, 128, 32, 0, 0, 4, 0, 1, 133120, 0}},
    {"mha_tq4", 1, 2, 4096, 32, 32, 128, 4, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 2, 2048, 256, 0, 1, 8, 1, 1, 0, 1}},
    {"unaligned", 1, 1, 4096, 32, 32, 128, 1, 0, 0, 1, "", 0, {0, 1, 32, 8, 1, 1, 16, 256, 32, 0, 0, 4, 0, 1, 266240, 0}},
    {"fp32_gqa_tq2", 0, 4, 2048, 16, 4, 128, 2, 0, 0, 0, "", 0, {1, 4, 32, 1, 4, 2, 16, 128, 128, 1, 0, 4, 0, 1, 1064960, 0}},
    // Issue 32: more than 16 rows per kv head and head_dim 80/96/256 on the tensor-core kernel (M-tiles
    // of 16 rows, 8 warps for two or more a block; a large group in row groups of one or two M-tiles, each
    // next to its `_rt8` twin: all rows in one block, the plan before row groups); MHA at 96 stays on the
    // one-row kernel.
    {"mqa32", 1, 8, 8192, 32, 1, 128, 1, 0, 0, 0, "mma_row_warps", -1, {1, 8, 16, 1, 16, 2, 8, 1024, 256, 0, 1, 8, 0, 1, 1064960, 1}, 1},
    {"mqa32_rt8", 1, 8, 8192, 32, 1, 128, 1, 0, 0, 0, "mma_row_tiles", 8, {1, 8, 16, 1, 32, 1, 16, 512, 256, 0, 1, 8, 0, 1, 2129920, 1}, 2},
    {"mqa32_slot", 2, 8, 8192, 32, 1, 128, 1, 1, 0, 0, "mma_row_warps", -1, {1, 8, 16, 1, 16, 2, 8, 1024, 256, 0, 1, 8, 0, 1, 1064960, 1}, 1},
    {"mqa32_slot_rt8", 2, 8, 8192, 32, 1, 128, 1, 1, 0, 0, "mma_row_tiles", 8, {1, 8, 16, 1, 32, 1, 16, 512, 256, 0, 1, 8, 0, 1, 2129920, 1}, 2},
    {"falcon71_d64", 2, 4, 2048, 71, 1, 64, 1, 0, 0, 0, "mma_row_warps", -1, {1, 8, 8, 1, 16, 5, 6, 342, 284, 0, 1, 4, 1, 1, 0, 1}, 1, 0, 32},
    {"falcon71_d64_rt8", 2, 4, 2048, 71, 1, 64, 1, 0, 0, 0, "mma_row_tiles", 8, {1, 8, 8, 1, 128, 1, 8, 256, 284, 0, 1, 8, 1, 1, 0, 1}, 8},
    {"starcoder48", 1, 16, 2048, 48, 1, 128, 1, 0, 0, 0, "mma_row_warps", -1, {1, 8, 16, 1, 16, 3, 2, 1024, 768, 0, 1, 8, 1, 1, 0, 1}, 1},
    {"starcoder48_rt8", 1, 16, 2048, 48, 1, 128, 1, 0, 0, 0, "mma_row_tiles", 8, {1, 8, 16, 1, 64, 1, 8, 256, 768, 0, 1, 8, 1, 1, 0, 1}, 4},
    {"gemma_d256", 2, 4, 8192, 8, 1, 256, 1, 1, 0, 0, "", 0, {1, 8, 32, 1, 16, 1, 33, 249, 32, 0, 1, 4, 0, 1, 1089792, 1}, 1},
    {"gemma_d256_warps8", 2, 1, 2048, 8, 1, 256, 1, 0, 0, 0, "mma_warps", 8, {1, 8, 32, 1, 16, 1, 16, 128, 8, 0, 1, 4, 0, 1, 132096, 1}, 1},
    // One full cluster of 8 splits (fill_cluster) up to the bytes of 2304 keys at head_dim 128: at 256, 1152 keys.
    {"gemma_b1_s1152_full_cluster", 2, 1, 1152, 8, 1, 256, 1, 0, 0, 0, "", 0, {1, 8, 32, 1, 16, 1, 8, 144, 8, 0, 1, 4, 1, 1, 0, 1}, 1},
    {"gemma_b1_s1408_no_fill", 2, 1, 1408, 8, 1, 256, 1, 0, 0, 0, "", 0, {1, 8, 32, 1, 16, 1, 11, 128, 8, 0, 1, 4, 0, 1, 90816, 1}, 1},
    {"spec_gqa_tq8", 1, 4, 4096, 32, 8, 128, 8, 1, 0, 0, "mma_row_warps", -1, {1, 8, 16, 1, 16, 2, 2, 2048, 1024, 0, 1, 8, 1, 1, 0, 1}, 1},
    {"spec_gqa_tq8_rt8", 1, 4, 4096, 32, 8, 128, 8, 1, 0, 0, "mma_row_tiles", 8, {1, 8, 16, 1, 32, 1, 4, 1024, 1024, 0, 1, 8, 1, 1, 0, 1}, 2},
    {"qwen2_tq8", 1, 1, 2048, 28, 4, 128, 8, 0, 0, 0, "mma_row_warps", -1, {1, 8, 16, 1, 16, 4, 8, 256, 224, 0, 1, 8, 1, 1, 0, 1}, 1},
    {"qwen2_tq8_rt8", 1, 1, 2048, 28, 4, 128, 8, 0, 0, 0, "mma_row_tiles", 8, {1, 8, 16, 1, 64, 1, 8, 256, 224, 0, 1, 8, 1, 1, 0, 1}, 4},
    {"d80_gqa", 1, 2, 4096, 16, 2, 80, 1, 0, 0, 0, "", 0, {1, 8, 10, 1, 16, 1, 32, 128, 32, 0, 1, 4, 0, 1, 335872, 1}, 1},
    {"phi3_d96_mha", 1, 1, 2048, 32, 32, 96, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 1, 1, 16, 128, 32, 0, 0, 4, 0, 1, 200704, 0}, 1},
    // Large groups spread over row groups (choose_row_tiles): one M-tile a block where every row group of
    // every (entry, kv head) has an SM, else two; forced counts above what the rows need are capped.
    {"falcon71_b1_s512", 1, 1, 512, 71, 1, 64, 1, 1, 0, 0, "mma_row_warps", -1, {1, 8, 8, 1, 16, 5, 8, 64, 71, 0, 1, 4, 1, 1, 0, 1}, 1, 0, 32},
    {"falcon71_b64_s32k", 1, 64, 32768, 71, 1, 64, 1, 1, 0, 0, "mma_row_warps", -1, {1, 8, 8, 1, 16, 5, 1, 32768, 4544, 0, 1, 4, 0, 1, 0, 0}, 1},
    {"starcoder48_b1_s512", 2, 1, 512, 48, 1, 128, 1, 1, 0, 0, "mma_row_warps", -1, {1, 8, 16, 1, 16, 3, 8, 64, 48, 0, 1, 4, 1, 1, 0, 1}, 1},
    {"gemma_tq4_d256", 1, 2, 8192, 8, 1, 256, 4, 1, 0, 0, "mma_row_warps", -1, {1, 8, 32, 1, 16, 2, 33, 249, 64, 0, 1, 4, 0, 1, 2179584, 1}, 1},
    {"mqa128_d80", 1, 4, 4096, 128, 1, 80, 1, 0, 0, 0, "mma_row_warps", -1, {1, 8, 10, 1, 16, 8, 4, 1024, 512, 0, 1, 8, 1, 1, 0, 1}, 1},
    {"mqa32_rt2", 1, 8, 8192, 32, 1, 128, 1, 0, 0, 0, "mma_row_tiles", 2, {1, 8, 16, 1, 32, 1, 16, 512, 256, 0, 1, 8, 0, 1, 2129920, 1}, 2},
    {"gqa_rt8_capped", 1, 1, 4096, 32, 8, 128, 1, 0, 0, 0, "mma_row_tiles", 8, {1, 8, 16, 1, 16, 1, 16, 256, 32, 0, 1, 8, 0, 1, 266240, 1}, 1},
    // Short contexts on a small grid: one full cluster of 8 splits (fill_cluster) up to 2304 keys, not
    // past it, nor where 8 blocks a cluster exceed the SMs, nor with the splits forced.
    {"gqa_b1_s2k_full_cluster", 1, 1, 2048, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 8, 256, 32, 0, 1, 8, 1, 1, 0, 1}, 1},
    {"gqa_b1_s2400_no_fill", 1, 1, 2400, 32, 8, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 16, 150, 32, 0, 1, 4, 0, 1, 266240, 1}, 1},
    // 4 warps below 192 keys a split (choose_mma_warps), 8 from it.
    {"gqa_b1_s1528_w4", 1, 1, 1528, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 8, 191, 32, 0, 1, 4, 1, 1, 0, 1}, 1},
    {"gqa_b1_s1536_w8", 1, 1, 1536, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 8, 192, 32, 0, 1, 8, 1, 1, 0, 1}, 1},
    {"gqa_b4_s512_no_fill", 1, 4, 512, 32, 8, 128, 1, 0, 0, 0, "", 0, {1, 8, 16, 1, 16, 1, 4, 128, 128, 0, 1, 4, 1, 1, 0, 1}, 1},
    {"gemma_b1_s512_splits4", 1, 1, 512, 8, 1, 256, 1, 1, 0, 0, "splits", 4, {1, 8, 32, 1, 16, 1, 4, 128, 8, 0, 1, 4, 1, 1, 0, 1}, 1},
    // The row-owning kernel (choose_rows_warps): 48-64 rows a kv head (4 warps, groups at least 3/4 full)
    // over a long context with splits of at least 384 keys; not for short splits, 32 rows at Tq > 1, a short
    // context; one-token decode on 16+ (entry, kv head)s over 2k+ keys from 32 rows (MQA: 8 warps past 64 rows);
    // forced with mma_row_warps (any rows, 2, 4 or 8 warps).
    {"rows_starcoder48_b16_s32k", 1, 16, 32768, 48, 1, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 64, 1, 16, 2048, 768, 0, 1, 4, 0, 1, 6389760, 0}, 4, 1},
    {"rows_starcoder48_b4_s32k", 1, 4, 32768, 48, 1, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 64, 1, 66, 497, 192, 0, 1, 4, 0, 1, 6589440, 0}, 4, 1},
    {"rows_starcoder48_b1_s32k_short_splits", 1, 1, 32768, 48, 1, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 3, 44, 745, 48, 0, 1, 8, 0, 1, 1098240, 1}, 1, 0},
    {"rows_starcoder48_b64_s2k_wide_decode", 1, 64, 2048, 48, 1, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 64, 1, 4, 512, 3072, 0, 1, 4, 0, 1, 6389760, 0}, 4, 1},
    {"rows_qwen2_tq8_b16_s8k", 1, 16, 8192, 28, 4, 128, 8, 1, 0, 0, "", 0, {1, 8, 16, 1, 64, 1, 4, 2048, 3584, 0, 1, 4, 0, 1, 7454720, 0}, 4, 1},
    {"rows_llama3_tq8_b16_s8k_32rows", 1, 16, 8192, 32, 8, 128, 8, 1, 0, 0, "", 0, {1, 8, 16, 1, 32, 1, 1, 8192, 4096, 0, 1, 8, 0, 1, 0, 1}, 2, 0},
    {"rows_mqa32_b64_s32k_32rows", 1, 64, 32768, 32, 1, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 64, 1, 4, 8192, 2048, 0, 1, 4, 0, 1, 4259840, 0}, 4, 1},
    {"rows_falcon71_b16_s32k_five_warps", 1, 16, 32768, 71, 1, 64, 1, 1, 0, 0, "", 0, {1, 8, 8, 1, 80, 1, 16, 2048, 1136, 0, 1, 5, 0, 1, 4798464, 0}, 5, 1},
    // One-token decode over 32+ rows a kv head (choose_rows_warps' second rule): 8 warps on a short narrow grid,
    // the key-slice kernel on a small grid (B x Hkv < 16), a short context or Tq > 1 (the 32-row Llama-3 above).
    {"rows_decode_starcoder48_b16_s2k_w8", 1, 16, 2048, 48, 1, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 128, 1, 8, 256, 768, 0, 1, 8, 1, 1, 0, 1}, 8, 1},
    // 65-80 rows at head_dim 64 over 2k+ keys, on a grid of 128k+ keys (entries x keys), take the 5-warp
    // instance (two blocks an SM): B=64 S=2k, B=4 S=32k; not B=16 S=2k (8 warps), B=4 S=8k or B=1 S=32k (the
    // key-slice kernel). 81 rows, or 71 at head_dim 128 (no 5-warp instance there: one 5-warp block an SM by
    // its shared memory), take 8.
    {"rows_decode_falcon71_b64_s2k_five_warps", 1, 64, 2048, 71, 1, 64, 1, 1, 0, 0, "", 0, {1, 8, 8, 1, 80, 1, 4, 512, 4544, 0, 1, 5, 0, 1, 4798464, 0}, 5, 1},
    {"rows_decode_falcon71_b4_s32k_five_warps", 1, 4, 32768, 71, 1, 64, 1, 1, 0, 0, "", 0, {1, 8, 8, 1, 80, 1, 66, 497, 284, 0, 1, 5, 0, 1, 4948416, 0}, 5, 1},
    {"rows_decode_falcon71_b16_s2k_eight_warps", 1, 16, 2048, 71, 1, 64, 1, 1, 0, 0, "", 0, {1, 8, 8, 1, 128, 1, 8, 256, 1136, 0, 1, 8, 1, 1, 0, 1}, 8, 1},
    {"rows_decode_falcon71_b4_s8k_small_grid", 1, 4, 8192, 71, 1, 64, 1, 1, 0, 0, "", 0, {1, 8, 8, 1, 16, 5, 6, 1366, 284, 0, 1, 8, 0, 1, 449856, 1}, 1, 0},
    {"rows_decode_falcon71_b1_s32k_small_grid", 1, 1, 32768, 71, 1, 64, 1, 1, 0, 0, "", 0, {1, 8, 8, 1, 16, 5, 26, 1261, 71, 0, 1, 8, 0, 1, 487344, 1}, 1, 0},
    {"rows_decode_80rows_d64_five_warps", 2, 16, 8192, 80, 1, 64, 1, 1, 0, 0, "", 0, {1, 8, 8, 1, 80, 1, 16, 512, 1280, 0, 1, 5, 0, 1, 5406720, 0}, 5, 1},
    {"rows_decode_81rows_d64_eight_warps", 2, 16, 8192, 81, 1, 64, 1, 1, 0, 0, "", 0, {1, 8, 8, 1, 128, 1, 8, 1024, 1296, 0, 1, 8, 0, 1, 2737152, 1}, 8, 1},
    {"rows_decode_71rows_d128_eight_warps", 1, 16, 8192, 71, 1, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 128, 1, 8, 1024, 1136, 0, 1, 8, 0, 1, 4725760, 1}, 8, 1},
    {"rows_decode_mqa32_b4_s32k_small_grid", 1, 4, 32768, 32, 1, 128, 1, 1, 0, 0, "", 0, {1, 8, 16, 1, 16, 2, 16, 2048, 128, 0, 1, 8, 0, 1, 1064960, 1}, 1, 0},
    {"rows_decode_falcon71_b16_s512_short", 1, 16, 512, 71, 1, 64, 1, 1, 0, 0, "", 0, {1, 8, 8, 1, 16, 5, 1, 512, 1136, 0, 1, 4, 0, 1, 0, 1}, 1, 0, 32},
    {"rows_forced_w8_falcon71", 1, 16, 32768, 71, 1, 64, 1, 1, 0, 0, "mma_row_warps", 8, {1, 8, 8, 1, 128, 1, 8, 4096, 1136, 0, 1, 8, 0, 1, 2399232, 1}, 8, 1},
    {"rows_forced_w5_falcon71_b4", 1, 4, 32768, 71, 1, 64, 1, 1, 0, 0, "mma_row_warps", 5, {1, 8, 8, 1, 80, 1, 66, 497, 284, 0, 1, 5, 0, 1, 4948416, 0}, 5, 1},
    {"rows_forced_w2_mqa32", 2, 4, 2048, 32, 1, 128, 1, 0, 0, 0, "mma_row_warps", 2, {1, 8, 16, 1, 32, 1, 8, 256, 128, 0, 1, 2, 1, 1, 0, 1}, 2, 1},
    {"rows_never_starcoder48", 1, 16, 32768, 48, 1, 128, 1, 1, 0, 0, "mma_row_warps", -1, {1, 8, 16, 1, 32, 2, 4, 8192, 768, 0, 1, 8, 0, 1, 1597440, 1}, 2, 0},
    {"rows_tiles_forced_starcoder48", 1, 16, 32768, 48, 1, 128, 1, 1, 0, 0, "mma_row_tiles", 2, {1, 8, 16, 1, 32, 2, 4, 8192, 768, 0, 1, 8, 0, 1, 1597440, 1}, 2, 0},
};

DecodeOptions options_for(const Case& c) {
  DecodeOptions o;
  const std::string n = c.option;
  if (n == "splits") o.splits = c.value;
  if (n == "no_mma") o.no_mma = c.value != 0;
  if (n == "mma_mha") o.mma_mha = c.value != 0;
  if (n == "mma_warps") o.mma_warps = static_cast<int>(c.value);
  if (n == "no_pdl") o.no_pdl = c.value != 0;
  if (n == "no_cluster") o.no_cluster = c.value != 0;
  if (n == "mma_blocks_per_sm") o.mma_blocks_per_sm = static_cast<int>(c.value);
  if (n == "mma_row_tiles") o.mma_row_tiles = static_cast<int>(c.value);
  if (n == "split_keys") o.split_keys = c.value;
  if (n == "balance") o.balance = static_cast<int>(c.value);
  if (n == "mma_row_warps") o.mma_row_warps = static_cast<int>(c.value);
  if (n == "balance_blocks_per_sm") {  // the rule's budget: under the rule
    o.balance = kBalanceRule;
    o.balance_blocks_per_sm = static_cast<int>(c.value);
  }
  return o;
}

// Plan one case as the launcher does: kernel, then the occupancy of the instance it picked, then grid.
// max_clusters: the device's answer for clusters of every size resident at once (-1: not known);
// resident8: blocks an SM of the 8-warp tensor-core instance.
Status plan_case(const Case& c, const DecodeOptions* options, Plan* plan, int max_clusters = -1, int resident8 = 1) {
  static int32_t lengths[64];  // never read by the planner: only whether the pointers are null
  DecodeAttentionParams p;
  p.batch = c.B; p.q_len = c.Tq; p.q_heads = c.Hq; p.kv_heads = c.Hkv; p.head_dim = c.D; p.kv_len = c.S;
  p.dtype = static_cast<ScalarType>(c.dtype);
  p.scale = 0.1f;
  p.q = reinterpret_cast<void*>(0x100000);
  p.out = reinterpret_cast<void*>(0x200000);
  p.k = reinterpret_cast<void*>(0x300000 + (c.unaligned ? 2 : 0));
  p.v = reinterpret_cast<void*>(0x400000);
  const int64_t D = c.D;
  const int64_t qs[4] = {c.Tq * c.Hq * D, c.Hq * D, D, 1};
  const int64_t seq[4] = {c.B * c.Hkv * D, c.Hkv * D, D, 1};
  const int64_t slot[4] = {c.Hkv * D, c.S * c.Hkv * D, D, 1};
  for (int i = 0; i < 4; ++i) {
    p.q_stride[i] = p.out_stride[i] = qs[i];
    p.k_stride[i] = p.v_stride[i] = c.slot ? slot[i] : seq[i];
  }
  if (c.slot) p.cache_seqlens = p.kv_batch_index = lengths;
  if (c.mask) p.mask = lengths, p.mask_type = ScalarType::kBool;
  p.options = options;
  *plan = plan_kernel(p, DeviceFacts{132, true});
  KernelOccupancy occ;
  occ.resident = plan->rows_kernel ? 6 : 4;
  occ.mma_resident[0] = 2;
  occ.mma_resident[1] = resident8;
  occ.mma_cluster_limit[0] = occ.mma_cluster_limit[1] = kMaxClusterSplits;
  for (int n = 2; n <= kMaxClusterSplits; ++n) occ.mma_max_clusters[0][n] = occ.mma_max_clusters[1][n] = max_clusters;
  return plan_grid(p, occ, plan);
}

std::string name_of(const Case& c) {
  return std::string(c.name) + ".b" + std::to_string(c.B) + ".s" + std::to_string(c.S) + ".h" + std::to_string(c.Hq) +
         "_" + std::to_string(c.Hkv) + ".d" + std::to_string(c.D) + ".tq" + std::to_string(c.Tq) +
         (c.slot ? ".slot" : ".seq") + (c.option[0] ? std::string(".") + c.option + "=" + std::to_string(c.value) : "");
}

// Prints a row as it is written in kCases (to freeze a new row once its plan is argued right).
void print_row(const Case& c, const Plan& p) {
  std::printf("info row {\"%s\", %d, %ld, %ld, %ld, %ld, %ld, %ld, %d, %d, %d, \"%s\", %ld, {%d, %d, %d, %d, %d, %ld, %ld, "
              "%ld, %ld, %d, %d, %d, %d, %d, %zu, %d}, %d, %d},\n",
              c.name, c.dtype, (long)c.B, (long)c.S, (long)c.Hq, (long)c.Hkv, (long)c.D, (long)c.Tq, c.slot, c.mask,
              c.unaligned, c.option, (long)c.value, p.vectorised, p.vec, p.lanes, p.chunks, p.rows, (long)p.row_groups,
              (long)p.splits, (long)p.keys_per_split, (long)p.rows_total, p.rows_kernel, p.mma_kernel, p.mma_warps,
              p.cluster, p.programmatic, p.workspace_bytes, p.mma_sm_exclusive, p.mma_tiles, p.mma_rows);
}

void test_table(Report& r) {
  for (const Case& c : kCases) {
    const DecodeOptions o = options_for(c);
    Plan plan;
    const std::string n = name_of(c);
    if (!r.ok(plan_case(c, c.option[0] ? &o : nullptr, &plan), n + ".plan")) continue;
    if (c.want.rows == 0) print_row(c, plan);  // a row not frozen yet
    const Expected& w = c.want;
    const Expected got{plan.vectorised, plan.vec, plan.lanes, plan.chunks, plan.rows, plan.row_groups, plan.splits,
                       plan.keys_per_split, plan.rows_total, plan.rows_kernel, plan.mma_kernel, plan.mma_warps,
                       plan.cluster, plan.programmatic, plan.workspace_bytes, plan.mma_sm_exclusive};
    r.eq(got.vectorised, w.vectorised, n + ".vectorised");
    r.eq(got.vec, w.vec, n + ".vec");
    r.eq(got.lanes, w.lanes, n + ".lanes");
    r.eq(got.chunks, w.chunks, n + ".chunks");
    r.eq(got.rows, w.rows, n + ".rows");
    r.eq(got.row_groups, w.row_groups, n + ".row_groups");
    r.eq(got.splits, w.splits, n + ".splits");
    r.eq(got.keys_per_split, w.keys_per_split, n + ".keys_per_split");
    r.eq(got.rows_total, w.rows_total, n + ".rows_total");
    r.eq(got.rows_kernel, w.rows_kernel, n + ".rows_kernel");
    r.eq(got.mma_kernel, w.mma_kernel, n + ".mma_kernel");
    r.eq(got.mma_warps, w.mma_warps, n + ".mma_warps");
    r.eq(got.cluster, w.cluster, n + ".cluster");
    r.eq(got.programmatic, w.programmatic, n + ".programmatic");
    r.eq(got.workspace_bytes, w.workspace_bytes, n + ".workspace_bytes");
    r.eq(got.mma_sm_exclusive, w.mma_sm_exclusive, n + ".mma_sm_exclusive");
    r.eq(plan.mma_tiles, c.tiles, n + ".mma_tiles");
    r.eq(plan.mma_rows, c.mma_rows != 0, n + ".mma_rows");
    r.eq(plan.mma_warp_keys, c.warp_keys, n + ".mma_warp_keys");
    // The wide merge kernel wherever a merge kernel runs (partials in the workspace) past 16 splits, not on a
    // balanced grid (no table row forces it or has split_keys).
    r.eq(plan.merge_wide, plan.workspace_bytes > 0 && plan.splits > 16 && plan.balance_blocks == 0, n + ".merge_wide");
  }
}

// Options out of range are refused with a sentence; a device without room for the tensor-core kernel too.
void test_errors(Report& r) {
  DecodeOptions o;
  r.ok(check_options(o), "errors.defaults_ok");
  o.splits = -1;
  r.code(check_options(o), Code::kInvalidArgument, "errors.negative_splits");
  o = DecodeOptions{};
  o.mma_warps = 6;
  r.code(check_options(o), Code::kInvalidArgument, "errors.mma_warps_6");
  o = DecodeOptions{};
  o.mma_blocks_per_sm = 0;
  r.code(check_options(o), Code::kInvalidArgument, "errors.mma_blocks_per_sm_0");
  o = DecodeOptions{};
  o.mma_row_tiles = 3;
  r.code(check_options(o), Code::kInvalidArgument, "errors.mma_row_tiles_3");
  o.mma_row_tiles = -1;
  r.code(check_options(o), Code::kInvalidArgument, "errors.mma_row_tiles_negative");
  o = DecodeOptions{};
  o.mma_row_warps = 3;
  r.code(check_options(o), Code::kInvalidArgument, "errors.mma_row_warps_3");
  o.mma_row_warps = -2;
  r.code(check_options(o), Code::kInvalidArgument, "errors.mma_row_warps_minus2");
  o = DecodeOptions{};
  o.prefetch_tiles = -2;
  r.code(check_options(o), Code::kInvalidArgument, "errors.prefetch_tiles_minus2");
  o.prefetch_tiles = -1;
  r.ok(check_options(o), "errors.prefetch_tiles_none_ok");
  o = DecodeOptions{};
  // 5 warps: an instance at head_dim 64 only (mma_rows_two_an_sm); elsewhere refused before any plan.
  o.mma_row_warps = 5;
  r.ok(check_options(o), "errors.mma_row_warps_5_ok");
  DecodeAttentionParams p5;
  p5.options = &o;
  for (int64_t d : {64, 80, 96, 128, 256}) {
    p5.head_dim = d;
    const std::string n = "errors.mma_row_warps_5.d" + std::to_string(d);
    if (d == 64) {
      r.ok(check_options_for(p5), n);
    } else {
      r.code(check_options_for(p5), Code::kInvalidArgument, n);
    }
  }
  o.mma_row_warps = 8;
  p5.head_dim = 128;
  r.ok(check_options_for(p5), "errors.mma_row_warps_8.d128");
  const Case& gqa = kCases[2];  // GQA B=1 S=1k: the tensor-core kernel
  DecodeAttentionParams p;
  Plan plan;
  r.ok(plan_case(gqa, nullptr, &plan), "errors.gqa_plans");
  r.check(plan.mma_kernel, "errors.gqa_is_mma");
  p.batch = 1; p.q_len = 1; p.q_heads = 32; p.kv_heads = 8; p.head_dim = 128; p.kv_len = 1024;
  KernelOccupancy none;  // the tensor-core kernel cannot be resident
  r.code(plan_grid(p, none, &plan), Code::kDriver, "errors.mma_not_resident");
}

// Clusters only where the device keeps all of them resident at once (KernelOccupancy::mma_max_clusters):
// GQA 32/8 B=4 S=2k plans 4 splits a kv head, 32 clusters of 4 one-SM blocks; an H200-like answer of 30
// such clusters resident (whole clusters per GPC) makes it the merge kernel's way, 31 x 4 fits again.
void test_cluster_fit(Report& r) {
  const Case c{"cluster_fit", 1, 4, 2048, 32, 8, 128, 1, 0, 0, 0, "", 0, {}, 1};
  for (int fit : {-1, 30, 32}) {
    const std::string n = "cluster_fit.max_clusters_" + std::to_string(fit);
    Plan plan;
    if (!r.ok(plan_case(c, nullptr, &plan, fit), n + ".plan")) continue;
    r.eq(plan.mma_kernel, true, n + ".mma_kernel");
    r.eq(plan.splits, int64_t{4}, n + ".splits");
    r.eq(plan.cluster, fit != 30, n + ".cluster");
    r.eq(plan.workspace_bytes, fit != 30 ? size_t{0} : size_t{4 * 128 * (128 + 2) * 4}, n + ".workspace_bytes");
  }
}

// Row groups of two M-tiles whose 8-warp instance fits two blocks an SM (head_dim 64 on the H200) take
// the splits of two blocks an SM: Falcon 71/1 B=16 S=8k per slot, 3 row groups of 32 rows, 5 splits
// instead of 2; one M-tile (B=1) or one block an SM keep theirs; a forced blocks-an-SM count wins (the
// key-slice kernel, mma_row_warps -1).
void test_two_per_sm(Report& r) {
  const Case falcon{"two_per_sm", 1, 16, 8256, 71, 1, 64, 1, 1, 0, 0, "", 0, {}, 1};
  const Case falcon_b1{"two_per_sm_b1", 1, 1, 8256, 71, 1, 64, 1, 1, 0, 0, "", 0, {}, 1};
  struct Want { const Case* c; int resident8, blocks_per_sm; int64_t tiles, groups, splits; };
  for (const Want& w : {Want{&falcon, 2, 1, 2, 3, 5}, Want{&falcon, 1, 1, 2, 3, 2}, Want{&falcon, 2, 3, 2, 3, 8},
                        Want{&falcon_b1, 2, 1, 1, 5, 26}}) {
    const std::string n = std::string(w.c->name) + ".resident8_" + std::to_string(w.resident8) + ".blocks_per_sm_" +
                          std::to_string(w.blocks_per_sm);
    DecodeOptions o;
    o.mma_blocks_per_sm = w.blocks_per_sm;
    o.mma_row_warps = -1;  // the key-slice kernel's rule
    Plan plan;
    if (!r.ok(plan_case(*w.c, &o, &plan, -1, w.resident8), n + ".plan")) continue;
    r.eq(int64_t{plan.mma_tiles}, w.tiles, n + ".mma_tiles");
    r.eq(plan.row_groups, w.groups, n + ".row_groups");
    r.eq(plan.splits, w.splits, n + ".splits");
  }
}

// DecodeOptions::split_keys (batch-invariant decoding): for one row shape (query group x Tq, head dim,
// dtype, layout) the kernel, its block shape and the merge are the same whatever the batch and the kv_len
// bound, the splits are ceil(kv_len / split_keys), never a cluster, and the workspace holds them; bad
// values and too many splits are refused.
void test_split_keys(Report& r) {
  struct Shape { const char* name; int dtype; int64_t Hq, Hkv, D, Tq; int slot; };
  const Shape shapes[] = {{"gqa_tq5", 1, 32, 8, 128, 5, 1}, {"gqa_tq1", 1, 32, 8, 128, 1, 0},
                          {"mha_tq1", 1, 32, 32, 128, 1, 0}, {"mha_tq5", 2, 32, 32, 128, 5, 1},
                          {"mqa_tq3", 1, 32, 1, 128, 3, 0}, {"gemma_tq2", 2, 8, 1, 256, 2, 1},
                          {"fp32_gqa_tq5", 0, 32, 8, 128, 5, 0}};
  for (const Shape& s : shapes) {
    for (int64_t keys : {int64_t{256}, int64_t{512}}) {
      Plan first;
      bool have_first = false;
      for (int64_t B : {1, 8, 32}) {
        for (int64_t S : {200, 1000, 4096, 4160, 16384}) {
          const Case c{s.name, s.dtype, B, S, s.Hq, s.Hkv, s.D, s.Tq, s.slot, 0, 0, "split_keys", keys, {}, 1};
          const DecodeOptions o = options_for(c);
          const std::string n = "split_keys." + name_of(c);
          Plan plan;
          if (!r.ok(plan_case(c, &o, &plan), n + ".plan")) continue;
          const int64_t splits = (S + keys - 1) / keys;
          r.eq(plan.splits, splits, n + ".splits");
          r.eq(plan.split_keys, keys, n + ".split_keys");
          r.eq(plan.cluster, false, n + ".no_cluster");
          r.eq(plan.workspace_bytes,
               splits > 1 ? static_cast<size_t>(splits * B * s.Hq * s.Tq * (s.D + 2) * 4) : size_t{0},
               n + ".workspace_bytes");
          if (!have_first) {
            first = plan, have_first = true;
            continue;
          }
          const bool same = plan.mma_kernel == first.mma_kernel && plan.rows_kernel == first.rows_kernel &&
                            plan.mma_tiles == first.mma_tiles && plan.mma_warps == first.mma_warps &&
                            plan.rows == first.rows && plan.lanes == first.lanes && plan.chunks == first.chunks &&
                            plan.vec == first.vec && plan.row_groups == first.row_groups;
          r.check(same, n + ".same_kernel_as_b1");
        }
      }
    }
  }
  DecodeOptions o;
  o.split_keys = 100;
  r.code(check_options(o), Code::kInvalidArgument, "split_keys.not_a_multiple");
  o.split_keys = -128;
  r.code(check_options(o), Code::kInvalidArgument, "split_keys.negative");
  o.split_keys = 128;
  o.splits = 4;
  r.code(check_options(o), Code::kInvalidArgument, "split_keys.with_splits");
  o.splits = 0;
  r.ok(check_options(o), "split_keys.128_ok");
  const Case many{"split_keys_many", 1, 1, kMaxSplits * 128 + 1, 32, 8, 128, 1, 0, 0, 0, "split_keys", 128, {}, 1};
  Plan plan;
  r.code(plan_case(many, &o, &plan), Code::kInvalidArgument, "split_keys.too_many_splits");
}

// Balanced splits (decode_attention_balance_plan.h): which plans take them (per-slot GQA tensor-core plans of
// 2..kBalanceMaxBatch entries and kBalanceMinUnits or more blocks a split under a bound of kBalanceMinBound
// keys or more where an entry can get two splits, when DecodeOptions::balance is kBalanceRule; forced by
// balance >= 1 wherever they apply, MQA and MHA too; never by default (0), with split_keys or forced splits),
// the budget (2, 4, 8 blocks an SM as a split of every entry takes up to 1, 2, 4 an SM), grid, depth and
// workspace on the 132-SM device, and under the rule the plain plan the grid holds too where that plan's grid
// is larger than the SMs (its splits as the plain plan has them with balance 0: the grid covers its blocks
// and the workspace its partials; none where the plain plan keeps one block an SM); the rule's budget given
// by DecodeOptions::balance_blocks_per_sm.
void test_balance(Report& r) {
  struct Want { const char* name; int64_t B, S, Hq, Hkv, D, Tq; int slot; const char* option; int64_t value;
                int64_t budget, grid, depth, plain; };  // budget 0: not balanced; plain: balance_plain_splits
  const Want wants[] = {
      {"qwen2_b16_16k", 16, 16448, 28, 4, 128, 1, 1, "balance", -1, 264, 264, 33, 0},  // plain: 128 blocks
      {"qwen2_b34_16k", 34, 16448, 28, 4, 128, 1, 1, "balance", -1, 528, 528, 33, 1},  // plain: 136 blocks
      {"llama3_b32_16k", 32, 16448, 32, 8, 128, 1, 1, "balance", -1, 528, 528, 33, 1},
      {"llama3_b64_16k", 64, 16448, 32, 8, 128, 1, 1, "balance", -1, 1056, 1056, 33, 1},
      {"llama3_b64_16k_budget4", 64, 16448, 32, 8, 128, 1, 1, "balance", 4, 528, 528, 3, 0},
      {"llama3_b32_4k_budget2", 32, 4096, 32, 8, 128, 1, 1, "balance", 2, 264, 264, 2, 0},
      {"causal_tq4_b8_8k", 8, 8192, 32, 8, 128, 4, 1, "balance", -1, 264, 264, 16, 0},
      {"falcon71_b64_32k_forced", 64, 32768, 71, 1, 64, 1, 1, "balance", 4, 528, 528, 42, 0},
      {"b1_forced", 1, 8192, 32, 8, 128, 1, 1, "balance", 4, 528, 528, 16, 0},
      {"b256_forced_one_split_each", 256, 4096, 32, 8, 128, 1, 1, "balance", 4, 528, 2048, 1, 0},
      {"s1k_forced", 8, 1024, 32, 8, 128, 1, 1, "balance", 1, 132, 132, 2, 0},
      {"mha_mma_forced", 8, 4096, 32, 32, 128, 1, 1, "balance", 2, 264, 264, 1, 0},
      {"falcon71_b64_32k_rule", 64, 32768, 71, 1, 64, 1, 1, "balance", -1, 0, 0, 0, 0},
      {"mha_mma_rule", 8, 4096, 32, 32, 128, 1, 1, "balance", -1, 0, 0, 0, 0},
      {"llama3_b4_16k_rule", 4, 16448, 32, 8, 128, 1, 1, "balance", -1, 0, 0, 0, 0},
      {"llama3_b8_4k_rule", 8, 4096, 32, 8, 128, 1, 1, "balance", -1, 0, 0, 0, 0},
      {"b1_rule", 1, 8192, 32, 8, 128, 1, 1, "balance", -1, 0, 0, 0, 0},
      {"b256_rule", 256, 16448, 32, 8, 128, 1, 1, "balance", -1, 0, 0, 0, 0},
      {"b257_forced", 257, 4096, 32, 8, 128, 1, 1, "balance", 4, 0, 0, 0, 0},
      {"seq_major", 16, 16448, 28, 4, 128, 1, 0, "balance", 4, 0, 0, 0, 0},
      {"mha_one_row", 16, 16448, 32, 32, 128, 1, 1, "balance", 4, 0, 0, 0, 0},
      {"off", 16, 16448, 28, 4, 128, 1, 1, "balance", 0, 0, 0, 0, 0},
      {"default_off", 16, 16448, 28, 4, 128, 1, 1, "", 0, 0, 0, 0, 0},
      {"default_off_b64", 64, 16448, 32, 8, 128, 1, 1, "", 0, 0, 0, 0, 0},
      {"rule_budget4", 64, 16448, 32, 8, 128, 1, 1, "balance_blocks_per_sm", 4, 528, 528, 3, 1},
      {"rule_budget3_b32", 32, 16448, 32, 8, 128, 1, 1, "balance_blocks_per_sm", 3, 396, 396, 18, 1},
      {"rule_budget1_b64_one_split", 64, 16448, 32, 8, 128, 1, 1, "balance_blocks_per_sm", 1, 0, 0, 0, 0},
      {"split_keys", 16, 16448, 28, 4, 128, 1, 1, "split_keys", 2048, 0, 0, 0, 0},
      {"splits", 16, 16448, 28, 4, 128, 1, 1, "splits", 4, 0, 0, 0, 0},
  };
  for (const Want& w : wants) {
    const Case c{w.name, 1, w.B, w.S, w.Hq, w.Hkv, w.D, w.Tq, w.slot, 0, 0, w.option, w.value, {}, 1};
    const DecodeOptions o = options_for(c);
    const std::string n = "balance." + name_of(c);
    Plan plan;
    if (!r.ok(plan_case(c, c.option[0] ? &o : nullptr, &plan), n + ".plan")) continue;
    r.eq(plan.balance_blocks, w.budget, n + ".budget");
    r.eq(plan.balance_plain_splits, w.plain, n + ".plain_splits");
    if (w.budget == 0) continue;
    r.eq(plan.balance_grid, w.grid, n + ".grid");
    r.eq(plan.splits, w.depth, n + ".depth");
    r.eq(plan.cluster, false, n + ".no_cluster");
    r.eq(plan.mma_sm_exclusive, false, n + ".two_an_sm");
    r.eq(plan.mma_warps, plan.mma_tiles > 1 ? 8 : 4, n + ".warps");
    r.eq(plan.balance_wave, plan.mma_warps == 8 ? 132 : 264, n + ".wave");  // the instance's residency x SMs
    const size_t partials = static_cast<size_t>(w.depth * w.B * w.Hq * w.Tq * (w.D + 2) * 4);
    r.eq(plan.workspace_bytes, w.depth > 1 ? partials + 16 : size_t{0}, n + ".workspace_bytes");
    if (w.plain == 0) continue;
    // The plain plan it holds: the one balance 0 makes (its splits, warps, no cluster), inside the grid.
    DecodeOptions off = o;
    off.balance = 0;
    Plan plain;
    if (!r.ok(plan_case(c, &off, &plain), n + ".plain_plan")) continue;
    r.eq(plain.splits, w.plain, n + ".plain_plan_splits");
    r.eq(plain.mma_warps, plan.mma_warps, n + ".plain_plan_warps");
    r.eq(plain.cluster, false, n + ".plain_plan_no_cluster");
    r.check(plan.balance_grid >= w.B * w.Hkv * plan.row_groups * w.plain && plan.splits >= w.plain,
            n + ".holds_plain", "grid " + std::to_string(plan.balance_grid));
  }
  // The device's choice (balance_skewed), in kSplitKeysUnit units: the plain plan up to a longest entry of
  // 5/4 of the mean, balanced splits past it; empty entries count in the mean.
  struct Choice { const char* name; uint32_t most; uint64_t total; uint32_t entries; bool skewed; };
  const Choice choices[] = {
      {"equal_4k", 32, 32 * 16, 16, false},         {"equal_16k_b64", 128, 128 * 64, 64, false},
      {"at_five_fourths", 40, 32 * 16, 16, false},  {"past_five_fourths", 41, 32 * 16, 16, true},
      {"qwen2_b16_skewed", 124, 488, 16, true},     {"one_long_rest_empty", 1, 1, 2, true},
      {"all_empty", 0, 0, 16, false},               {"b256_equal_64k", 512, 512u * 256u, 256, false},
  };
  for (const Choice& c : choices) {
    r.eq(balance_skewed(c.most, c.total, c.entries), c.skewed, std::string("balance.skewed.") + c.name);
  }
  DecodeOptions o;
  o.balance = -2;
  r.code(check_options(o), Code::kInvalidArgument, "balance.below_minus_one");
  o.balance = kBalanceRule;
  o.balance_blocks_per_sm = -1;
  r.code(check_options(o), Code::kInvalidArgument, "balance.negative_blocks_per_sm");
  o.balance_blocks_per_sm = 0;
  o.balance = 4;  // balanced grids are the key-slice kernel's: forcing the row-owning kernel too is refused
  o.mma_row_warps = 4;
  r.code(check_options(o), Code::kInvalidArgument, "balance.with_forced_row_warps");
  o.mma_row_warps = -1;  // the key-slice kernel forced: fine
  r.code(check_options(o), Code::kOk, "balance.with_key_slice_forced");

}

// The 8-bit merge's splits a round trip: 16 up to 16 splits, 32 past them; forced 16 or 32 only, 32 not with
// split_keys (check_options).
void test_merge_chunk(Report& r) {
  using pvt::quant_plan::merge_chunk_of;
  r.eq(merge_chunk_of(2, 0), 16, "merge_chunk.two_splits");
  r.eq(merge_chunk_of(16, 0), 16, "merge_chunk.sixteen");
  r.eq(merge_chunk_of(17, 0), 32, "merge_chunk.seventeen_wide");
  r.eq(merge_chunk_of(128, 0), 32, "merge_chunk.most");
  r.eq(merge_chunk_of(64, 16), 16, "merge_chunk.forced_16");
  r.eq(merge_chunk_of(4, 32), 32, "merge_chunk.forced_32");
  DecodeOptions o;
  for (int bad : {-16, 8, 64, 128}) {
    o.merge_chunk = bad;
    r.code(check_options(o), Code::kInvalidArgument, "merge_chunk.refused_" + std::to_string(bad));
  }
  o.merge_chunk = 32;
  r.code(check_options(o), Code::kOk, "merge_chunk.32_ok");
  o.split_keys = 256;
  r.code(check_options(o), Code::kInvalidArgument, "merge_chunk.32_with_split_keys");
  o.merge_chunk = 16;
  r.code(check_options(o), Code::kOk, "merge_chunk.16_with_split_keys");

}

// The float merge kernel (merge_wide_of): the wide one past kMergeChunk (16) splits, where a merge kernel
// runs; forced either way by options.merge_wide; never for a cluster, one split or split_keys plans; the option
// 0, 1 or -1 only, and 1 not with split_keys (check_options).
void test_merge_wide(Report& r) {
  using pvt::decode_plan::merge_wide_of;
  using pvt::decode_plan::Plan;
  DecodeOptions o;
  Plan plan;
  struct Want {
    const char* name; int64_t splits; bool cluster; int64_t split_keys; int forced; bool wide; int64_t balance = 0;
  };
  const Want wants[] = {
      {"one_split", 1, false, 0, 0, false},        {"sixteen", 16, false, 0, 0, false},
      {"seventeen", 17, false, 0, 0, true},        {"most", 128, false, 0, 0, true},
      {"cluster", 8, true, 0, 1, false},           {"forced_on_two", 2, false, 0, 1, true},
      {"forced_off_64", 64, false, 0, -1, false},  {"split_keys_40", 40, false, 256, 0, false},
      {"one_split_forced", 1, false, 0, 1, false}, {"balanced_33", 33, false, 0, 0, false, 264},
      {"balanced_33_forced", 33, false, 0, 1, true, 264},
  };
  for (const Want& w : wants) {
    plan.balance_blocks = w.balance;
    plan.splits = w.splits;
    plan.cluster = w.cluster;
    plan.split_keys = w.split_keys;
    o.merge_wide = w.forced;
    r.eq(merge_wide_of(o, plan), w.wide, std::string("merge_wide.") + w.name);
  }
  o = DecodeOptions{};
  for (int bad : {-2, 2, 16}) {
    o.merge_wide = bad;
    r.code(check_options(o), Code::kInvalidArgument, "merge_wide.refused_" + std::to_string(bad));
  }
  for (int good : {-1, 0, 1}) {
    o.merge_wide = good;
    r.code(check_options(o), Code::kOk, "merge_wide.ok_" + std::to_string(good));
  }
  o.split_keys = 256;
  r.code(check_options(o), Code::kInvalidArgument, "merge_wide.forced_with_split_keys");
  o.merge_wide = -1;
  r.code(check_options(o), Code::kOk, "merge_wide.off_with_split_keys");
}

// Which block-or-warp merge kernel a workspace merge takes (merge_warp_of): a warp a row from kMergeWarpMinRows
// rows at head dim 64, 96 or 128; a block a row for fewer rows, other head dims, the wide kernel's plans and
// fixed splits (batch-invariant rows).
void test_merge_warp(Report& r) {
  using pvt::decode_plan::merge_warp_of;
  using pvt::decode_plan::Plan;
  struct Want {
    const char* name; int64_t D, rows; bool wide; int64_t split_keys; bool warp;
  };
  const Want wants[] = {
      {"d64_256_rows", 64, 256, false, 0, true},     {"d64_255_rows", 64, 255, false, 0, false},
      {"d96_falcon_b64", 96, 4544, false, 0, true},  {"d128_mqa_b64", 128, 2048, false, 0, true},
      {"d128_llama_b1", 128, 32, false, 0, false},   {"d80", 80, 4544, false, 0, false},
      {"d256", 256, 4544, false, 0, false},          {"d32", 32, 4544, false, 0, false},
      {"wide", 128, 4544, true, 0, false},           {"split_keys", 128, 4544, false, 256, false},
  };
  for (const Want& w : wants) {
    DecodeAttentionParams p;
    p.head_dim = w.D;
    Plan plan;
    plan.rows_total = w.rows;
    plan.merge_wide = w.wide;
    plan.split_keys = w.split_keys;
    r.eq(merge_warp_of(p, plan), w.warp, std::string("merge_warp.") + w.name);
  }
}

// The 8-bit tensor-core plan (kv_quant_attention_plan.h) on the 132-SM device, 32 query heads (a block
// takes a kv head's 1 or 4 query heads: blocks a split = B x Hkv): block shape and split count, the values
// worked out by hand from the rules' comments (docs/QUANTIZED_CACHE.md's H200 runs).
void test_quant_plan(Report& r) {
  using namespace pvt::quant_plan;
  struct Want { const char* name; int int8; int64_t D; int keys_on_m, forced_warps, forced_keys, warps, warp_keys; };
  const Want wants[] = {
      {"fp8_d128", 0, 128, 1, 0, 0, 4, 32},             // fp8 at head_dim 128: 4 warps of 32 keys
      {"fp8_d128_heads_on_m", 0, 128, 0, 0, 0, 4, 32},
      {"int8_d128", 1, 128, 1, 0, 0, 8, 16},            // int8 at head_dim 128, keys on M: 8 warps of 16 keys
      {"int8_d128_heads_on_m", 1, 128, 0, 0, 0, 4, 16},  // ... not with the query heads on M (groups over 8)
      {"fp8_d64", 0, 64, 0, 0, 0, 4, 16},               // head_dim 64: not measured, 4 warps of 16 keys as before
      {"int8_d64", 1, 64, 1, 0, 0, 4, 16},
      {"forced_8_warps", 0, 128, 1, 8, 0, 8, 16},       // 8 warps take 16 keys
      {"forced_16_keys", 0, 128, 1, 0, 16, 4, 16},
      {"int8_forced_4_warps", 1, 128, 1, 4, 0, 4, 16},  // int8 with 4 warps forced: 16 keys (the rule before at B >= 8)
      {"int8_forced_16_keys", 1, 128, 1, 0, 16, 4, 16},
      {"forced_32_keys", 1, 128, 1, 0, 32, 4, 32},
      {"forced_4_warps_32", 1, 64, 1, 4, 32, 4, 32},
  };
  for (const Want& w : wants) {
    const std::string n = std::string("quant_plan.") + w.name;
    const BlockShape s = choose_block_shape(w.int8 != 0, w.D, w.keys_on_m != 0, w.forced_warps, w.forced_keys);
    r.eq(s.warps, w.warps, n + ".warps");
    r.eq(s.warp_keys, w.warp_keys, n + ".warp_keys");
  }
  // Splits: fewest that minimise waves x (tiles a split + 2) + with 2 or more the merge kernel (2) and a
  // round trip per 16 splits.
  r.eq(choose_mma_splits(256, 512, 128, 3 * 132), int64_t{3}, "quant_plan.splits.gqa_b32_32k");  // 768 blocks, 2 waves
  r.eq(choose_mma_splits(64, 512, 128, 3 * 132), int64_t{6}, "quant_plan.splits.gqa_b8_32k");    // 384: one wave
  r.eq(choose_mma_splits(8, 32, 16, 2 * 132), int64_t{16}, "quant_plan.splits.gqa_b1_4k_k32");  // 2 tiles of 128 each
  // The bound: 256 keys a split and 3 tiles (128-key tiles: 384 keys; 64-key tiles: 256).
  r.eq(most_mma_splits(4096, 128), int64_t{10}, "quant_plan.most.4k_tiles128");
  r.eq(most_mma_splits(4096, 64), int64_t{16}, "quant_plan.most.4k_tiles64");
  r.eq(most_mma_splits(16384, 128), int64_t{42}, "quant_plan.most.16k_tiles128");
  r.eq(most_mma_splits(300, 128), int64_t{1}, "quant_plan.most.short");
  r.eq(choose_mma_splits(8, 32, most_mma_splits(4096, 128), 132), int64_t{8}, "quant_plan.splits.gqa_b1_4k_w8");  // 4 tiles each
  r.eq(choose_mma_splits(8, 5, 16, 2 * 132), int64_t{5}, "quant_plan.splits.one_tile_each");
  // Four waves of blocks or more: one split (MHA B = 32 64k int8, 1024 blocks of one an SM: the wave count alone
  // took 5, 38.8 waves of 103 tiles against 7.8 of 512).
  r.eq(choose_mma_splits(1024, 512, most_mma_splits(65536, 128), 132), int64_t{1}, "quant_plan.splits.many_waves");
  r.eq(choose_mma_splits(1024, 512, most_mma_splits(65536, 128), 2 * 132), int64_t{1}, "quant_plan.splits.3_9_waves");
  // One split needs no merge kernel (kMergeKernelTiles = 2): 6 tiles in one wave, 1 split 6 + 2 = 8 against
  // 2 splits' 3 + 2 + 1 + 2 = 8, a tie the fewer splits take.
  r.eq(choose_mma_splits(100, 6, 16, 2 * 132), int64_t{1}, "quant_plan.splits.one_split_no_merge");
  r.eq(choose_mma_splits(100, 8, 16, 2 * 132), int64_t{2}, "quant_plan.splits.two_splits_still_pay");
  // L2 prefetch before the wait: 4 tiles where the range is host-known and the launch programmatic; at most a
  // split's tiles; the first wave's tiles within a quarter of L2 (50 MiB: 12.5 MiB; 32 KiB tiles x 4 x 96 blocks =
  // 12 MiB fits; x 264 blocks: 1 tile (8.25 MiB), x 528: none); forced counts kept but for a device-held range.
  constexpr int64_t kL2 = 50 << 20, kTile = 32 << 10;
  {  // keys_known_on_host: none of the device-side fields that bound or move an entry's keys
    DecodeAttentionParams hp;
    r.eq(pvt::decode_plan::keys_known_on_host(hp), true, "plan.prefetch.host_keys");
    const int32_t lens[2] = {1, 1};
    for (int f = 0; f < 4; ++f) {
      DecodeAttentionParams d;
      (f == 0 ? d.cache_seqlens : f == 1 ? d.kv_batch_index : f == 2 ? d.kv_mapped : d.cu_seqlens_q) = lens;
      r.eq(pvt::decode_plan::keys_known_on_host(d), false, "plan.prefetch.device_field_" + std::to_string(f));
    }
  }
  r.eq(pvt::decode_plan::choose_prefetch_tiles(true, true, 0, 11, 96, kTile, kL2), 4, "plan.prefetch.gqa_b1");
  r.eq(pvt::decode_plan::choose_prefetch_tiles(true, true, 0, 2, 96, kTile, kL2), 2, "plan.prefetch.split_of_2");
  r.eq(pvt::decode_plan::choose_prefetch_tiles(true, true, 0, 64, 264, kTile, kL2), 1, "plan.prefetch.l2_bound");
  r.eq(pvt::decode_plan::choose_prefetch_tiles(true, true, 0, 64, 528, kTile, kL2), 0, "plan.prefetch.l2_none");
  r.eq(pvt::decode_plan::choose_prefetch_tiles(false, true, 0, 11, 96, kTile, kL2), 0, "plan.prefetch.device_lengths");
  r.eq(pvt::decode_plan::choose_prefetch_tiles(false, true, 8, 11, 96, kTile, kL2), 0, "plan.prefetch.device_lengths_forced");
  r.eq(pvt::decode_plan::choose_prefetch_tiles(true, false, 0, 11, 96, kTile, kL2), 0, "plan.prefetch.no_pdl");
  r.eq(pvt::decode_plan::choose_prefetch_tiles(true, true, -1, 11, 96, kTile, kL2), 0, "plan.prefetch.forced_none");
  r.eq(pvt::decode_plan::choose_prefetch_tiles(true, true, 8, 11, 528, kTile, kL2), 8, "plan.prefetch.forced");
  r.eq(pvt::decode_plan::choose_prefetch_tiles(true, true, 16, 11, 96, kTile, kL2), 11, "plan.prefetch.forced_split_bound");
  r.code(check_warp_keys(0, 0), Code::kOk, "quant_plan.warp_keys.plan");
  r.code(check_warp_keys(0, 32), Code::kOk, "quant_plan.warp_keys.32_plan_warps");
  r.code(check_warp_keys(4, 32), Code::kOk, "quant_plan.warp_keys.32_4_warps");
  r.code(check_warp_keys(8, 16), Code::kOk, "quant_plan.warp_keys.16_8_warps");
  r.code(check_warp_keys(8, 32), Code::kInvalidArgument, "quant_plan.warp_keys.32_8_warps");
  r.code(check_warp_keys(0, 24), Code::kInvalidArgument, "quant_plan.warp_keys.24");
  r.code(check_warp_keys(4, -16), Code::kInvalidArgument, "quant_plan.warp_keys.negative");
  // Keys on M for groups of 1-8 (Qwen2's 7, Gemma's 8) at head_dim 128, and for int8 at 64; the query heads on
  // M past 8 and for fp8 at 64; forced either way.
  for (int64_t group : {1, 4, 7, 8}) {
    const std::string g = std::to_string(group);
    r.check(choose_keys_on_m(false, group, 128, 0) && choose_keys_on_m(true, group, 128, 0), "quant_plan.keys_on_m.rule_" + g);
    r.check(choose_keys_on_m(true, group, 64, 0), "quant_plan.keys_on_m.int8_d64_" + g);
    r.check(!choose_keys_on_m(false, group, 64, 0), "quant_plan.keys_on_m.fp8_d64_" + g);
    r.check(choose_keys_on_m(false, group, 64, 1), "quant_plan.keys_on_m.fp8_d64_forced_" + g);
  }
  for (int64_t group : {9, 16, 32}) {
    r.check(!choose_keys_on_m(false, group, 128, 0) && !choose_keys_on_m(true, group, 64, 0),
            "quant_plan.keys_on_m.rows_" + std::to_string(group));
  }
  r.check(!choose_keys_on_m(true, 4, 128, -1), "quant_plan.keys_on_m.never");
  for (int forced : {-1, 0, 1}) r.code(check_keys_on_m(forced, 8), Code::kOk, "quant_plan.keys_on_m.ok_" + std::to_string(forced + 1));
  r.code(check_keys_on_m(0, 32), Code::kOk, "quant_plan.keys_on_m.rule_32");
  r.code(check_keys_on_m(1, 9), Code::kInvalidArgument, "quant_plan.keys_on_m.forced_9");
  r.code(check_keys_on_m(2, 4), Code::kInvalidArgument, "quant_plan.keys_on_m.two");
  r.code(check_keys_on_m(-2, 4), Code::kInvalidArgument, "quant_plan.keys_on_m.minus_two");
}

}  // namespace

// DecodeOptions::mma_warp_keys: 0, 16 or 32; 32 keys a warp only for the key-slice kernel's instances of 4 warps
// that exist (one M-tile at head_dim 64, two at 64-128), never with split_keys, a balanced grid or 8 warps forced.
void test_warp_keys(Report& r) {
  DecodeOptions o;
  for (int kw : {0, 16, 32}) {
    o.mma_warp_keys = kw;
    r.ok(check_options(o), "warp_keys.ok_" + std::to_string(kw));
  }
  for (int kw : {8, 24, 64, -16}) {
    o.mma_warp_keys = kw;
    r.code(check_options(o), Code::kInvalidArgument, "warp_keys.refused_" + std::to_string(kw));
  }
  struct W {
    Case c;
    int row_tiles, mma_warps, split_keys, balance;
    int want_keys, want_tiles;
  };
  const Expected none{};
  const W ws[] = {
      {{"mqa32_b64_s2k", 1, 64, 2048, 32, 1, 128, 1, 1, 0, 0, "", 0, none}, 2, 0, 0, 0, 32, 2},
      {{"mqa32_b1_s2k", 2, 1, 2048, 32, 1, 128, 1, 0, 0, 0, "", 0, none}, 2, 0, 0, 0, 32, 2},
      {{"d96_mqa24", 1, 4, 2000, 24, 1, 96, 1, 1, 0, 0, "", 0, none}, 2, 0, 0, 0, 32, 2},
      {{"d80_tq4_rows32", 1, 4, 900, 8, 1, 80, 4, 1, 0, 0, "", 0, none}, 2, 0, 0, 0, 32, 2},
      {{"falcon_b64_s512", 1, 64, 512, 71, 1, 64, 1, 1, 0, 0, "", 0, none}, 0, 0, 0, 0, 32, 1},
      {{"d64_rows17_tiles2", 2, 1, 333, 17, 1, 64, 1, 0, 0, 0, "", 0, none}, 2, 0, 0, 0, 32, 2},
      {{"gqa_d128_tiles1", 1, 4, 512, 32, 8, 128, 1, 1, 0, 0, "", 0, none}, 0, 0, 0, 0, 16, 1},  // no instance
      {{"mqa32_d128_tiles4", 1, 4, 2048, 32, 1, 128, 2, 1, 0, 0, "", 0, none}, 4, 0, 0, 0, 16, 4},
      {{"gemma_d256_tiles2", 1, 4, 2048, 32, 1, 256, 1, 1, 0, 0, "", 0, none}, 2, 0, 0, 0, 16, 2},
      {{"mqa32_split_keys", 1, 4, 2048, 32, 1, 128, 1, 1, 0, 0, "", 0, none}, 2, 0, 256, 0, 16, 2},
      {{"mqa32_balance_rule", 1, 16, 2048, 32, 1, 128, 1, 1, 0, 0, "", 0, none}, 2, 0, 0, kBalanceRule, 16, 2},
      {{"mqa32_balance4", 1, 16, 2048, 32, 1, 128, 1, 1, 0, 0, "", 0, none}, 2, 0, 0, 4, 16, 2},
      {{"falcon_warps8", 1, 64, 512, 71, 1, 64, 1, 1, 0, 0, "", 0, none}, 0, 8, 0, 0, 16, 1},
  };
  for (const W& w : ws) {
    DecodeOptions k;
    k.mma_warp_keys = 32;
    k.mma_row_warps = -1;  // the key-slice kernel
    k.mma_row_tiles = w.row_tiles;
    k.mma_warps = w.mma_warps;
    k.split_keys = w.split_keys;
    k.balance = w.balance;
    Plan plan;
    const std::string n = "warp_keys." + std::string(w.c.name);
    if (!r.ok(plan_case(w.c, &k, &plan), n + ".plan")) continue;
    r.check(plan.mma_kernel && !plan.mma_rows, n + ".key_slice_kernel");
    r.eq(plan.mma_warp_keys, w.want_keys, n + ".mma_warp_keys");
    r.eq(plan.mma_tiles, w.want_tiles, n + ".mma_tiles");
    r.eq(plan.mma_warps, w.want_keys == 32 ? 4 : w.mma_warps != 0 ? w.mma_warps : plan.mma_warps, n + ".mma_warps");
    r.check(mma_instance_exists(static_cast<int>(w.c.D), plan.mma_warps, plan.mma_tiles, plan.mma_warp_keys),
            n + ".instance_exists");
  }
  // The default rule (choose_warp_keys): Falcon-like rows at head_dim 64, short, row groups within one wave of one
  // block an SM; not past 2304 keys, past the SMs, at one row group, for Tq > 1 or at other head dims.
  struct Rule { Case c; int want; };
  const Rule rules[] = {
      {{"falcon_b1_s512", 1, 1, 576, 71, 1, 64, 1, 1, 0, 0, "", 0, none}, 32},
      {{"falcon_b4_s2k", 1, 4, 2112, 71, 1, 64, 1, 1, 0, 0, "", 0, none}, 32},
      {{"falcon_b16_s512", 1, 16, 576, 71, 1, 64, 1, 1, 0, 0, "", 0, none}, 32},
      {{"falcon_b26_s512", 1, 26, 576, 71, 1, 64, 1, 1, 0, 0, "", 0, none}, 32},   // 130 row groups: one M-tile each, one wave
      {{"falcon_b27_s512", 1, 27, 576, 71, 1, 64, 1, 1, 0, 0, "", 0, none}, 16},   // 135 row groups: two M-tiles a block (choose_row_tiles)
      {{"falcon_b64_s512", 1, 64, 576, 71, 1, 64, 1, 1, 0, 0, "", 0, none}, 16},
      {{"falcon_b4_s8k", 1, 4, 8256, 71, 1, 64, 1, 1, 0, 0, "", 0, none}, 16},
      {{"falcon_b1_s2305", 1, 1, 2305, 71, 1, 64, 1, 1, 0, 0, "", 0, none}, 16},
      {{"d64_rows16", 1, 4, 512, 16, 1, 64, 1, 1, 0, 0, "", 0, none}, 16},         // one row group
      {{"d64_rows17", 1, 4, 512, 17, 1, 64, 1, 1, 0, 0, "", 0, none}, 32},
      {{"d64_tq2", 1, 4, 512, 16, 1, 64, 2, 1, 0, 0, "", 0, none}, 16},
      {{"mqa32_d128", 1, 4, 512, 32, 1, 128, 1, 1, 0, 0, "", 0, none}, 16},
  };
  for (const Rule& u : rules) {
    Plan plan;
    const std::string n = "warp_keys.rule." + std::string(u.c.name);
    if (!r.ok(plan_case(u.c, nullptr, &plan), n + ".plan")) continue;
    r.eq(plan.mma_warp_keys, u.want, n + ".mma_warp_keys");
    if (u.want == 32) r.eq(plan.mma_warps, 4, n + ".mma_warps");
    DecodeOptions off;  // 16 forced: the rule off
    off.mma_warp_keys = 16;
    if (r.ok(plan_case(u.c, &off, &plan), n + ".plan16")) r.eq(plan.mma_warp_keys, 16, n + ".forced16");
  }
  // One row a kv head (MHA): the tensor-core kernel with 4 warps on a batch of more than one entry within one wave of
  // one block an SM over at most 2304 keys (plan_kernel's one_wave_batch); the one-row kernel at B = 1, past the SMs,
  // past 2304 keys and at head_dim 256.
  struct Mha { Case c; bool mma; };
  const Mha mhas[] = {
      {{"mha_b4_s512", 1, 4, 576, 32, 32, 128, 1, 1, 0, 0, "", 0, none}, true},
      {{"mha_b4_s2k", 1, 4, 2112, 32, 32, 96, 1, 1, 0, 0, "", 0, none}, true},
      {{"mha16_b8_s512", 1, 8, 576, 16, 16, 64, 1, 1, 0, 0, "", 0, none}, true},     // 128 entries
      {{"mha_b2_s512_seq", 1, 2, 512, 32, 32, 80, 1, 0, 0, 0, "", 0, none}, true},
      {{"mha_b1_s512", 1, 1, 576, 32, 32, 128, 1, 1, 0, 0, "", 0, none}, false},
      {{"mha_b5_s512", 1, 5, 576, 32, 32, 128, 1, 1, 0, 0, "", 0, none}, true},       // 160 entries: one_wave_short
      {{"mha_b9_s512", 1, 9, 576, 32, 32, 128, 1, 1, 0, 0, "", 0, none}, false},      // 288 entries: two waves
      {{"mha_b4_s2305", 1, 4, 2305, 32, 32, 128, 1, 1, 0, 0, "", 0, none}, false},
      {{"mha_b4_d256", 1, 4, 576, 32, 32, 256, 1, 1, 0, 0, "", 0, none}, false},
      {{"mha_b4_tq2", 1, 4, 576, 32, 32, 128, 2, 1, 0, 0, "", 0, none}, true},        // 2 rows: the GQA path
  };
  for (const Mha& m : mhas) {
    Plan plan;
    const std::string n = "mha_one_wave." + std::string(m.c.name);
    if (!r.ok(plan_case(m.c, nullptr, &plan), n + ".plan")) continue;
    r.eq(plan.mma_kernel, m.mma, n + ".mma_kernel");
    if (m.mma && m.c.Tq == 1) r.eq(plan.mma_warps, 4, n + ".mma_warps");
  }
  // The instances of 32 keys a warp, and their shared memory (two blocks an SM: at most 113 KiB each).
  for (int d : {64, 80, 96, 128, 256})
    for (int t : {1, 2, 4, 8})
      for (int w : {4, 8}) {
        const bool want = w == 4 && ((t == 1 && d == 64) || (t == 2 && d <= 128));
        const std::string n = "warp_keys.instance.d" + std::to_string(d) + ".t" + std::to_string(t) + ".w" + std::to_string(w);
        r.eq(mma_instance_exists(d, w, t, 32), want, n);
        if (want) r.check(2 * (mma_smem_bytes(d, w, t, 32) + kBlockReservedSmem) <= kSmSmemBytes, n + ".two_an_sm");
      }
}

int main() {
  Report r;
  test_warp_keys(r);
  test_table(r);
  test_errors(r);
  test_cluster_fit(r);
  test_two_per_sm(r);
  test_split_keys(r);
  test_balance(r);
  test_quant_plan(r);
  test_merge_chunk(r);
  test_merge_wide(r);
  test_merge_warp(r);
  return r.finish();
}

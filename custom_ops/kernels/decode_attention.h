// Decode attention straight from a seq-major KV cache: out = softmax(q k^T * scale + mask) v, for a
// few query tokens (Tq = 1 in generate(), k for speculative decoding) against S cached keys.
// The cache is read where it lies ([S, B, Hkv, D], any strides), so a decode step never copies,
// transposes or repeats (GQA) the cache. Softmax and accumulation are float32 for every dtype.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../core/status.h"

namespace pvt {

// Element types of q/k/v/out (all one type) and of the mask.
enum class ScalarType { kFloat32 = 0, kFloat16, kBFloat16, kBool };

const char* scalar_type_name(ScalarType t);

constexpr int kBalanceRule = -1;  // DecodeOptions::balance: the rule's shapes and budget

// Benchmark and test knobs of the CUDA implementation: what its plan would choose, forced. The
// defaults are what runs in use; the library reads no environment variable (the benchmarks and tests
// set these). The host implementation ignores them.
struct DecodeOptions {
  int64_t splits = 0;         // > 0: this many splits of the keys (clamped to 1..128 and >= 16 keys each)
  bool no_mma = false;        // never the tensor-core kernel: the row-per-warp or one-row kernel instead
  bool mma_mha = false;       // the tensor-core kernel for every unmasked one-row (MHA) case it covers
  int mma_warps = 0;          // 0: the plan's choice; 4 or 8: tensor-core blocks of that many warps
  bool no_pdl = false;        // plain stream order instead of programmatic dependent launches
  bool no_cluster = false;    // splits merged through the workspace and the merge kernel, never a cluster
  int mma_blocks_per_sm = 1;  // >= 1: tensor-core blocks an SM that the split count fills one wave of
  int mma_row_tiles = 0;      // 0: the plan's choice; 1, 2, 4 or 8: at most this many M-tiles of 16 query
                              // rows per tensor-core block, a kv head's other rows in more blocks
  int mma_row_warps = 0;      // 0: the plan's choice; -1: never the row-owning tensor-core kernel
                              // (decode_attention_mma_rows_cuda.cuh); 2, 4 or 8: that kernel wherever the
                              // tensor-core kernel runs, blocks of that many warps (one M-tile each)
  int mma_warp_keys = 0;      // 0: the plan's choice (choose_warp_keys in decode_attention_plan.cc); 16 or 32:
                              // keys each warp of the key-slice tensor-core kernel takes of every K/V tile, 32
                              // where such an instance exists for the plan's head dim and M-tiles
                              // (decode_plan::mma_instance_exists; 16 elsewhere)
  // > 0 (a multiple of kSplitKeysUnit): batch-invariant decoding. Splits of exactly this many keys from
  // key 0 (an entry's last one shorter, splits past its length empty), a kernel and block shape that
  // depend only on the rows per kv head (query group x Tq), head dim and dtype, merged through the
  // workspace in split order. A query row's output then depends only on its own q and the keys it sees,
  // bit for bit: not on the batch, the other entries' lengths, the kv_len bound or its own index t.
  // So a speculative verify over k + 1 tokens gives the tokens a one-at-a-time loop with the same Tq
  // gives (tests/native/test_decode_invariance.cu; tests/gpu/spec_loop.py --invariant). At most
  // kMaxSplits splits of kv_len: kInvalidArgument past that. Excludes `splits`.
  int64_t split_keys = 0;
  // Per-slot batches (cache_seqlens) on the tensor-core kernel: each entry's keys cut into splits by its own
  // length on the device, so that skewed lengths still fill the SMs (decode_attention_balance_cuda.cuh).
  // 0 (the default): off (the plain plan). kBalanceRule (-1): on the rule's shapes (balance_wanted,
  // decode_attention_balance_plan.h) balanced splits; where the plain plan's grid is larger than the SMs, the
  // grid holds both and its blocks choose from the batch's lengths (balance_skewed): skewed lengths the
  // balanced splits, even ones the plain plan's. n >= 1: balanced wherever it applies, whatever the lengths, a
  // grid of n blocks an SM that the splits fill. Off by default: on the H200 (2026-12-02, 08:37 UTC;
  // docs/H200_DECODE_PARITY.md) the rule made skewed batches 1.2-2.7x faster, but equal lengths still cost
  // 1-4% where the blocks chose the plain plan and 6-17% where the rule balances them (a plain grid of at most
  // one block an SM, which a balanced grid cannot keep apart). A scheduler that knows its batch is skewed
  // opts in.
  int balance = 0;
  // > 0: the rule's budget, this many blocks an SM, instead of its choice by shape (budget_of in
  // decode_attention_balance_plan.cc); a knob for measuring other budgets with the device's choice kept.
  int balance_blocks_per_sm = 0;
  // 8-bit caches (kv_quant_attention.h): 0, the plan's (merge_chunk_of, kv_quant_attention_plan.h); 16 or 32:
  // splits their merge kernel reads per L2 round trip, forced. (32 is refused with split_keys.)
  int merge_chunk = 0;
  // 0: the plan's choice of float merge kernel (merge_splits_wide_kernel past kMergeChunk splits); 1: that kernel
  // wherever the merge kernel runs; -1: never (merge_splits_kernel, a thread an element).
  int merge_wide = 0;
  // Tensor-core kernels (float16 / bfloat16 key-slice, 8-bit): tiles of its split's start each block asks L2 for
  // before it waits for the kernel ahead (choose_prefetch_tiles, decode_attention_plan.h). 0: the plan's; -1:
  // none; N > 0: N (still none where the device holds the lengths).
  int prefetch_tiles = 0;
};

// What split_keys must be a multiple of: every kernel's unit of keys (a tensor-core tile is at most 128).
constexpr int64_t kSplitKeysUnit = 128;

struct DecodeAttentionParams {
  // Sizes. q_heads must be a multiple of kv_heads: query head h reads kv head h / (q_heads / kv_heads).
  int64_t batch = 0;
  int64_t q_len = 0;     // Tq >= 1
  int64_t q_heads = 0;   // Hq
  int64_t kv_heads = 0;  // Hkv
  int64_t head_dim = 0;  // D
  int64_t kv_len = 0;    // S >= 1
  ScalarType dtype = ScalarType::kFloat32;  // of q, k, v and out (float32, float16 or bfloat16)
  float scale = 0.f;     // multiplies q.k (PaddleNLP: 1 / sqrt(D))

  // All strides are in ELEMENTS (not bytes).
  const void* q = nullptr;          // logical [B, Tq, Hq, D]
  int64_t q_stride[4] = {0, 0, 0, 0};    // for (b, t, h, d)
  const void* k = nullptr;          // logical [S, B, Hkv, D] (the cache's storage order)
  const void* v = nullptr;
  int64_t k_stride[4] = {0, 0, 0, 0};    // for (s, b, h, d)
  int64_t v_stride[4] = {0, 0, 0, 0};
  void* out = nullptr;              // logical [B, Tq, Hq, D]
  int64_t out_stride[4] = {0, 0, 0, 0};  // for (b, t, h, d)

  // Optional mask, logical [B, Hq, Tq, S]; give stride 0 for a broadcast dimension (PaddleNLP's
  // decode mask is [B, 1, Tq, S]: stride 0 for h). Bool: true = attend. Float: added to the scaled
  // score (0 or a large negative value). Null: causal, query t sees keys s < S - Tq + t + 1.
  // A query that sees no key at all (all masked by false or -inf) gets zeros.
  const void* mask = nullptr;
  ScalarType mask_type = ScalarType::kBool;
  int64_t mask_stride[4] = {0, 0, 0, 0};  // for (b, h, t, s)

  // ---- Variable lengths: slot caches, inflight batching, speculative verify. All optional, all
  // int32 arrays in the memory the kernel runs on (device memory for CUDA: read there by the
  // kernel, never by the host). No mask may be given with them.
  //
  // cu_seqlens_q [batch + 1]: packed queries. Entry b owns query rows cu_seqlens_q[b] ..
  //   cu_seqlens_q[b+1] - 1 of q and out; q_stride[1] / out_stride[1] step one row, q_stride[0] /
  //   out_stride[0] are unused, q_len is an upper bound on any entry's query count. Null: every
  //   entry has q_len queries at rows b*Tq + t as above.
  const int32_t* cu_seqlens_q = nullptr;
  // kv_batch_index [batch]: the cache row (slot) entry b reads, i.e. the `b` of k_stride[1].
  //   Null: entry b reads row b.
  const int32_t* kv_batch_index = nullptr;
  // cache_seqlens [cache rows]: per-slot lengths BEFORE this step's new tokens, flash-attn's
  //   `cache_seqlens`. Entry b attends over n_b = cache_seqlens[row(b)] + q_b keys (its q_b new tokens
  //   were written right after), causal: its query t sees keys s < cache_seqlens[row(b)] + t + 1.
  //   kv_len is then an upper bound on any n_b, known to the host without reading the device (it
  //   sizes split-KV work). Null: every entry has kv_len keys, causal as described at `mask`.
  const int32_t* cache_seqlens = nullptr;
  // kv_mapped [cache rows]: tokens of each row backed by mapped memory. An entry with n_b > kv_mapped
  //   is not read: its output is zeros, its lse -inf, and *error_flag gets 1 (never a fault on
  //   unmapped memory). Null: the caller guarantees every read is mapped.
  const int32_t* kv_mapped = nullptr;
  int32_t* error_flag = nullptr;  // set to 1 (never cleared) by an entry refused above; may be null

  // Optional float32 log-sum-exp per query and head: lse[row * q_heads + h] = log(sum_s exp(score))
  // with score = scale * q.k (+ mask), natural log; -inf for a query that sees no key. row = b*Tq + t,
  // or the packed row with cu_seqlens_q. Used to merge partial attention (sequence parallelism).
  float* lse = nullptr;

  // CUDA only: scratch memory for splitting S across blocks (decode_attention_cuda_workspace_bytes).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  // CUDA only: benchmark and test knobs; null means the defaults (DecodeOptions{}).
  const DecodeOptions* options = nullptr;
};

// Shared validation: sizes, head grouping, pointers, dtypes, causal S >= Tq.
Status check_decode_attention_params(const DecodeAttentionParams& p);

// Host implementation (decode_attention_cpu.cc). Always available.
Status decode_attention_cpu(const DecodeAttentionParams& p);

// CUDA implementation (decode_attention_cuda.cu), only in builds with PADDLE_VTENSOR_WITH_CUDA.
// head_dim <= kCudaMaxHeadDim. The workspace size depends on the shapes, the options and the current
// device's SM count; ask for it right before the launch, on the same device. (To plan once for both,
// see decode_attention_plan.h: decode_attention_cuda_plan and decode_attention_cuda_run.)
constexpr int64_t kCudaMaxHeadDim = 256;
size_t decode_attention_cuda_workspace_bytes(const DecodeAttentionParams& p);
// Queues the attention on `stream` (a cudaStream_t) and returns the launch status.
Status decode_attention_cuda(const DecodeAttentionParams& p, void* stream);

}  // namespace pvt

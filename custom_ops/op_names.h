// One spelling of every op, attribute and pass name shared by the ops (custom_ops/paddle) and the
// PIR pass (passes/), so the pass can never build an op under a name or attribute the ops do not
// register. paddle_vtensor/_op_names.py is their Python mirror (Python takes every name from it).
// tests/test_op_names.py checks these against the registered ops, the mirror against this header
// (both directions), and that no other file spells them. Op names are tokens because PD_BUILD_OP
// stringizes its argument; register an op with PVT_BUILD_OP(PVT_OP_...), which expands the token first.
#pragma once

#define PVT_OP_APPEND vtensor_append
#define PVT_OP_RESERVE_ONE_TOKEN vtensor_reserve_one_token
#define PVT_OP_TRUNCATE vtensor_truncate
#define PVT_OP_FROM_DENSE vtensor_from_dense
#define PVT_OP_DECODE_ATTENTION vtensor_decode_attention
#define PVT_OP_DECODE_ATTENTION_LSE vtensor_decode_attention_lse
#define PVT_OP_MERGE_ATTENTION_STATES vtensor_merge_attention_states
#define PVT_OP_SLOT_ATTENTION vtensor_slot_attention
#define PVT_OP_SLOT_CACHE vtensor_slot_cache
#define PVT_OP_SLOT_ERRORS vtensor_slot_errors
#define PVT_OP_SPECULATIVE_ACCEPT vtensor_speculative_accept
#define PVT_OP_QUANT_FROM_DENSE vtensor_quant_from_dense
#define PVT_OP_QUANT_APPEND vtensor_quant_append
#define PVT_OP_QUANT_DECODE_ATTENTION vtensor_quant_decode_attention
#define PVT_OP_QUANT_SLOT_ATTENTION vtensor_quant_slot_attention

// Attribute names, as string literals so the ops can write PVT_ATTR_MAX_SEQ_LEN ": int64_t".
#define PVT_ATTR_MAX_SEQ_LEN "max_seq_len"
#define PVT_ATTR_CHUNK_BYTES "chunk_bytes"
#define PVT_ATTR_SEQ_LEN "seq_len"
#define PVT_ATTR_SCALE "scale"
#define PVT_ATTR_LAYER "layer"
#define PVT_ATTR_CAUSAL "causal"
#define PVT_ATTR_MAX_SEQLEN_Q "max_seqlen_q"
#define PVT_ATTR_MAX_SEQLEN_K "max_seqlen_k"
#define PVT_ATTR_CACHE_SHAPE "cache_shape"
#define PVT_ATTR_TARGET_CAPACITY "target_capacity"
#define PVT_ATTR_DRAFT_CAPACITY "draft_capacity"
#define PVT_ATTR_TARGET_ADVANCE "target_advance"
#define PVT_ATTR_DRAFT_ADVANCE "draft_advance"
#define PVT_ATTR_EOS_TOKEN_ID "eos_token_id"
#define PVT_ATTR_PAD_TOKEN_ID "pad_token_id"
#define PVT_ATTR_CACHE_DTYPE "cache_dtype"
#define PVT_ATTR_EXPECT_TOKENS "expect_tokens"

// The PIR pass, registered with PVT_REGISTER_IR_PASS(PVT_PASS_KV_CACHE, ...).
#define PVT_PASS_KV_CACHE vtensor_kv_cache_pass

#define PVT_NAME_STR2(x) #x
#define PVT_NAME_STR(x) PVT_NAME_STR2(x)
#define PVT_BUILD_OP(name) PD_BUILD_OP(name)
#define PVT_REGISTER_IR_PASS(name, cls) REGISTER_IR_PASS(name, cls)

namespace pvt {
namespace names {

constexpr const char kAppend[] = PVT_NAME_STR(PVT_OP_APPEND);
constexpr const char kReserveOneToken[] = PVT_NAME_STR(PVT_OP_RESERVE_ONE_TOKEN);
constexpr const char kTruncate[] = PVT_NAME_STR(PVT_OP_TRUNCATE);
constexpr const char kFromDense[] = PVT_NAME_STR(PVT_OP_FROM_DENSE);
constexpr const char kDecodeAttention[] = PVT_NAME_STR(PVT_OP_DECODE_ATTENTION);
constexpr const char kDecodeAttentionLse[] = PVT_NAME_STR(PVT_OP_DECODE_ATTENTION_LSE);
constexpr const char kMergeAttentionStates[] = PVT_NAME_STR(PVT_OP_MERGE_ATTENTION_STATES);
constexpr const char kSlotAttention[] = PVT_NAME_STR(PVT_OP_SLOT_ATTENTION);
constexpr const char kSlotCache[] = PVT_NAME_STR(PVT_OP_SLOT_CACHE);
constexpr const char kSlotErrors[] = PVT_NAME_STR(PVT_OP_SLOT_ERRORS);
constexpr const char kSpeculativeAccept[] = PVT_NAME_STR(PVT_OP_SPECULATIVE_ACCEPT);
constexpr const char kQuantFromDense[] = PVT_NAME_STR(PVT_OP_QUANT_FROM_DENSE);
constexpr const char kQuantAppend[] = PVT_NAME_STR(PVT_OP_QUANT_APPEND);
constexpr const char kQuantDecodeAttention[] = PVT_NAME_STR(PVT_OP_QUANT_DECODE_ATTENTION);
constexpr const char kQuantSlotAttention[] = PVT_NAME_STR(PVT_OP_QUANT_SLOT_ATTENTION);

constexpr const char kMaxSeqLen[] = PVT_ATTR_MAX_SEQ_LEN;
constexpr const char kChunkBytes[] = PVT_ATTR_CHUNK_BYTES;
constexpr const char kSeqLen[] = PVT_ATTR_SEQ_LEN;
constexpr const char kScale[] = PVT_ATTR_SCALE;

// The pass, its options (paddle.pir pass attributes) and the environment defaults it reads.
constexpr const char kKvCachePass[] = PVT_NAME_STR(PVT_PASS_KV_CACHE);
constexpr const char kPassQuiet[] = "quiet";
constexpr const char kEnvMaxSeqLen[] = "PADDLE_VTENSOR_MAX_SEQ_LEN";
constexpr const char kEnvChunkBytes[] = "PADDLE_VTENSOR_CHUNK_BYTES";

}  // namespace names
}  // namespace pvt

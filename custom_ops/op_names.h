// One spelling of every op, attribute and pass name shared by the ops (custom_ops/paddle) and the
// PIR pass (passes/), so the pass can never build an op under a name or attribute the ops do not
// register. tests/test_op_names.py checks these against the registered ops and that no other file
// spells them. Op names are tokens because PD_BUILD_OP stringizes its argument; register an op
// with PVT_BUILD_OP(PVT_OP_...), which expands the token first.
#pragma once

#define PVT_OP_APPEND vtensor_append
#define PVT_OP_RESERVE_ONE_TOKEN vtensor_reserve_one_token
#define PVT_OP_TRUNCATE vtensor_truncate
#define PVT_OP_FROM_DENSE vtensor_from_dense
#define PVT_OP_DECODE_ATTENTION vtensor_decode_attention

// Attribute names, as string literals so the ops can write PVT_ATTR_MAX_SEQ_LEN ": int64_t".
#define PVT_ATTR_MAX_SEQ_LEN "max_seq_len"
#define PVT_ATTR_CHUNK_BYTES "chunk_bytes"
#define PVT_ATTR_SEQ_LEN "seq_len"
#define PVT_ATTR_SCALE "scale"

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

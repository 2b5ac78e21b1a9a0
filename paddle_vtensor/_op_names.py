"""Every op, attribute and pass name of the library, as custom_ops/op_names.h spells it: the one
place Python takes a name from (tests/test_op_names.py compares this file with the header, both
directions, and checks that no other module spells one of these names as a string).

Names here are the header's macro names, so a grep for ``PVT_OP_APPEND`` finds both sides.
"""

# Ops (registered with PVT_BUILD_OP(PVT_OP_...)).
PVT_OP_APPEND = "vtensor_append"
PVT_OP_RESERVE_ONE_TOKEN = "vtensor_reserve_one_token"
PVT_OP_TRUNCATE = "vtensor_truncate"
PVT_OP_FROM_DENSE = "vtensor_from_dense"
PVT_OP_DECODE_ATTENTION = "vtensor_decode_attention"
PVT_OP_DECODE_ATTENTION_LSE = "vtensor_decode_attention_lse"
PVT_OP_MERGE_ATTENTION_STATES = "vtensor_merge_attention_states"
PVT_OP_SLOT_ATTENTION = "vtensor_slot_attention"
PVT_OP_SLOT_CACHE = "vtensor_slot_cache"
PVT_OP_SLOT_ERRORS = "vtensor_slot_errors"
PVT_OP_SPECULATIVE_ACCEPT = "vtensor_speculative_accept"
PVT_OP_QUANT_FROM_DENSE = "vtensor_quant_from_dense"
PVT_OP_QUANT_APPEND = "vtensor_quant_append"
PVT_OP_QUANT_DECODE_ATTENTION = "vtensor_quant_decode_attention"
PVT_OP_QUANT_SLOT_ATTENTION = "vtensor_quant_slot_attention"

# Op attributes (and the pass's options of the same name).
PVT_ATTR_MAX_SEQ_LEN = "max_seq_len"
PVT_ATTR_CHUNK_BYTES = "chunk_bytes"
PVT_ATTR_SEQ_LEN = "seq_len"
PVT_ATTR_SCALE = "scale"
PVT_ATTR_LAYER = "layer"
PVT_ATTR_CAUSAL = "causal"
PVT_ATTR_MAX_SEQLEN_Q = "max_seqlen_q"
PVT_ATTR_MAX_SEQLEN_K = "max_seqlen_k"
PVT_ATTR_CACHE_SHAPE = "cache_shape"
PVT_ATTR_TARGET_CAPACITY = "target_capacity"
PVT_ATTR_DRAFT_CAPACITY = "draft_capacity"
PVT_ATTR_TARGET_ADVANCE = "target_advance"
PVT_ATTR_DRAFT_ADVANCE = "draft_advance"
PVT_ATTR_EOS_TOKEN_ID = "eos_token_id"
PVT_ATTR_PAD_TOKEN_ID = "pad_token_id"
PVT_ATTR_CACHE_DTYPE = "cache_dtype"
PVT_ATTR_EXPECT_TOKENS = "expect_tokens"

# The PIR pass (PVT_REGISTER_IR_PASS(PVT_PASS_KV_CACHE, ...)) and its one option that is not an
# attribute above (pvt::names::kPassQuiet).
PVT_PASS_KV_CACHE = "vtensor_kv_cache_pass"
PASS_OPTION_QUIET = "quiet"

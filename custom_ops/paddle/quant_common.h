// What the 8-bit cache ops share (vtensor_quant_from_dense, vtensor_quant_append,
// vtensor_quant_decode_attention, vtensor_quant_slot_attention): the cache dtypes, the checks of
// scales, and the quantizing append into a seq-major cache and its scale cache.
//
// A seq-major 8-bit cache is two VTensors that grow together (docs/QUANTIZED_CACHE.md):
//   codes  [S, B, H, D] float8_e4m3fn or int8 (storage view, one byte per value)
//   scale  fp8:  [H] float32, per kv head, fixed for the cache's life (not a VTensor)
//          int8: [S, B, H, 1] float32 storage view of its own VTensor, one scale per token and head
#pragma once

#include <string>

#include "../kernels/kv_quant.h"
#include "../kernels/kv_quant_append.h"
#include "append_common.h"

namespace pvt {

// float8_e4m3fn -> kFp8E4M3, int8 -> kInt8; anything else refused naming `what` and its dtype.
KvQuant quant_kind_of(phi::DataType dtype, const char* op, const char* what);
// "float8_e4m3fn" / "int8" (the cache_dtype attribute) -> kind; anything else refused.
KvQuant quant_kind_named(const std::string& name, const char* op);
phi::DataType quant_dtype(KvQuant kind);

// An fp8 scale: float32 [heads] on `place`, every value finite and > 0 (read on the host).
void check_fp8_scale(const paddle::Tensor& scale, int64_t heads, const phi::Place& place, const char* op,
                     const char* what);
// Tokens for a quantizing append: float32, float16 or bfloat16 on `place`.
ScalarType quant_source_type(const paddle::Tensor& tokens, const phi::Place& place, const char* op);

// The scale tensor a decode attention or append reads for `codes` (storage view [S, B, H, D]):
// fp8 checked by check_fp8_scale, int8 a whole storage view [>= S, B, H, 1] float32 VTensor.
void check_scale_of(const paddle::Tensor& codes, const paddle::Tensor& scale, KvQuant kind, const char* op,
                    const char* what);

// Quantizes tokens [B, T, H, D] into codes[S .. S+T) of a new or existing 8-bit cache. `codes` and
// `scale` are the cache (null: a new cache of B, H, D reserving max(max_seq_len, T) tokens, then
// `fp8_scale` is the fp8 scale to keep). Writes in place when the caches allow, else copies them
// (copy-on-write) first. Returns {codes [S + T, B, H, D], scale}; the inputs are unchanged on error.
std::vector<paddle::Tensor> quant_append(const paddle::Tensor* codes, const paddle::Tensor* scale,
                                         const paddle::Tensor& tokens, KvQuant kind,
                                         const paddle::Tensor* fp8_scale, int64_t max_seq_len,
                                         int64_t chunk_bytes, const char* op);

// Queues a quantizing append on the tokens' place (CPU or CUDA), counts the bytes written and, on a
// GPU, records the stream with the caches it writes.
void launch_quant_append(const QuantAppendParams& p, const phi::Place& place, void* stream, const char* op);

}  // namespace pvt

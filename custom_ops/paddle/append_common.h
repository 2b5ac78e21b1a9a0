// What vtensor_reserve_one_token, vtensor_append and vtensor_from_dense share: the checks of their
// inputs and attributes, the cache settings derived from the attributes, and the append itself
// (write the new tokens in place when the cache allows it, else copy the cache once into a fresh
// VTensor and append there).
//
// These checks are the only ones: the Python functions pass their arguments straight to the ops and
// relay a refusal as a typed exception (paddle_vtensor/api.py, table in README "Errors"). A refusal
// is a PD_CHECK whose message starts "<op>: " (bad input: Python's ValueError); a failing core call
// says "<op>: <Code>: " (pvt::code_name) and maps by its code.
#pragma once

#include <string>

#include "op_support.h"
#include "vtensor_slot_common.h"

namespace pvt {

// Refuses an absent tensor (None from Python reaches a custom op as a tensor without an impl), which
// every other check would dereference.
void check_defined(const paddle::Tensor& t, const char* op, const char* what);

// The reservation of a new cache: max(max_seq_len, need_tokens) tokens (max_seq_len 0: the library
// default, 4096), chunk_bytes (0: the default, 2 MiB). Refuses negative attributes and a reservation
// whose size in bytes does not fit in int64.
CacheConfig cache_config(const CacheShape& shape, int64_t max_seq_len, int64_t chunk_bytes,
                         int64_t need_tokens, const char* op);

// `cache` is the storage view [S, B, H, D] (the logical [B, S, H, D] transposed, which the Python
// layer does for free on a VTensor); `tokens` is logical [B, T, H, D]. `expect_tokens` > 0 also
// requires T == expect_tokens. When the write cannot be in place and `cache` is a VTensor, the copy
// inherits its reservation and chunk size unless max_seq_len / chunk_bytes (> 0) override them.
// Returns the storage view [S + T, B, H, D].
paddle::Tensor append_to_cache(const paddle::Tensor& cache, const paddle::Tensor& tokens,
                               int64_t max_seq_len, int64_t chunk_bytes, int64_t expect_tokens,
                               const char* op);

// Output shape of an append for static graphs: [S + T, B, H, D], S + T unknown (-1) if either is.
std::vector<int64_t> append_out_shape(const std::vector<int64_t>& cache_shape,
                                      const std::vector<int64_t>& tokens_shape);

}  // namespace pvt

// What vtensor_reserve_one_token and vtensor_append share: validate, then write the new tokens in
// place when the cache allows it, else copy the cache once into a fresh VTensor and append there.
#pragma once

#include "op_support.h"

namespace pvt {

// `cache` is the storage view [S, B, H, D] (the logical [B, S, H, D] transposed, which the Python
// layer does for free on a VTensor); `tokens` is logical [B, T, H, D]. `expect_tokens` > 0 also
// requires T == expect_tokens. Returns the storage view [S + T, B, H, D].
paddle::Tensor append_to_cache(const paddle::Tensor& cache, const paddle::Tensor& tokens,
                               int64_t max_seq_len, int64_t chunk_bytes, int64_t expect_tokens,
                               const char* op);

// Output shape of an append for static graphs: [S + T, B, H, D], S + T unknown (-1) if either is.
std::vector<int64_t> append_out_shape(const std::vector<int64_t>& cache_shape,
                                      const std::vector<int64_t>& tokens_shape);

}  // namespace pvt

// Recognises PaddleNLP's eager attention over a KV cache, as paddle.jit.to_static records it
// (llama's scaled_dot_product_attention without flash attention):
//   qt = transpose(q, [0,2,1,3]);  qs = scale(qt, s)           (bias 0; optional)
//   kt = transpose(K, [0,2,1,3]);  w = matmul(qs, transpose(kt, [0,1,3,2]))  (or transpose_y)
//   w = add(w, mask)  (optional; mask rank 4, [B|1, 1|H, Tq|1, S])
//   p = cast*(softmax(cast*(w), axis=-1))
//   vt = transpose(V, [0,2,1,3]);  out = transpose(matmul(p, vt), [0,2,1,3])
// and replaces `out` by custom_op.vtensor_decode_attention(q, K_storage, V_storage, mask, s), which
// reads the caches where they lie: the transposes of K and V were whole-cache copies.
// Grouped-query attention's repeat_kv (unsqueeze, tile, reshape) between a cache and its transpose
// is matched too: the op reads kv head h / (Hq / Hkv) for query head h, as repeat_kv lays them out.
#pragma once

#include <set>
#include <unordered_map>

#include "paddle/pir/include/core/builder.h"
#include "paddle/pir/include/core/operation.h"
#include "paddle/pir/include/core/value.h"

namespace pvt {

// `v_logical` is a cache value the rewrite is moving to storage layout; `storage` maps such values
// to their storage views. Returns the number of attention chains rewritten (0 or 1 per use of V).
// Replaced ops go into `doomed`, new ones into `created`.
int rewrite_attention(pir::Value v_logical, const std::unordered_map<pir::Value, pir::Value>& storage,
                      pir::Builder& builder, std::set<pir::Operation*>* created,
                      std::set<pir::Operation*>* doomed);

}  // namespace pvt

// The fold of split-KV partials that both merge kernels share (merge_splits_kernel in
// decode_attention_merge_cuda.cuh, the 8-bit merge in kv_quant_attention_cuda.cu): one chunk of N
// splits' (m, l, acc), loaded together by the caller so that a chunk is one L2 round trip, folded into
// a running (m, l, acc) as an online softmax. Internal to the CUDA build; include only from nvcc code.
#pragma once

#include <cmath>
#include <cstdint>

namespace pvt {
namespace decode_cuda {

// mj, lj, aj: the chunk's partials, split by split (V accumulators each); slots u >= live are repeats of a
// split (clamped loads) and get no weight. ex: the exponential of the partials' m (natural or base 2).
template <int N, int V, class Exp>
__device__ __forceinline__ void fold_partials(float (&mj)[N], const float (&lj)[N], const float (&aj)[N][V], int64_t live,
                                              float* m, float* l, float (&a)[V], Exp ex) {
  float mx = *m;
#pragma unroll
  for (int u = 0; u < N; ++u) {
    if (u >= live) mj[u] = -INFINITY;  // a repeat of a split: no weight
    mx = fmaxf(mx, mj[u]);
  }
  if (mx == -INFINITY) return;  // nothing seen yet
  const float c = ex(*m - mx);  // 0 while m is -inf
  *l *= c;
#pragma unroll
  for (int v = 0; v < V; ++v) a[v] *= c;
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const float w = ex(mj[u] - mx);  // 0 for a split that saw nothing
    *l += w * lj[u];
#pragma unroll
    for (int v = 0; v < V; ++v) a[v] += w * aj[u][v];
  }
  *m = mx;
}

// One accumulator a split (the 8-bit merge).
template <int N, class Exp>
__device__ __forceinline__ void fold_partials(float (&mj)[N], const float (&lj)[N], const float (&aj)[N], int64_t live,
                                              float* m, float* l, float* a, Exp ex) {
  fold_partials(mj, lj, reinterpret_cast<const float(&)[N][1]>(aj), live, m, l, reinterpret_cast<float(&)[1]>(*a), ex);
}

}  // namespace decode_cuda
}  // namespace pvt

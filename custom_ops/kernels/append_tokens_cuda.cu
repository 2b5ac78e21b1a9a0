// CUDA append: dst[pos + t, b, h, d] = src[b, t, h, d] for a seq-major cache.
// One grid-stride kernel over the written elements in dst order, so stores are coalesced and the
// [T, B, H, D] block written is contiguous. The copy unit is the widest of 16/8/4 bytes that the
// row size, pointers and strides allow (16-byte copies for head_dim 128 in fp16/bf16/fp32), else
// one element; and the index math is 32-bit whenever every offset fits, 64-bit otherwise.
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../core/cuda_check.h"
#include "append_tokens.h"
#include "programmatic_launch_cuda.cuh"

namespace pvt {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride past this: ~1M threads saturate any GPU today

// Sizes and strides in copy units (not elements, not bytes). dst already points at token `pos`.
template <typename I>
struct UnitParams {
  I n;          // units to copy = T * B * H * Du
  I du, h, b;   // units per row, heads, batch
  I s0, s1, s2, s3;
};

template <typename U, typename I>
__global__ void append_kernel(U* __restrict__ dst, const U* __restrict__ src, UnitParams<I> q) {
  // The attention that reads these tokens next may be placed now (it waits for this grid's writes).
  cuda_launch::allow_next_grid();
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < q.n; i += step) {
    I r = i / q.du;
    const I d = i - r * q.du;
    const I h = r % q.h;
    r /= q.h;
    const I b = r % q.b;
    const I t = r / q.b;
    dst[i] = src[b * q.s0 + t * q.s1 + h * q.s2 + d * q.s3];
  }
}

int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

// Strides of size-1 dimensions never matter; zero them so they cannot block vectorisation.
AppendParams normalised(const AppendParams& p) {
  AppendParams q = p;
  if (q.batch == 1) q.src_stride[0] = 0;
  if (q.tokens == 1) q.src_stride[1] = 0;
  if (q.heads == 1) q.src_stride[2] = 0;
  if (q.head_dim == 1) q.src_stride[3] = 1;
  return q;
}

// Widest copy unit in bytes that keeps every access aligned and inside one row.
int64_t copy_unit_bytes(const AppendParams& p, const char* dst) {
  const int64_t eb = p.elem_bytes;
  if (p.src_stride[3] != 1) return eb;
  for (int64_t w : {16, 8, 4}) {
    if (w <= eb) break;
    const bool ok = (p.head_dim * eb) % w == 0 && reinterpret_cast<uintptr_t>(p.src) % w == 0 &&
                    reinterpret_cast<uintptr_t>(dst) % w == 0 && (p.src_stride[0] * eb) % w == 0 &&
                    (p.src_stride[1] * eb) % w == 0 && (p.src_stride[2] * eb) % w == 0;
    if (ok) return w;
  }
  return eb;
}

template <typename U, typename I>
Status launch_indexed(const AppendParams& p, char* dst, int64_t ratio, cudaStream_t stream) {
  UnitParams<I> q;
  q.du = static_cast<I>(p.head_dim / ratio);
  q.h = static_cast<I>(p.heads);
  q.b = static_cast<I>(p.batch);
  q.n = static_cast<I>(p.tokens * p.batch * p.heads * (p.head_dim / ratio));
  q.s0 = static_cast<I>(p.src_stride[0] / ratio);
  q.s1 = static_cast<I>(p.src_stride[1] / ratio);
  q.s2 = static_cast<I>(p.src_stride[2] / ratio);
  q.s3 = static_cast<I>(ratio == 1 ? p.src_stride[3] : 1);
  const int64_t blocks_needed = (static_cast<int64_t>(q.n) + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(blocks_needed < kMaxBlocks ? blocks_needed : kMaxBlocks);
  append_kernel<U, I><<<blocks, kThreads, 0, stream>>>(reinterpret_cast<U*>(dst),
                                                       static_cast<const U*>(p.src), q);
  PVT_CU_CHECK(cudaGetLastError());
  return Status::Ok();
}

template <typename U>
Status launch(const AppendParams& p, char* dst, cudaStream_t stream) {
  const int64_t ratio = static_cast<int64_t>(sizeof(U)) / p.elem_bytes;  // elements per unit
  // 32-bit indices when the element count (plus one grid-stride step) and the farthest source
  // offset both fit.
  const int64_t n = p.tokens * p.batch * p.heads * p.head_dim;
  const int64_t far = (p.batch - 1) * abs64(p.src_stride[0]) + (p.tokens - 1) * abs64(p.src_stride[1]) +
                      (p.heads - 1) * abs64(p.src_stride[2]) + (p.head_dim - 1) * abs64(p.src_stride[3]);
  if (n + kMaxBlocks * kThreads < INT32_MAX && far < INT32_MAX) return launch_indexed<U, int32_t>(p, dst, ratio, stream);
  return launch_indexed<U, int64_t>(p, dst, ratio, stream);
}

}  // namespace

Status append_tokens_cuda(const AppendParams& params, void* stream) {
  PVT_RETURN_IF_ERROR(check_append_params(params));
  const AppendParams p = normalised(params);
  char* dst = static_cast<char*>(p.dst) +
              p.dst_pos * p.batch * p.heads * p.head_dim * p.elem_bytes;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // The one dtype dispatch: only the element size matters, widened to a vector unit when allowed.
  switch (copy_unit_bytes(p, dst)) {
    case 16: return launch<uint4>(p, dst, s);
    case 8: return launch<uint2>(p, dst, s);
    case 4: return launch<uint32_t>(p, dst, s);
    case 2: return launch<uint16_t>(p, dst, s);
    case 1: return launch<uint8_t>(p, dst, s);  // the codes of an 8-bit cache (copy-on-write)
    default:
      return Status(Code::kInvalidArgument, "append_tokens_cuda: unsupported element size " +
                                                std::to_string(p.elem_bytes) + " bytes");
  }
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

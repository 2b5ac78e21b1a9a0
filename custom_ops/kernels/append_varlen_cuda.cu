// CUDA varlen append: one block per packed source row; the block finds its sequence by binary
// search over cu_seqlens (device memory), checks the slot's bounds, then copies the row's
// heads x head_dim elements in 16/8/4/2-byte units. No host reads of any length.
#ifdef __CUDACC__
#ifdef PADDLE_VTENSOR_WITH_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../core/cuda_check.h"
#include "append_varlen.h"
#include "programmatic_launch_cuda.cuh"

namespace pvt {
namespace {

constexpr int kThreads = 128;

struct VarlenArgs {
  char* dst;
  const char* src;
  int64_t num_seqs, total_tokens, heads, units_per_head, unit_bytes;
  int64_t num_slots, max_seq_len;
  int64_t dst_stride[3];  // in BYTES here
  int64_t src_stride[2];
  const int32_t* cu_seqlens;
  const int32_t* slot_ids;
  const int32_t* cache_seqlens;
  const int32_t* kv_mapped;
  int32_t* error_flag;
};

template <typename U>
__global__ void append_varlen_kernel(VarlenArgs a) {
  // The attention that reads these tokens next may be placed now (it waits for this grid's writes).
  cuda_launch::allow_next_grid();
  const int64_t row = blockIdx.x;
  // Last sequence b with cu_seqlens[b] <= row.
  int64_t lo = 0, hi = a.num_seqs;  // answer in [lo, hi)
  if (row >= a.cu_seqlens[a.num_seqs]) return;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (a.cu_seqlens[mid] <= row) lo = mid; else hi = mid;
  }
  const int64_t b = lo;
  const int64_t first = a.cu_seqlens[b], count = a.cu_seqlens[b + 1] - first;
  const int64_t slot = a.slot_ids ? a.slot_ids[b] : b;
  bool ok = slot >= 0 && slot < a.num_slots;
  int64_t pos = 0;
  if (ok) {
    pos = a.cache_seqlens[slot];
    const int64_t limit = a.kv_mapped ? a.kv_mapped[slot] : a.max_seq_len;
    ok = pos >= 0 && pos + count <= limit && pos + count <= a.max_seq_len;
  }
  if (!ok) {
    if (threadIdx.x == 0 && row == first && a.error_flag) *a.error_flag = 1;
    return;
  }
  const int64_t t = row - first;
  char* d = a.dst + slot * a.dst_stride[0] + (pos + t) * a.dst_stride[1];
  const char* s = a.src + row * a.src_stride[0];
  const int64_t n = a.heads * a.units_per_head;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t h = i / a.units_per_head, u = i - h * a.units_per_head;
    reinterpret_cast<U*>(d + h * a.dst_stride[2])[u] = reinterpret_cast<const U*>(s + h * a.src_stride[1])[u];
  }
}

bool aligned(int64_t v, int64_t unit) { return v % unit == 0; }

}  // namespace

Status append_varlen_cuda(const AppendVarlenParams& p, void* stream) {
  PVT_RETURN_IF_ERROR(check_append_varlen_params(p));
  if (p.total_tokens == 0) return Status::Ok();
  const int64_t eb = p.elem_bytes, row_bytes = p.head_dim * eb;
  VarlenArgs a;
  a.dst = static_cast<char*>(p.dst);
  a.src = static_cast<const char*>(p.src);
  a.num_seqs = p.num_seqs;
  a.total_tokens = p.total_tokens;
  a.heads = p.heads;
  a.num_slots = p.num_slots;
  a.max_seq_len = p.max_seq_len;
  for (int i = 0; i < 3; ++i) a.dst_stride[i] = p.dst_stride[i] * eb;
  for (int i = 0; i < 2; ++i) a.src_stride[i] = p.src_stride[i] * eb;
  a.cu_seqlens = p.cu_seqlens;
  a.slot_ids = p.slot_ids;
  a.cache_seqlens = p.cache_seqlens;
  a.kv_mapped = p.kv_mapped;
  a.error_flag = p.error_flag;
  // Widest unit that every row start (pointers and byte strides) allows.
  int64_t unit = 16;
  const int64_t addr = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p.dst) | reinterpret_cast<uintptr_t>(p.src));
  while (unit > eb && !(aligned(row_bytes, unit) && aligned(addr, unit) && aligned(a.dst_stride[0], unit) &&
                        aligned(a.dst_stride[1], unit) && aligned(a.dst_stride[2], unit) &&
                        aligned(a.src_stride[0], unit) && aligned(a.src_stride[1], unit))) {
    unit /= 2;
  }
  a.unit_bytes = unit;
  a.units_per_head = row_bytes / unit;
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(p.total_tokens));
  switch (unit) {
    case 16: append_varlen_kernel<int4><<<grid, kThreads, 0, s>>>(a); break;
    case 8: append_varlen_kernel<int2><<<grid, kThreads, 0, s>>>(a); break;
    case 4: append_varlen_kernel<int32_t><<<grid, kThreads, 0, s>>>(a); break;
    default: append_varlen_kernel<int16_t><<<grid, kThreads, 0, s>>>(a); break;
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return Status(Code::kDriver, std::string("append_varlen_cuda: launch failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace pvt

#endif  // PADDLE_VTENSOR_WITH_CUDA
#endif  // __CUDACC__

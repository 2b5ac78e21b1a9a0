// Bench-only custom ops for `python -m paddle_vtensor bench-host` (built by
// paddle_vtensor/bench/bench_host.py into its own extension; paddle_vtensor/_build.py keeps this file
// out of the library's sources):
//   * do-nothing ops with the signatures of vtensor_append / vtensor_truncate /
//     vtensor_decode_attention: what Paddle's custom-op dispatch alone costs the host (the floor);
//   * pvt_bench_attention_kernel: the CPU decode-attention kernel alone, timed in C++ over `iters`
//     calls in this thread's CPU time (the machine may be shared), so "the op's own kernel time" is
//     measured rather than guessed.
#include <time.h>

#include "paddle/extension.h"

#include "../kernels/decode_attention.h"

std::vector<paddle::Tensor> NoopAppend(const paddle::Tensor& cache, const paddle::Tensor&, int64_t,
                                       int64_t) {
  return {cache};
}

std::vector<paddle::Tensor> NoopTruncate(const paddle::Tensor& cache, int64_t) { return {cache}; }

std::vector<paddle::Tensor> NoopAttention(const paddle::Tensor& q, const paddle::Tensor&,
                                          const paddle::Tensor&, const paddle::optional<paddle::Tensor>&,
                                          float) {
  return {q};
}

// Q [B, Tq, Hq, D], K/V storage views [S, B, Hkv, D], contiguous float32 on the CPU, no mask.
// Returns a float64 [1] tensor: CPU nanoseconds per kernel call.
std::vector<paddle::Tensor> AttentionKernel(const paddle::Tensor& q, const paddle::Tensor& k,
                                            const paddle::Tensor& v, float scale, int64_t iters) {
  PD_CHECK(q.dtype() == phi::DataType::FLOAT32 && q.place() == phi::CPUPlace(),
           "pvt_bench_attention_kernel: float32 CPU tensors only");
  const auto& qd = q.dims();
  const auto& kd = k.dims();
  paddle::Tensor out = paddle::empty({qd[0], qd[1], qd[2], qd[3]}, q.dtype(), q.place());
  pvt::DecodeAttentionParams p;
  p.batch = qd[0];
  p.q_len = qd[1];
  p.q_heads = qd[2];
  p.head_dim = qd[3];
  p.kv_len = kd[0];
  p.kv_heads = kd[2];
  p.dtype = pvt::ScalarType::kFloat32;
  p.scale = scale;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.out = out.data();
  const int64_t qs[4] = {qd[1] * qd[2] * qd[3], qd[2] * qd[3], qd[3], 1};
  const int64_t ks[4] = {kd[1] * kd[2] * kd[3], kd[2] * kd[3], kd[3], 1};  // (s, b, h, d): contiguous
  const int64_t os[4] = {qd[1] * qd[2] * qd[3], qd[2] * qd[3], qd[3], 1};
  for (int i = 0; i < 4; ++i) {
    p.q_stride[i] = qs[i];
    p.k_stride[i] = ks[i];
    p.v_stride[i] = ks[i];
    p.out_stride[i] = os[i];
  }
  timespec start{}, end{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  for (int64_t i = 0; i < iters; ++i) {
    const pvt::Status st = pvt::decode_attention_cpu(p);
    PD_CHECK(st.ok(), "pvt_bench_attention_kernel: ", st.to_string());
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end);
  const double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
  paddle::Tensor result = paddle::empty({1}, phi::DataType::FLOAT64, phi::CPUPlace());
  *result.data<double>() = ns / static_cast<double>(iters > 0 ? iters : 1);
  return {result};
}

PD_BUILD_OP(pvt_bench_noop_append)
    .Inputs({"Cache", "Tokens"})
    .Outputs({"Out"})
    .Attrs({"max_seq_len: int64_t", "chunk_bytes: int64_t"})
    .SetKernelFn(PD_KERNEL(NoopAppend));

PD_BUILD_OP(pvt_bench_noop_truncate)
    .Inputs({"Cache"})
    .Outputs({"Out"})
    .Attrs({"seq_len: int64_t"})
    .SetKernelFn(PD_KERNEL(NoopTruncate));

PD_BUILD_OP(pvt_bench_noop_attention)
    .Inputs({"Q", "K", "V", paddle::Optional("Mask")})
    .Outputs({"Out"})
    .Attrs({"scale: float"})
    .SetKernelFn(PD_KERNEL(NoopAttention));

PD_BUILD_OP(pvt_bench_attention_kernel)
    .Inputs({"Q", "K", "V"})
    .Outputs({"Out"})
    .Attrs({"scale: float", "iters: int64_t"})
    .SetKernelFn(PD_KERNEL(AttentionKernel));

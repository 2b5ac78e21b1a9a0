// The row-owning tensor-core kernel's instances for head dim D (decode_attention_mma_rows_cuda.cuh):
// fp16/bf16 x 2, 4, 5 or 8 warps (decode_plan::mma_rows_instance_exists: 5 at head_dim 64 only), each a type
// whose statics hold the device's answers for it. Included by decode_attention_mma_rows_d<D>_cuda.cu only, which instantiates it
// for its D (PVT_DECODE_MMA_ROWS_INSTANTIATE).
#pragma once

#include "decode_attention_mma_instances_cuda.cuh"  // query_mma_facts, launch_mma_instance
#include "decode_attention_mma_rows_cuda.cuh"

namespace pvt {
namespace decode_cuda {

template <typename T, int D, int WARPS>
struct MmaRows {
  static constexpr auto kernel = decode_attention_mma_rows_kernel<T, D, WARPS>;
  static constexpr bool kBalanced = false;  // balanced grids are the key-slice kernel's (Mma) only
  static constexpr size_t smem = mma_rows_smem_bytes(D, WARPS);
  static constexpr int threads = WARPS * 32;
  static MmaFacts facts() {
    static const MmaFacts f = query_mma_facts(kernel, threads, smem);
    return f;
  }
  static size_t sm_exclusive() {  // only after facts() asked about smem
    static const size_t n = sm_exclusive_smem(kernel, smem);
    return n;
  }
};

// fn(MmaRows<T, D, warps>{}) where that instance is built, else none() (plain function templates, as
// mma_instance: no generic lambdas over the instance type).
template <typename T, int D, int W, typename Fn, typename None>
auto mma_rows_instance(Fn& fn, None& none) {
  if constexpr (mma_rows_instance_exists(D, W)) {
    return fn(MmaRows<T, D, W>{});
  } else {
    return none();
  }
}

template <typename T, int D, typename Fn, typename None>
auto mma_rows_typed(int warps, Fn& fn, None& none) {
  switch (warps) {
    case 2: return mma_rows_instance<T, D, 2>(fn, none);
    case 4: return mma_rows_instance<T, D, 4>(fn, none);
    case 5: return mma_rows_instance<T, D, 5>(fn, none);
    case 8: return mma_rows_instance<T, D, 8>(fn, none);
    default: return none();
  }
}

template <int D, typename Fn, typename None>
auto with_mma_rows_instance(ScalarType dtype, int warps, Fn&& fn, None&& none) {
  if (dtype == ScalarType::kFloat16) return mma_rows_typed<__half, D>(warps, fn, none);
  if (dtype == ScalarType::kBFloat16) return mma_rows_typed<__nv_bfloat16, D>(warps, fn, none);
  return none();
}

template <int D>
MmaFacts mma_rows_facts(ScalarType dtype, int warps) {
  return with_mma_rows_instance<D>(dtype, warps, [](auto inst) { return decltype(inst)::facts(); },
                                   [] { return MmaFacts{}; });
}

template <int D>
Status mma_rows_launch(const DecodeAttentionParams& p, const decode_plan::Plan& plan, const SplitCount& splits,
                       const Workspace& ws, cudaStream_t stream) {
  return with_mma_rows_instance<D>(
      p.dtype, plan.mma_warps,
      [&](auto inst) { return launch_mma_instance<decltype(inst)>(p, plan, splits, ws, stream); },
      [&] {
        return Status(Code::kInvalidArgument, "decode_attention_cuda: no row-owning tensor-core kernel for head_dim " +
                                                  std::to_string(D) + ", " + std::to_string(plan.mma_warps) + " warps");
      });
}

#define PVT_DECODE_MMA_ROWS_INSTANTIATE(D)                                                                     \
  template MmaFacts mma_rows_facts<D>(ScalarType, int);                                                       \
  template Status mma_rows_launch<D>(const DecodeAttentionParams&, const decode_plan::Plan&, const SplitCount&, \
                                     const Workspace&, cudaStream_t);

}  // namespace decode_cuda
}  // namespace pvt

#!/bin/bash
# How devbin/ was built (for the record; paths of that session). The harness at f5d60a4 in /tmp/q5nb (cmake -G Ninja
# -DPVT_WITH_CUDA=ON), main 1c63ed9's harness in /tmp/q5/mainb the same way; the variants replace the
# kv_quant_attention_mma_cuda.cu object of libpvt_core.a and relink the harness.
set -e
K=custom_ops/kernels; SRC=$K/kv_quant_attention_mma_cuda.cu
# L: 32-key blocks held to 168 registers with 2 stages (3 blocks an SM)
sed -e 's/__global__ void __launch_bounds__(32 \* W) mma_split_kernel/__global__ void __launch_bounds__(32 * W, KPW == 32 ? 3 : 1) mma_split_kernel/' \
    -e 's/stages<D>()/(KPW == 32 \&\& D == 128 ? 2 : stages<D>())/g' $SRC > $K/zz_tmp_lb3.cu
# broken_k32: every k16 step of P V reads the first step's V rows (16-key warps have one step: unchanged)
sed 's/const int key = kw + 16 \* kk + 2 \* t/const int key = kw + 2 * t/' $SRC > $K/zz_tmp_broken_k32.cu
# each: nvcc with the ninja command of $SRC (-c zz_tmp_X.cu -o X.o), then
#   cp libpvt_core.a lib_X.a; ar d lib_X.a kv_quant_attention_mma_cuda.cu.o; ar r lib_X.a X.o
#   c++ -O3 CMakeFiles/test_kv_quant_cuda.dir/test_kv_quant.cu.o -o test_kv_quant_cuda_X lib_X.a <the harness's libs>
rm -f $K/zz_tmp_*.cu

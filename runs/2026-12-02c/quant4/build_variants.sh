#!/bin/bash
# Builds the main harness and the derived binaries into /work/main/.quant4_tree/devbin:
# broken_v / broken_k (the source's folds broken), vsub (runs/2026-12-02c/quant4/variant_vsub.py), vsub_broken_k.
set -e
cd /tmp/q4nb && nice ninja -j2 test_kv_quant_cuda | grep -E "error|warning" || true
MMA=CMakeFiles/pvt_core.dir/work/wt-quant4/custom_ops/kernels/kv_quant_attention_mma_cuda.cu.o
CMD=$(ninja -t commands test_kv_quant_cuda | grep -F "kv_quant_attention_mma_cuda.cu" | head -1)
SRC=/work/wt-quant4/custom_ops/kernels/kv_quant_attention_mma_cuda.cu
K=/work/wt-quant4/custom_ops/kernels
D=/work/main/.quant4_tree/devbin; rm -f $D/test_kv_quant_cuda*; mkdir -p $D
L="-L/usr/local/cuda-13.0/targets/x86_64-linux/lib /tmp/quant4_stub/libcuda.so /usr/local/cuda-13.0/lib/libcudart.so -lcudadevrt -lcudart"
T=CMakeFiles/test_kv_quant_cuda.dir/test_kv_quant.cu.o
BV='s/constexpr uint32_t kNegBiasPair = 0xE480E480u;/constexpr uint32_t kNegBiasPair = 0xE400E400u;/'
BK='s/      s_bias\[hi\] = -kInt8Bias \* sum;/      s_bias[hi] = 0.f * sum;/'
sed "$BV" $SRC > $K/zz_tmp_broken_v.cu
sed "$BK" $SRC > $K/zz_tmp_broken_k.cu
python3 runs/2026-12-02c/quant4/variant_vsub.py $SRC $K/zz_tmp_vsub.cu
sed "$BK" $K/zz_tmp_vsub.cu > $K/zz_tmp_vsub_broken_k.cu
for v in broken_v broken_k vsub vsub_broken_k; do
  cmp -s $SRC $K/zz_tmp_$v.cu && echo "$v SAME AS SOURCE"
  c=$(echo "$CMD" | sed "s#-c $SRC -o $MMA#-c $K/zz_tmp_$v.cu -o /tmp/q4broken/$v.o#" | sed 's/-MD -MT [^ ]* -MF [^ ]*//')
  eval "$c" 2>/dev/null
  cp libpvt_core.a /tmp/q4broken/lib_$v.a && ar d /tmp/q4broken/lib_$v.a kv_quant_attention_mma_cuda.cu.o && ar r /tmp/q4broken/lib_$v.a /tmp/q4broken/$v.o
  c++ -O3 $T -o $D/test_kv_quant_cuda_$v /tmp/q4broken/lib_$v.a $L
done
cmp -s $K/zz_tmp_vsub.cu $K/zz_tmp_vsub_broken_k.cu && echo "vsub_broken_k NOT BROKEN"
rm -f $K/zz_tmp_*.cu
c++ -O3 $T -o $D/test_kv_quant_cuda_base /tmp/q4base/lib.a $L
cp test_kv_quant_cuda $D/
strip $D/test_kv_quant_cuda*
ls -la --time-style=+%T $D; md5sum $D/test_kv_quant_cuda*

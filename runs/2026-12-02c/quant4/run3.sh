#!/usr/bin/env bash
# H200 call 3 of issue 28 point 4 (branch quant4): which part of the int8 change costs the 1-3% against main
# at B >= 8. devbin/: test_kv_quant_cuda (A: the branch), _C (A with the K loop in main's order, the n8
# tile outer), _D (A with K decoded exactly: HSUB2 a pair, no K bias; V's fold kept), _base (main a3b70a6).
# Benches only, interleaved twice.
cd "$(dirname "$0")/../../.."
exec > >(tee $OUT/run3.log) 2>&1
export LD_LIBRARY_PATH=$PWD/devbin:${LD_LIBRARY_PATH:-}
date -u
for run in "A devbin/test_kv_quant_cuda" "C devbin/test_kv_quant_cuda_C" "D devbin/test_kv_quant_cuda_D" "base devbin/test_kv_quant_cuda_base" "A devbin/test_kv_quant_cuda" "C devbin/test_kv_quant_cuda_C" "D devbin/test_kv_quant_cuda_D" "base devbin/test_kv_quant_cuda_base"; do
  set -- $run; tag=$1; bin=$2
  timeout 30 $bin --bench-only 2>&1 | grep -E "BENCH llama|FAIL" | sed "s/^/$tag /" >> $OUT/bench3.log
done
awk '{print $1, $3, $4, $5, $7, $8}' $OUT/bench3.log
echo "== end ${SECONDS}s"

#!/usr/bin/env bash
# H200 call 2 of issue 28 point 4 (branch quant4): after call 1 (run.sh) showed int8 slower than main's at
# B >= 8 (its Q K^T chains no longer interleaved). devbin/: test_kv_quant_cuda (this branch: K's bias
# added after the MMAs, V's bias tile; the 8-warp rule narrowed to GQA B = 1 S >= 8k), _vsub (V decoded
# exactly, one HSUB2 a pair, no bias tile: /tmp/q4vsub.py's transform), _broken_k (K's bias not subtracted),
# _base (main a3b70a6's 8-bit kernels). Checks, the broken K fold, benches.
cd "$(dirname "$0")/../../.."
exec > >(tee $OUT/run2.log) 2>&1
export LD_LIBRARY_PATH=$PWD/devbin:${LD_LIBRARY_PATH:-}
B=devbin/test_kv_quant_cuda
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== checks (start ${SECONDS}s)"
timeout 60 $B --no-bench > $OUT/checks2.log 2>&1; echo "rc=$?"; grep FAIL $OUT/checks2.log | head -5; tail -1 $OUT/checks2.log
echo "== checks vsub (start ${SECONDS}s)"
timeout 40 devbin/test_kv_quant_cuda_vsub --tc-only > /tmp/vsub.log 2>&1; echo "rc=$?"; grep FAIL /tmp/vsub.log | head -3; tail -1 /tmp/vsub.log
echo "== broken k (start ${SECONDS}s)"
timeout 40 devbin/test_kv_quant_cuda_broken_k --tc-only > /tmp/broken_k.log 2>&1; echo "rc=$?"
echo "failures: $(grep -c FAIL /tmp/broken_k.log)"; grep FAIL /tmp/broken_k.log | head -2; tail -1 /tmp/broken_k.log
{ echo "== checks vsub"; grep -E "FAIL|passed" /tmp/vsub.log; echo "== broken k"; grep -E "FAIL|passed" /tmp/broken_k.log; } > $OUT/variants2.log
for run in "A1 $B" "B1 devbin/test_kv_quant_cuda_vsub" "base devbin/test_kv_quant_cuda_base" "A2 $B" "B2 devbin/test_kv_quant_cuda_vsub"; do
  set -- $run; tag=$1; bin=$2
  echo "== bench $tag (start ${SECONDS}s)"; timeout 30 $bin --bench-only 2>&1 | grep -E "BENCH|FAIL" | sed "s/^/$tag /" >> $OUT/bench2.log
done
grep -E "BENCH llama" $OUT/bench2.log | awk '{print $1, $3, $4, $5, $6, $7, $8}'
echo "== end ${SECONDS}s"

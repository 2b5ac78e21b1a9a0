#!/usr/bin/env bash
# One H200 call for issue 28's tensor-core 8-bit decode kernel (branch quant2): checks, the deliberately
# broken build, the benchmark against our fp16 kernel, cuDNN's rows, compute-sanitizer on the new cases.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/devbin:${LD_LIBRARY_PATH:-}
B=devbin/test_kv_quant_cuda
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if ldd $B | grep -q "not found"; then
  echo "carried binary does not load: building here"; ldd $B | grep "not found"
  cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja >/dev/null && cmake --build /tmp/nb --target test_kv_quant_cuda -j16 2>&1 | tail -2
  B=/tmp/nb/test_kv_quant_cuda
fi
echo "== checks (start ${SECONDS}s)"
timeout 50 $B --no-bench > $OUT/checks.log 2>&1; echo "rc=$?"
grep -E "FAIL|passed" $OUT/checks.log | head -20
echo "== broken on purpose (start ${SECONDS}s)"
timeout 40 devbin/test_kv_quant_cuda_broken --no-bench > $OUT/broken.log 2>&1; echo "rc=$?"
grep FAIL $OUT/broken.log | head -3; grep "passed" $OUT/broken.log | tail -1
echo "== bench (start ${SECONDS}s)"
timeout 100 $B --bench-only 2>&1 | tee $OUT/bench.log | grep -E "BENCH|FAIL"
echo "== sanitizer (start ${SECONDS}s)"
timeout 60 compute-sanitizer --tool memcheck $B --tc-only > $OUT/sanitizer.log 2>&1; echo "rc=$?"
grep -E "passed|ERROR SUMMARY" $OUT/sanitizer.log | tail -3; grep -m3 "Invalid\|FAIL" $OUT/sanitizer.log
echo "== cudnn (start ${SECONDS}s)"
timeout 60 python3 tests/gpu/bench_quant_cudnn.py 2>&1 | tee $OUT/cudnn.log | tail -26
echo "== end ${SECONDS}s"

#!/usr/bin/env bash
# The one H200 call of branch quant5 (issue 28 point 4). devbin.tar.xz (built off the machine, nvcc 13.0,
# sm_90, cmake -DPVT_WITH_CUDA=ON): test_kv_quant_cuda (commit c8bb329: 32 keys a warp at GQA B = 1 below
# 8k keys; 32-key blocks: 3 stages, ~208-230 registers, 2 blocks an SM), _k32lb3 (the same, its 32-key
# blocks with __launch_bounds__(128, 3) and 2 stages: <= 168 registers, no spills, 3 blocks an SM),
# _broken_k32 (P V's second k16 step reading the first step's V rows: only 32-key warps change),
# _main (main 1c63ed9's harness and kernels), libcudart.so.13.
cd "$(dirname "$0")/../../.."
exec > >(tee $OUT/run.log) 2>&1
mkdir -p /tmp/q5 && tar -xJf runs/2026-12-02d/quant5/devbin.tar.xz -C /tmp/q5
export LD_LIBRARY_PATH=/tmp/q5/devbin:${LD_LIBRARY_PATH:-}
X=/tmp/q5/devbin; B=$X/test_kv_quant_cuda; L=$X/test_kv_quant_cuda_k32lb3; M=$X/test_kv_quant_cuda_main
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
ldd $B | grep "not found" && echo "MISSING LIBRARIES"
echo "== checks (start ${SECONDS}s)"
timeout 70 $B --no-bench > $OUT/checks.log 2>&1; echo "rc=$?"; grep FAIL $OUT/checks.log | head -5; tail -1 $OUT/checks.log
echo "== checks k32lb3 tc (start ${SECONDS}s)"
timeout 40 $L --tc-only > $OUT/checks_k32lb3.log 2>&1; echo "rc=$?"; grep FAIL $OUT/checks_k32lb3.log | head -3; tail -1 $OUT/checks_k32lb3.log
echo "== broken k32 (start ${SECONDS}s)"
timeout 40 $X/test_kv_quant_cuda_broken_k32 --tc-only > $OUT/broken_k32.log 2>&1; echo "rc=$?"
echo "failures: $(grep -c FAIL $OUT/broken_k32.log) (.k32: $(grep FAIL $OUT/broken_k32.log | grep -c '\.k32'))"; grep FAIL $OUT/broken_k32.log | head -3; tail -1 $OUT/broken_k32.log
for run in "A1 $B" "L1 $L" "M1 $M" "K16a $B --warp-keys 16" "K32a $B --warp-keys 32" "LK32a $L --warp-keys 32" \
           "A2 $B" "L2 $L" "M2 $M" "K16b $B --warp-keys 16" "K32b $B --warp-keys 32" "LK32b $L --warp-keys 32"; do
  set -- $run; tag=$1; bin=$2; shift 2
  echo "== bench $tag (start ${SECONDS}s)"; timeout 30 $bin --bench-only "$@" 2>&1 | grep -E "BENCH|FAIL" | sed "s/^/$tag /" >> $OUT/bench.log
done
echo "== cudnn (start ${SECONDS}s)"
timeout 45 python3 tests/gpu/bench_quant_cudnn.py > $OUT/cudnn.log 2>&1; echo "rc=$?"
echo "== sanitizer (start ${SECONDS}s)"
timeout 40 compute-sanitizer --tool memcheck $B --tc-only > /tmp/san.log 2>&1; echo "rc=$?"
grep -E "passed|ERROR SUMMARY" /tmp/san.log | tail -2; grep -m3 "Invalid\|FAIL" /tmp/san.log; tail -3 /tmp/san.log > $OUT/sanitizer_tail.log
for s in "L $L" "B $B"; do
  set -- $s; left=$((175 - SECONDS)); echo "== sweep k32 $1 (start ${SECONDS}s, ${left}s left)"
  [ $left -gt 20 ] && { timeout $left $2 --sweep --warp-keys 32 > $OUT/sweep_k32_$1.log 2>&1; echo "rc=$?"; }
done
left=$((190 - SECONDS)); echo "== ncu k32lb3 (start ${SECONDS}s, ${left}s left)"
if [ $left -gt 15 ]; then
  timeout $left ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats -k regex:"mma_split_kernel" -o /tmp/prof $L --profile --warp-keys 32 > /tmp/ncu.log 2>&1
  echo "rc=$?"; ncu --import /tmp/prof.ncu-rep --page details > $OUT/ncu_k32lb3.txt 2>&1
  grep -E "mma_split_kernel|^ +Duration|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|Registers Per|Executed Instructions  " $OUT/ncu_k32lb3.txt | head -30
fi
echo "== table (start ${SECONDS}s)"
grep -E "BENCH (llama|copy)" $OUT/bench.log
grep CUDNN $OUT/cudnn.log
grep -hE "B1 " $OUT/sweep_k32_*.log
echo "== end ${SECONDS}s"

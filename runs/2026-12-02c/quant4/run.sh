#!/usr/bin/env bash
# H200 call of issue 28 point 4 (branch quant4): native binaries built off the machine (nvcc 13.0, sm_90)
# and carried in devbin/: test_kv_quant_cuda (this branch), _base (main a3b70a6's 8-bit kernels, the same
# harness), _broken_v / _broken_k (int8's bias fold broken on purpose: V's column of -1024 instead of
# -1152; K's accumulators not started at -1152 sum(q)), _mb4 (PVT_QUANT_MB4: Q in shared memory, 4 blocks an SM).
# Checks, broken checks, benches (auto, forced 4 and 8 warps, mb4, baseline), split sweeps at 4 and 8 warps, cuDNN, memcheck, Nsight Compute, the Llama loop.
cd "$(dirname "$0")/../../.."
exec > >(tee $OUT/run.log) 2>&1
export LD_LIBRARY_PATH=$PWD/devbin:${LD_LIBRARY_PATH:-}
B=devbin/test_kv_quant_cuda
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
ldd $B | grep "not found" && echo "MISSING LIBRARIES"
echo "== checks (start ${SECONDS}s)"
timeout 90 $B --no-bench > $OUT/checks.log 2>&1; echo "rc=$?"; grep FAIL $OUT/checks.log | head -5; tail -1 $OUT/checks.log
for v in v k; do
  echo "== broken $v (start ${SECONDS}s)"
  timeout 60 devbin/test_kv_quant_cuda_broken_$v --tc-only > /tmp/broken_$v.log 2>&1; echo "rc=$?"
  echo "failures: $(grep -c FAIL /tmp/broken_$v.log)"; grep FAIL /tmp/broken_$v.log | head -2; tail -1 /tmp/broken_$v.log
  { echo "== broken $v"; grep -E "FAIL|passed" /tmp/broken_$v.log; } >> $OUT/variants.log
done
echo "== checks mb4 (start ${SECONDS}s)"
timeout 60 devbin/test_kv_quant_cuda_mb4 --tc-only > /tmp/mb4.log 2>&1; echo "rc=$?"; grep FAIL /tmp/mb4.log | head -3; tail -1 /tmp/mb4.log
{ echo "== checks mb4"; cat /tmp/mb4.log; } >> $OUT/variants.log
for run in "auto1 $B" "w4 $B --warps 4" "w8 $B --warps 8" "mb4 devbin/test_kv_quant_cuda_mb4" "auto2 $B"; do
  set -- $run; tag=$1; bin=$2; shift 2
  echo "== bench $tag (start ${SECONDS}s)"; timeout 60 $bin --bench-only "$@" 2>&1 | grep -E "BENCH|FAIL" | sed "s/^/$tag /" >> $OUT/bench.log
done
echo "== bench base (start ${SECONDS}s)"; timeout 60 devbin/test_kv_quant_cuda_base --bench-only 2>&1 | grep -E "BENCH|FAIL" | sed "s/^/base /" >> $OUT/bench.log
echo "== cudnn (start ${SECONDS}s)"
timeout 60 python3 tests/gpu/bench_quant_cudnn.py > $OUT/cudnn.log 2>&1; echo "rc=$?"
for w in 4 8; do
  echo "== sweep w$w (start ${SECONDS}s)"; timeout 60 $B --sweep --warps $w 2>&1 | sed "s/^/w$w /" >> $OUT/sweep.log; echo "rc=$?"
done
echo "== sanitizer (start ${SECONDS}s)"
timeout 60 compute-sanitizer --tool memcheck $B --tc-only > /tmp/san.log 2>&1; echo "rc=$?"
grep -E "passed|ERROR SUMMARY" /tmp/san.log | tail -2; grep -m3 "Invalid\|FAIL" /tmp/san.log
echo "== ncu (start ${SECONDS}s)"
timeout 40 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis -k regex:"mma_split_kernel" -o /tmp/prof $B --profile > /tmp/ncu.log 2>&1
echo "rc=$?"; tail -2 /tmp/ncu.log
ncu --import /tmp/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
grep -E "mma_split_kernel|^ +Duration|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|Registers Per|Block Limit Reg|No Eligible|Executed Instructions  " $OUT/ncu_details.txt | head -60
echo "== table (start ${SECONDS}s)"
grep -E "^(auto1|auto2|w4|w8|mb4|base) BENCH (llama|copy)" $OUT/bench.log
grep CUDNN $OUT/cudnn.log
grep -E "B1 " $OUT/sweep.log
left=$((250 - SECONDS)); echo "== llama loop fp8 (start ${SECONDS}s, ${left}s left)"
if [ $left -gt 60 ]; then
  MAX_JOBS=16 timeout $left python3 tests/gpu/llama_loop.py /tmp/llama_fp8.json --kv-heads 8 --quick --only 8,4096 --cache-dtype float8_e4m3fn > /tmp/llama.log 2>&1; echo "rc=$?"
  { cat /tmp/llama.log; echo "== json"; cat /tmp/llama_fp8.json; } > $OUT/llama.log 2>&1; grep -v "^\[" /tmp/llama.log | tail -25
fi
echo "== end ${SECONDS}s"

#!/usr/bin/env bash
# H200 call 1 of issue 28 point 4 (branch quant3): checks, the deliberately broken merge, the split-count
# sweep, two kernel variants at the planner's count, our bench, Nsight Compute on GQA B=32 S=32k and B=1 S=4k.
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/devbin:${LD_LIBRARY_PATH:-}
B=devbin/test_kv_quant_cuda
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ldd $B | grep "not found" && echo "MISSING LIBRARIES"
echo "== checks (start ${SECONDS}s)"
timeout 60 $B --no-bench > $OUT/checks.log 2>&1; echo "rc=$?"; grep -E "FAIL|passed" $OUT/checks.log | head -8
echo "== broken on purpose (start ${SECONDS}s)"
timeout 60 devbin/test_kv_quant_cuda_broken --no-bench > $OUT/broken.log 2>&1; echo "rc=$?"
grep -c FAIL $OUT/broken.log; grep FAIL $OUT/broken.log | head -3; tail -1 $OUT/broken.log
echo "== sweep (start ${SECONDS}s)"
timeout 60 $B --sweep 2>&1 | tee $OUT/sweep.log
for v in st4 shift; do echo "== auto $v (start ${SECONDS}s)"; timeout 30 devbin/test_kv_quant_cuda_$v --sweep --auto; done
echo "== bench (start ${SECONDS}s)"
timeout 100 $B --bench-only 2>&1 | tee $OUT/bench.log | grep -E "BENCH|FAIL"
echo "== ncu (start ${SECONDS}s)"
timeout 150 ncu --clock-control none --set full -k regex:"mma_split_kernel|merge_kernel" -o $OUT/prof $B --profile > $OUT/ncu.log 2>&1
echo "rc=$?"; tail -3 $OUT/ncu.log
ncu --import $OUT/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu --import $OUT/prof.ncu-rep --page raw --csv > $OUT/ncu_raw.csv 2>&1
grep -E "mma_split|merge_kernel|^ +Duration|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|Waves Per SM|No Eligible" $OUT/ncu_details.txt | head -80
echo "== end ${SECONDS}s"

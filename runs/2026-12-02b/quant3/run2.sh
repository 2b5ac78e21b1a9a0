#!/usr/bin/env bash
# H200 call 2 of issue 28 point 4 (branch quant3): the kernel variants from objects built
# off the machine and linked on it (st4: 4 stages at head_dim 128; shift: fp8 -> half by shifts, FlashInfer's pre-sm_90 way;
# st4shift: both; mb4: 4 blocks an SM, 128 registers; mb4shift), checks of each, the deliberately broken merge, each variant's bench, cuDNN, the
# split-count sweep, Nsight Compute on v0 and st4shift, compute-sanitizer on v0.
cd "$(dirname "$0")/../../.."
exec > >(tee $OUT/run.log) 2>&1
export LD_LIBRARY_PATH=$PWD/devbin:${LD_LIBRARY_PATH:-}
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
O=devbin/obj
cp devbin/test_kv_quant_cuda /tmp/b_v0
for v in st4 shift st4shift mb4 mb4shift; do
  c++ -O3 $O/test_kv_quant.cu.o $O/mma_$v.o $O/attn_v0.o $O/libpvt_core_base.a devbin/libcudart.so.13 -o /tmp/b_$v || echo "LINK FAIL $v"
done
for v in v0 st4 shift st4shift mb4 mb4shift; do
  echo "== checks $v (start ${SECONDS}s)"; timeout 60 /tmp/b_$v --no-bench > /tmp/checks_$v.log 2>&1; echo "rc=$?"
  { echo "== $v"; cat /tmp/checks_$v.log; } >> $OUT/checks.log
  grep FAIL /tmp/checks_$v.log | head -3; tail -1 /tmp/checks_$v.log
done
echo "== broken on purpose (start ${SECONDS}s)"
timeout 60 devbin/test_kv_quant_cuda_broken --no-bench > /tmp/broken.log 2>&1; echo "rc=$?"
echo "failures: $(grep -c FAIL /tmp/broken.log)"; grep FAIL /tmp/broken.log | head -2; tail -1 /tmp/broken.log
for v in v0 st4 shift st4shift mb4 mb4shift; do
  echo "== bench $v (start ${SECONDS}s)"; timeout 100 /tmp/b_$v --bench-only 2>&1 | grep -E "BENCH|FAIL" | sed "s/^/$v /" >> $OUT/bench_all.log
done
echo "== cudnn (start ${SECONDS}s)"
timeout 90 python3 tests/gpu/bench_quant_cudnn.py > $OUT/cudnn.log 2>&1; echo "rc=$?"
echo "== sweep v0 (start ${SECONDS}s)"
timeout 120 /tmp/b_v0 --sweep > $OUT/sweep.log 2>&1; echo "rc=$?"; grep -c SWEEP $OUT/sweep.log; grep -m3 FAIL $OUT/sweep.log
for v in v0 st4shift; do
  echo "== ncu $v (start ${SECONDS}s)"
  timeout 80 ncu --clock-control none --set full -k regex:"mma_split_kernel|merge_kernel" -o /tmp/prof_$v /tmp/b_$v --profile > /tmp/ncu_$v.log 2>&1
  echo "rc=$?"; tail -2 /tmp/ncu_$v.log
  ncu --import /tmp/prof_$v.ncu-rep --page details > $OUT/ncu_details_$v.txt 2>&1
  ncu --import /tmp/prof_$v.ncu-rep --page raw --csv > /tmp/raw_$v.csv 2>&1
  grep -E "  [a-z_]+kernel|^ +Duration|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Registers Per" $OUT/ncu_details_$v.txt | head -60
done
gzip -c /tmp/raw_v0.csv > $OUT/ncu_raw_v0.csv.gz
for v in v0; do
  echo "== sanitizer $v (start ${SECONDS}s)"
  timeout 75 compute-sanitizer --tool memcheck /tmp/b_$v --tc-only > /tmp/san_$v.log 2>&1; echo "rc=$?"
  grep -E "passed|ERROR SUMMARY" /tmp/san_$v.log | tail -2; grep -m3 "Invalid\|FAIL" /tmp/san_$v.log
done
grep -E "B(ENCH)? (llama3-8b-gqa|llama2-7b-mha) " $OUT/bench_all.log | awk '{print $1, $3, $4, $5, $6, $7, $8}' | head -100
tail -26 $OUT/cudnn.log
echo "== end ${SECONDS}s"

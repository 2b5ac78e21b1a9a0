#!/usr/bin/env bash
# Device call 4: Nsight Compute of the 8-bit keys kernel and merge, fp8 against int8, GQA B = 1 S = 4k and B = 32 32k
# (test_kv_quant_cuda --profile; main's kernels = build/carry/q33 s3): where int8's ~1.2 us a call goes at B = 1.
set -u
P=build/carry/q33
tar -xJf $P/bins.tar.xz -C $P test_kv_quant_cuda_s3
O=${OUT:-/tmp/out}/ncu; mkdir -p "$O"
SECT="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
timeout 300 ncu --clock-control none --kernel-name regex:"mma_keys|merge" --launch-count 12 $SECT -o "$O/q" $P/test_kv_quant_cuda_s3 --profile > "$O/run.log" 2>&1 < /dev/null
ncu -i "$O/q.ncu-rep" --page details > "$O/q.txt" 2>&1
M=gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active
ncu -i "$O/q.ncu-rep" --page raw --csv --metrics $M > "$O/q.csv" 2>&1
tail -5 "$O/run.log"; cat "$O/q.csv" | cut -c1-400
grep -E "^  [a-z_:<>, 0-9A-Z]+\(|Duration|Warp Cycles Per Issued|Issue Slots Busy|Stall|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size" "$O/q.txt" | head -150
tar czf "$O.tgz" -C "$(dirname "$O")" ncu && rm -r "$O"

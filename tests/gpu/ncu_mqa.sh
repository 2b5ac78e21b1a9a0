#!/bin/bash
# Nsight Compute of ours against flash-attention 2 (PyTorch's SDPA flash, seqlenq_ngroups_swapped) on the long
# MQA rows: each kernel's time, occupancy, issue rate and stalls (sections) and its executed SASS opcode mix, in
# $OUT/ncu.tgz. Ours from build/spec_capi (CAPI=1, built by spec_capi_build.sh) or the torch extension (built here).
# PROFILES: other calls, one a line, "NAME profile_call.py-args..." (default: the three long MQA rows below);
# SDPA: the backend profiled beside ours (default flash). SOURCE=1: also each kernel's SASS with the times each
# instruction ran (SourceCounters; $name.sass.csv): where a kernel's instructions go, line by line.
# Usage: [CAPI=1] [SDPA=cudnn] [SOURCE=1] [PROFILES=$'name HQ HKV D B S [opts]\n...'] bash tests/gpu/ncu_mqa.sh
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}/ncu; mkdir -p "$O"
t0=$SECONDS
if [ -z "${CAPI:-}" ]; then
  python3 tests/gpu/build.py > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 1; }
  echo "build $((SECONDS - t0)) s"
fi
SECT="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats --section SchedulerStats"
M=gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sass__inst_executed_per_opcode
prof() {  # name, profile_call.py args...
  local name=$1; shift
  timeout 200 ncu --clock-control none --kernel-name regex:"decode_attention|flash_fwd|merge|cudnn|sdpa|fmha" --launch-count 4 $SECT \
    ${SOURCE:+--section SourceCounters} \
    --metrics sass__inst_executed_per_opcode -o "$O/$name" \
    python3 tests/gpu/profile_call.py "$@" --calls 1 --sdpa "${SDPA:-flash}" ${CAPI:+--capi} > "$O/$name.run.log" 2>&1 < /dev/null
  ncu -i "$O/$name.ncu-rep" --page details > "$O/$name.txt" 2>&1
  ncu -i "$O/$name.ncu-rep" --page raw --csv --print-metric-instances details --metrics $M > "$O/$name.csv" 2>&1
  [ -n "${SOURCE:-}" ] && ncu -i "$O/$name.ncu-rep" --page source --csv --print-source sass > "$O/$name.sass.csv" 2>&1
  grep -h "plan" "$O/$name.run.log"
  echo "== $name $((SECONDS - t0)) s"
}
PROFILES=${PROFILES:-"starcoder_b64 48 1 128 64 32768
falcon_b64 71 1 64 64 32768
falcon_b64_rw4 71 1 64 64 32768 --row-warps 4"}
while read -r line; do
  [ -n "$line" ] && prof $line
done <<< "$PROFILES"
rm -f "$O"/*.ncu-rep
tar czf "${OUT:-/tmp/out}/ncu.tgz" -C "${OUT:-/tmp/out}" ncu && rm -r "$O"
echo "total $((SECONDS - t0)) s"

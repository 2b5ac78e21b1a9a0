#!/usr/bin/env bash
# Issue 30 points 2, 4 and 5 alone on the H200 (about 90 s): the background mapper, unmapped reads
# as zeros (test_zero_reads_cuda, also under compute-sanitizer memcheck) and the inflight-step
# benchmark with and without the zero cover. From the repository root: bash tests/gpu/run_map_ahead.sh
# (logs under $OUT). run_native.sh runs the same among every native CUDA test.
set -uo pipefail
O=${OUT:-/tmp/out}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } > "$O/machine.txt"
cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja > "$O/build.log" 2>&1 &&
  cmake --build /tmp/nb -j16 --target test_background_mapper test_zero_cover test_zero_reads_cuda bench_inflight_step >> "$O/build.log" 2>&1
echo "build rc=$? at ${SECONDS}s"
for t in test_background_mapper test_zero_cover test_zero_reads_cuda; do
  echo "== $t (start ${SECONDS}s)"; timeout 120 /tmp/nb/$t > /tmp/t.log 2>&1; rc=$?
  grep -E "^(info|FAIL)" /tmp/t.log | head -40; tail -1 /tmp/t.log; echo "rc=$rc"
done
for a in "" --no-cover; do echo "== bench_inflight_step $a (start ${SECONDS}s)"; timeout 150 /tmp/nb/bench_inflight_step $a; done
echo "== sanitizer test_zero_reads_cuda (start ${SECONDS}s)"
timeout 120 compute-sanitizer --tool memcheck /tmp/nb/test_zero_reads_cuda --no-fork --no-bench 2>&1 | tail -3
echo "total ${SECONDS}s"

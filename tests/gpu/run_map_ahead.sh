#!/usr/bin/env bash
# Issue 30 points 2 and 5 alone on the H200 (about 100 s after the build): the background mapper's
# native tests (batches, prefetches, SCHED_BATCH), the queue call's cost with the mapper as
# SCHED_BATCH against SCHED_OTHER (bench_queue_call, host only), then the inflight-step benchmark
# without the zero cover (the library's default): 64 and 256 slots, (a)/(b)/(c)/(s), before and
# both designs after, and time to first token. From the repository root:
# bash tests/gpu/run_map_ahead.sh [--cover] (logs under $OUT). run_native.sh runs every native CUDA
# test, test_zero_reads_cuda and the benchmark with the cover among them.
set -uo pipefail
O=${OUT:-/tmp/out}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; uname -r; nproc; } > "$O/machine.txt"
cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja > "$O/build.log" 2>&1 &&
  cmake --build /tmp/nb -j16 --target test_background_mapper test_map_prefetch bench_queue_call bench_inflight_step >> "$O/build.log" 2>&1
echo "build rc=$? at ${SECONDS}s"
for t in test_background_mapper test_map_prefetch; do
  echo "== $t (start ${SECONDS}s)"; timeout 60 /tmp/nb/$t > /tmp/t.log 2>&1; rc=$?
  grep -E "^FAIL" /tmp/t.log | head -20; tail -1 /tmp/t.log; echo "rc=$rc"
done
echo "== bench_queue_call 64 and 256 slots (start ${SECONDS}s)"
timeout 30 /tmp/nb/bench_queue_call 64 100 35 8
timeout 30 /tmp/nb/bench_queue_call 256 60 35 16 | tail -2
echo "== bench_inflight_step ${1:-} (start ${SECONDS}s)"
timeout 150 /tmp/nb/bench_inflight_step "$@"
echo "total ${SECONDS}s"

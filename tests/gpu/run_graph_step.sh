#!/usr/bin/env bash
# Issue 30 point 5 on the H200 (PERFORMANCE_H200.md 6d, about 130 s after the build): the step as
# one graph launch on a watched cache. test_deferred_release_cuda (its graph part: a release after a
# graph launch waits for the graph's work), the same with --no-event-node (the break: must fail),
# then bench_inflight_step --focus ((a) and (c) at 64 and 256 slots: the queued chunk-ahead prefetch
# against watched + graph, 100 crossing steps), --focus --pin --slots 64 (threads pinned), then
# bench_graph_launch (cudaGraphLaunch alone: idle, short steps, pipelined; sync modes; pinned).
# From the repository root: bash tests/gpu/run_graph_step.sh [prebuilt-dir] (logs under $OUT).
# prebuilt-dir: binaries built elsewhere (nvcc -arch=sm_90, cudart static) instead of the cmake build.
set -uo pipefail
O=${OUT:-/tmp/out}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uname -r; nproc; } > "$O/machine.txt"
B=${1:-}
# A prebuilt bench refuses an unknown argument with exit 2 before touching the GPU: else it cannot load.
probe=1; [ -n "$B" ] && { "$B/bench_inflight_step" --probe > /dev/null 2>&1; probe=$?; }
if [ "$probe" != 2 ]; then
  B=/tmp/nb
  cmake -S tests/native -B $B -DPVT_WITH_CUDA=ON -G Ninja > "$O/build.log" 2>&1 &&
    cmake --build $B -j16 --target test_deferred_release_cuda bench_inflight_step bench_graph_launch >> "$O/build.log" 2>&1
  echo "build rc=$? at ${SECONDS}s"
  ln -sf $B/test_deferred_release_cuda $B/test_deferred_release
fi
echo "binaries: $B"
for t in "test_deferred_release" "test_deferred_release --no-event-node"; do
  echo "== $t (start ${SECONDS}s)"; timeout 30 $B/$t > /tmp/t.log 2>&1; rc=$?
  grep -E "^FAIL|^info" /tmp/t.log | head -12; tail -1 /tmp/t.log; echo "rc=$rc"
done
echo "== bench_inflight_step --focus (start ${SECONDS}s)"
timeout 150 $B/bench_inflight_step --focus
echo "== bench_inflight_step --focus --pin --slots 64 (start ${SECONDS}s)"
timeout 45 $B/bench_inflight_step --focus --pin --slots 64
for a in "" --blocking-sync --pin; do
  echo "== bench_graph_launch $a (start ${SECONDS}s)"; timeout 30 $B/bench_graph_launch $a
done
echo "total ${SECONDS}s"

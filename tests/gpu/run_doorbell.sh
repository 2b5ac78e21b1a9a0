#!/usr/bin/env bash
# Issue 30 point 5 on the H200 (PERFORMANCE_H200.md 6e): the step released by a store
# (StepDoorbell, kernels/step_doorbell_cuda.h). test_step_doorbell_cuda (gating, stop, a slot
# cache fenced by the doorbell's counters), the same with --no-counters (the break: must fail), its
# memcheck, test_deferred_release_cuda (its observer changed), then bench_inflight_step --focus
# ((a) and (c) at 64 and 256 slots: one graph launch against the doorbell), pinned and not.
# From the repository root: bash tests/gpu/run_doorbell.sh [prebuilt-dir] (logs under $OUT).
# prebuilt-dir: the three binaries built elsewhere (tests/gpu/prebuild_doorbell.sh) instead of cmake.
set -uo pipefail
O=${OUT:-/tmp/out}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uname -r; nproc; } > "$O/machine.txt"
B=${1:-}
if [ -z "$B" ]; then
  B=/tmp/nb
  cmake -S tests/native -B $B -DPVT_WITH_CUDA=ON -G Ninja > "$O/build.log" 2>&1 &&
    cmake --build $B -j16 --target test_step_doorbell_cuda test_deferred_release_cuda bench_inflight_step >> "$O/build.log" 2>&1
  echo "build rc=$? at ${SECONDS}s"
  ln -sf $B/test_step_doorbell_cuda $B/test_step_doorbell
  ln -sf $B/test_deferred_release_cuda $B/test_deferred_release
fi
echo "binaries: $B"
for t in "test_step_doorbell" "test_step_doorbell --no-counters" "test_deferred_release"; do
  log="$O/$(echo "$t" | tr -c 'a-z_\n' '_').log"
  echo "== $t (start ${SECONDS}s)"; timeout 60 $B/$t > "$log" 2>&1; rc=$?
  grep -E "^FAIL|^info" "$log" | head -20; tail -1 "$log"; echo "rc=$rc"
done
echo "== memcheck test_step_doorbell (start ${SECONDS}s)"
timeout 90 compute-sanitizer --tool memcheck --print-limit 20 $B/test_step_doorbell > "$O/memcheck.log" 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|^FAIL" "$O/memcheck.log" | head; tail -1 "$O/memcheck.log"
echo "== bench_inflight_step --focus --pin (start ${SECONDS}s)"
timeout 150 $B/bench_inflight_step --focus --pin
echo "== bench_inflight_step --focus (start ${SECONDS}s)"
timeout 150 $B/bench_inflight_step --focus
echo "total ${SECONDS}s"

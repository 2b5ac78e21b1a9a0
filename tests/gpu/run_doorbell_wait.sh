#!/usr/bin/env bash
# Issue 30 point 5 (PERFORMANCE_H200.md 6e): the doorbell's rows alone, the step thread waiting in a
# pause loop (the library's wait_done) against plain loads (--plain-wait), pinned and not, one
# process each, alternating. From the repository root: bash tests/gpu/run_doorbell_wait.sh PREBUILT
B=${1:?prebuilt dir (tests/gpu/prebuild_doorbell.sh)}
date -u
for args in "--pin" "--pin --plain-wait" "" "--plain-wait"; do
  echo "== bench_inflight_step --focus --doorbell-only $args (start ${SECONDS}s)"
  timeout 75 "$B/bench_inflight_step" --focus --doorbell-only $args | grep -E "^\||zero cover"
done
echo "total ${SECONDS}s"

#!/usr/bin/env bash
# One H200 call after merging branches: build the native harness there, then every suite the merged
# branches touched, each cut by a time limit (a cut run's counts are of the checks it reached).
# From the repository root: bash tests/gpu/run_merged_check.sh (logs under $OUT).
set -uo pipefail
O=${OUT:-/tmp/out}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null; } > "$O/machine.txt"
B=/tmp/nb
cmake -S tests/native -B $B -DPVT_WITH_CUDA=ON -G Ninja > "$O/build.log" 2>&1 &&
  cmake --build $B -j16 --target test_decode_plan test_decode_attention test_kv_quant_cuda \
    test_step_doorbell_cuda test_deferred_release_cuda >> "$O/build.log" 2>&1
echo "build rc=$? at ${SECONDS}s"
run() {  # name, limit (s), command...
  local name=$1 limit=$2; shift 2
  echo "== $name (start ${SECONDS}s, limit ${limit}s)"
  timeout "$limit" "$@" > "$O/$name.log" 2>&1; local rc=$?
  grep -E "^FAIL" "$O/$name.log" | head -8
  echo "passed $(grep -c '^PASS' "$O/$name.log"), failed $(grep -c '^FAIL' "$O/$name.log"); $(tail -1 "$O/$name.log" | cut -c1-120); rc=$rc"
}
run decode_plan 60 $B/test_decode_plan
run step_doorbell 60 $B/test_step_doorbell_cuda
run deferred_release 60 $B/test_deferred_release_cuda
run kv_quant 70 $B/test_kv_quant_cuda --no-bench
run balanced 60 $B/test_decode_attention --balanced-only
run families 50 $B/test_decode_attention --families-only
echo "total ${SECONDS}s"

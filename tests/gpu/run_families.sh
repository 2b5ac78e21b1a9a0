#!/usr/bin/env bash
# Issue 32 on the H200 in one go: the native tests of the decode attention (binaries built beforehand with
# nvcc for sm_90 into PREBUILT: test_decode_plan, test_decode_attention, test_slot_cache_cuda, and the copy
# with the tensor-core families broken on purpose, test_decode_attention_broken from
# tests/gpu/break_mma_families.sh), memcheck of the family cases, while the torch extension builds; then
# the family table (tests/gpu/bench_families.py). Logs and JSON under $OUT.
# Usage (repository root): bash tests/gpu/run_families.sh PREBUILT [bench_families.py args...]
set -uo pipefail
O=${OUT:-/tmp/out}
P=$1; shift
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
# Binaries that do not start here (a library missing): build the three tests here instead.
if ! "$P"/test_decode_plan > /dev/null 2>&1; then
  echo "prebuilt binaries do not run here: building them" > "$O/native_build.log"
  cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja >> "$O/native_build.log" 2>&1 &&
    cmake --build /tmp/nb -j16 --target test_decode_plan test_decode_attention test_slot_cache_cuda >> "$O/native_build.log" 2>&1
  mkdir -p /tmp/nbp && cp /tmp/nb/test_decode_plan /tmp/nb/test_decode_attention /tmp/nb/test_slot_cache_cuda /tmp/nbp/ &&
    cp "$P"/test_decode_attention_broken /tmp/nbp/ 2>/dev/null
  P=/tmp/nbp
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } > "$O/machine.txt"
(MAX_JOBS=14 python3 tests/gpu/build.py > "$O/ext_build.log" 2>&1; echo "ext build rc=$? at ${SECONDS}s" >> "$O/ext_build.log") &
{
  for t in "test_decode_plan" "test_decode_attention --no-bench" "test_slot_cache_cuda --no-bench"; do
    echo "== $t (start ${SECONDS}s)"; timeout 240 "$P"/$t > "$O/t.log" 2>&1; echo "rc=$?"
    grep -E "^FAIL" "$O/t.log" | head -20; tail -1 "$O/t.log"
  done
  echo "== memcheck test_decode_attention --families-only (start ${SECONDS}s)"
  timeout 120 compute-sanitizer --tool memcheck "$P"/test_decode_attention --families-only 2>&1 | tail -3
  echo "== broken on purpose: test_decode_attention_broken --families-only (start ${SECONDS}s)"
  timeout 120 "$P"/test_decode_attention_broken --families-only > "$O/t.log" 2>&1; echo "rc=$?"
  grep -E "^PASS" "$O/t.log" | sed 's/:.*//' | head -40; grep -cE "^FAIL" "$O/t.log" | sed 's/^/failures: /'; tail -1 "$O/t.log"
  echo "native done at ${SECONDS}s"
} > "$O/native.log" 2>&1
rm -f "$O/t.log"
wait
tail -1 "$O/ext_build.log"
PYTHONUNBUFFERED=1 python3 tests/gpu/bench_families.py "$O/families.json" "$@" > "$O/families.log" 2>&1
echo "bench rc=$? at ${SECONDS}s"
cat "$O/native.log"

#!/usr/bin/env bash
# Lead's merged-tree check on the H200 (not committed): native tests of the merged decode kernels, the
# 8-bit kernels, invariance and the graph release; then bench_mixed (balanced splits, default rule).
set -uo pipefail
O=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null; } > "$O/machine.txt"
(MAX_JOBS=8 python3 tests/gpu/build.py > "$O/ext_build.log" 2>&1; echo "ext build rc=$? at ${SECONDS}s" >> "$O/ext_build.log") &
ext=$!
cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja > "$O/build.log" 2>&1 &&
  timeout 200 cmake --build /tmp/nb -j8 --target test_decode_plan test_decode_attention test_kv_quant_cuda test_decode_invariance test_deferred_release_cuda >> "$O/build.log" 2>&1
echo "native build rc=$? at ${SECONDS}s"
s() { grep -E "^FAIL" "$1" | head -15; tail -1 "$1"; }
run() { local name=$1; shift; echo "== $name (start ${SECONDS}s)"; timeout "$@" > "$O/$name.log" 2>&1; echo "rc=$?"; s "$O/$name.log"; }
run plan 30 /tmp/nb/test_decode_plan
run families 90 /tmp/nb/test_decode_attention --families-only
run balanced 60 /tmp/nb/test_decode_attention --balanced-only
run invariance 60 /tmp/nb/test_decode_invariance
run kv_quant 60 /tmp/nb/test_kv_quant_cuda --no-bench
run deferred 30 /tmp/nb/test_deferred_release_cuda
run full_cut 30 /tmp/nb/test_decode_attention --no-bench
wait $ext; tail -2 "$O/ext_build.log"
echo "== bench_mixed (start ${SECONDS}s)"
timeout 150 python3 tests/gpu/bench_mixed.py "$O/mixed.json" --split-keys 2048 --uniform 4096,16384 --uniform-batches 8,16,32 > "$O/mixed.log" 2>&1
echo "rc=$?"; tail -3 "$O/mixed.log"
echo "total ${SECONDS}s"

#!/usr/bin/env bash
# Every native CUDA test, the inflight-step benchmark, then compute-sanitizer memcheck on the tests of mapped, aliased and shared
# memory. On the H200 from the repository root: bash tests/gpu/run_native.sh (logs under $OUT).
set -uo pipefail
O=${OUT:-/tmp/out}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; git log --oneline -1 2>/dev/null; } > "$O/machine.txt"
cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja > "$O/native_build.log" 2>&1 && cmake --build /tmp/nb -j16 >> "$O/native_build.log" 2>&1
echo "native build rc=$? at ${SECONDS}s" | tee -a "$O/native_build.log"
for t in "test_decode_plan" "test_core" "test_cuda" "test_slot_cache_cuda --no-bench" "test_speculative_accept_cuda" "test_phys_chunks_cuda" "test_slot_share_cuda" "test_chunk_pool" "test_deferred_release_cuda" "test_decode_attention --no-bench" "test_decode_invariance" "test_background_mapper" "test_map_prefetch" "test_zero_cover" "test_zero_reads_cuda" "test_kv_quant_cuda --no-bench"; do
  echo "== $t (start ${SECONDS}s)"; timeout 300 /tmp/nb/$t > /tmp/t.log 2>&1; rc=$?
  grep -E "^(info|FAIL)" /tmp/t.log | head -40; tail -1 /tmp/t.log; echo "rc=$rc"
done > "$O/native_tests.log" 2>&1
# Zero-cover costs and host µs per inflight step (issue 30 points 4 and 5): docs/PERFORMANCE_H200.md.
{ for a in "" --cover; do echo "== bench_inflight_step $a"; timeout 240 /tmp/nb/bench_inflight_step $a; done; } > "$O/inflight_step.log" 2>&1
for t in test_phys_chunks_cuda test_slot_share_cuda test_deferred_release_cuda "test_slot_cache_cuda --no-bench" "test_zero_reads_cuda --no-fork --no-bench"; do
  echo "== sanitizer $t (start ${SECONDS}s)"; timeout 200 compute-sanitizer --tool memcheck --leak-check full /tmp/nb/$t 2>&1 | tail -4
done > "$O/sanitizer.log" 2>&1
cat "$O/native_tests.log" "$O/sanitizer.log" | grep -E "^== |^info|passed|^rc=|ERROR SUMMARY|FAIL" | head -90
cat "$O/inflight_step.log"
echo "total ${SECONDS}s"

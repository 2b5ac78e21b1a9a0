#!/usr/bin/env bash
# The 8-bit kernel with the keys on the MMA's M side (mma_keys_kernel) against the query-heads-on-M kernel,
# on the H200, from binaries built without a GPU (PRE: test_kv_quant_cuda, test_kv_quant_cuda_broken = a copy
# broken on purpose in mma_keys_kernel, test_decode_plan). Usage: bash tests/gpu/run_quant_keys.sh PRE [STEPS]
# STEPS (default "checks bench"): checks = the plan, every case, the broken copy, memcheck of the tensor-core
# cases; bench = the bench with the plan's kernel, then with the keys on M forced; shapes = the keys on M with
# 16 and with 32 keys a warp forced; cudnn = cuDNN on the float16 caches (its own process). Logs: $OUT/logs.tgz.
set -uo pipefail
P=$1
STEPS=${2:-checks bench}
O=${OUT:-/tmp/out}/logs
mkdir -p "$O"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > "$O/machine.txt"
run() {  # name, limit (s), command...
  local name=$1 limit=$2; shift 2
  echo "== $name (start ${SECONDS}s, limit ${limit}s)"
  timeout "$limit" "$@" > "$O/$name.log" 2>&1; local rc=$?
  grep -E "^FAIL" "$O/$name.log" | head -6
  echo "passed $(grep -c '^PASS' "$O/$name.log"), failed $(grep -c '^FAIL' "$O/$name.log"); rc=$rc"
}
for step in $STEPS; do
  case $step in
    checks)
      run decode_plan 20 "$P/test_decode_plan"
      run kv_quant 120 "$P/test_kv_quant_cuda" --no-bench
      run kv_quant_broken 40 "$P/test_kv_quant_cuda_broken" --tc-only
      run memcheck 60 compute-sanitizer --tool memcheck "$P/test_kv_quant_cuda" --tc-only ;;
    bench)
      run bench_rows 100 "$P/test_kv_quant_cuda" --bench-only --keys-on-m -1
      run bench_keys 100 "$P/test_kv_quant_cuda" --bench-only --keys-on-m 1 ;;
    shapes)
      run bench_keys_k16 100 "$P/test_kv_quant_cuda" --bench-only --keys-on-m 1 --warp-keys 16
      run bench_keys_k32 100 "$P/test_kv_quant_cuda" --bench-only --keys-on-m 1 --warp-keys 32 ;;
    cudnn)
      run cudnn 80 python3 tests/gpu/bench_quant_cudnn.py ;;
  esac
done
grep -h "^BENCH\|^CUDNN" "$O"/bench*.log "$O"/cudnn.log 2>/dev/null | cut -c1-200
echo "total ${SECONDS}s"
tar czf "$O.tgz" -C "$(dirname "$O")" logs && rm -r "$O"

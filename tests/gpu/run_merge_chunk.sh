#!/usr/bin/env bash
# The 8-bit merge reading 32 splits a round trip past 16 (merge_chunk_of, decode_attention_plan.h) on the H200,
# from binaries built without a GPU (PRE: test_kv_quant_cuda and test_kv_quant_cuda_broken, a copy whose wide
# chunk drops its last split): the tensor-core checks, the broken copy, and the 8-bit bench at B = 1 with the
# plan's chunk and with 16 forced. (The float16 rows of the run of 2026-12-02 used this script as it was in
# commit d7dc353.) Usage: bash tests/gpu/run_merge_chunk.sh PRE (logs in $OUT/logs.tgz).
set -uo pipefail
P=$1
O=${OUT:-/tmp/out}/logs  # tarred at the end (the number of files a run returns is capped)
mkdir -p "$O"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > "$O/machine.txt"
run() {  # name, limit (s), command...
  local name=$1 limit=$2; shift 2
  echo "== $name (start ${SECONDS}s, limit ${limit}s)"
  timeout "$limit" "$@" > "$O/$name.log" 2>&1; local rc=$?
  grep -E "^FAIL" "$O/$name.log" | head -4
  echo "passed $(grep -c '^PASS' "$O/$name.log"), failed $(grep -c '^FAIL' "$O/$name.log"); rc=$rc"
}
run kv_quant_tc 60 "$P/test_kv_quant_cuda" --tc-only
run kv_quant_broken 40 "$P/test_kv_quant_cuda_broken" --tc-only
run quant_b1 40 "$P/test_kv_quant_cuda" --bench-only --batch 1
run quant_b1_mc16 40 "$P/test_kv_quant_cuda" --bench-only --batch 1 --merge-chunk 16
grep -h "^BENCH" "$O"/quant_b1.log "$O"/quant_b1_mc16.log
echo "total ${SECONDS}s"
tar czf "$O.tgz" -C "$(dirname "$O")" logs && rm -r "$O"

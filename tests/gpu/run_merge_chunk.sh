#!/usr/bin/env bash
# The merge kernels reading 32 splits a round trip past 16 splits (merge_chunk_of, decode_attention_plan.h) on
# the H200, from binaries built without a GPU (PRE: test_decode_plan, test_decode_attention,
# test_kv_quant_cuda, and *_broken copies whose wide chunk drops its last split) and
# build/spec_capi/libpvt_spec.so (tests/gpu/spec_capi_build.sh): the checks, the broken copies, bench_families
# rows of many splits (the plan's chunk against 16 a round trip, _mc16, and the best SDPA backend, one process)
# and the 8-bit bench at B = 1 with the plan's chunk and with 16. Usage: bash tests/gpu/run_merge_chunk.sh PRE
# (logs in $OUT/logs.tgz).
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
run decode_plan 30 "$P/test_decode_plan"
run families 90 "$P/test_decode_attention" --families-only
run kv_quant_tc 60 "$P/test_kv_quant_cuda" --tc-only
run families_broken 60 "$P/test_decode_attention_broken" --families-only
run kv_quant_broken 40 "$P/test_kv_quant_cuda_broken" --tc-only
run bench_families 150 python3 tests/gpu/bench_families.py "$O/families.json" --capi --dtypes fp16 --variants mc16 \
  --only mqa32,qwen2_7b,falcon_7b,starcoder,llama3_8b --bs 1:8192,1:32768,4:8192
run quant_b1 40 "$P/test_kv_quant_cuda" --bench-only --batch 1
run quant_b1_mc16 40 "$P/test_kv_quant_cuda" --bench-only --batch 1 --merge-chunk 16
python3 - "$O/families.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("copy", d["d2d_copy_gbs"], "GB/s")
for r in d["rows"]:
    print(r["family"], r["B"], r["S"], r.get("plan_slot"), "| ours slot", r.get("ours_slot_us"), "mc16",
          r.get("ours_slot_mc16_us"), "seq", r.get("ours_seq_us"), "| best sdpa", r.get("sdpa_best"),
          r.get("sdpa_best_us"), "| slot/best", r.get("slot_vs_best"), "mc16/best", r.get("slot_mc16_vs_best"))
PY
grep -h "^BENCH" "$O"/quant_b1.log "$O"/quant_b1_mc16.log
echo "total ${SECONDS}s"
tar czf "$O.tgz" -C "$(dirname "$O")" logs && rm -r "$O"

#!/usr/bin/env bash
# Issue 32 on the H200 in one go. The native tests of the decode attention come prebuilt (nvcc for sm_90,
# in PREBUILT: test_decode_plan, test_decode_attention, and test_decode_attention_broken, the copy with
# the tensor-core families broken on purpose by tests/gpu/break_mma_families.sh). While the torch
# extension builds: test_decode_plan, the broken copy and memcheck on the family cases (--families-only),
# then test_decode_attention --no-bench (cut at FULL_TEST_S seconds, default 600: its passes run in order,
# the plan's own first). Then the family table (tests/gpu/bench_families.py). Logs and JSON in $OUT.
# PREBUILT comes from tests/gpu/prebuild_families.sh; its source digest is compared with this tree's
# (a mismatch is printed with the files that differ: the tests would check other kernels than the
# extension measures).
# Usage (repository root): [FULL_TEST_S=N] [MEMCHECK_S=N (cut of the memcheck, default 600)] bash tests/gpu/run_families.sh PREBUILT [bench_families.py args...]
set -uo pipefail
O=${OUT:-/tmp/out}
P=$1; shift
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1;
  echo "host compiler of the extension: $(/opt/gcc/bin/gcc --version 2>/dev/null | head -1 || echo '?')"
  echo "sources: tree $(bash tests/gpu/sources_digest.sh), prebuilt $(cat "$P/sources.sha256")"; } > "$O/machine.txt"
cat "$O/machine.txt"
# A mismatch is reported with the files that differ (on the first H200 run the digest differed for a
# tree copied from the one the binaries were built from: the per-file list says which file and why).
if [ "$(bash tests/gpu/sources_digest.sh)" != "$(cat "$P/sources.sha256")" ]; then
  echo "WARNING: prebuilt binaries' source digest differs from this tree's; files that differ:"
  bash tests/gpu/sources_digest.sh --files > "$O/sources.files"
  diff "$P/sources.files" "$O/sources.files" | head -20
fi
(MAX_JOBS=16 python3 tests/gpu/build.py > "$O/ext_build.log" 2>&1; echo "ext build rc=$? at ${SECONDS}s" >> "$O/ext_build.log") &
ext=$!
summary() {  # the log's failures (first 30), its last line
  grep -E "^FAIL" "$1" | head -30; tail -1 "$1"
}
{
  echo "== test_decode_plan"; "$P"/test_decode_plan > "$O/t.log" 2>&1; echo "rc=$?"; summary "$O/t.log"
  echo "== broken on purpose: test_decode_attention_broken --families-only (start ${SECONDS}s)"
  "$P"/test_decode_attention_broken --families-only > "$O/t.log" 2>&1; echo "rc=$?"
  grep -E "^PASS variant.mma|^PASS varlen.family" "$O/t.log" | grep -v "\.plan\|\.reference\|\.alloc\|\.upload\|\.launch\|\.sync" | head
  echo "family cases failing: $(grep -E '^FAIL' "$O/t.log" | grep -vc '\.plan')"; tail -1 "$O/t.log"
  if [ -x "$P"/test_decode_attention_broken_rows ]; then
    echo "== the row-owning kernel alone broken on purpose: test_decode_attention_broken_rows --families-only"
    "$P"/test_decode_attention_broken_rows --families-only > "$O/broken_rows.log" 2>&1; echo "rc=$?"
    echo "cases failing: $(grep -E '^FAIL' "$O/broken_rows.log" | grep -v '\.plan' | sed 's/^FAIL //; s/:.*//' | sort -u | wc -l)"
    grep -E '^FAIL' "$O/broken_rows.log" | grep -v '\.plan' | sed 's/^FAIL //; s/:.*//' | sort -u | head -60
    tail -1 "$O/broken_rows.log"
  fi
  echo "== memcheck test_decode_attention --families-only (start ${SECONDS}s)"
  timeout "${MEMCHECK_S:-600}" compute-sanitizer --tool memcheck "$P"/test_decode_attention --families-only 2>&1 | grep -E "ERROR SUMMARY|passed|^=+ .*(Invalid|Error)" | head -8
  echo "== test_decode_attention --no-bench, cut at ${FULL_TEST_S:-600}s (start ${SECONDS}s)"
  timeout "${FULL_TEST_S:-600}" "$P"/test_decode_attention --no-bench > "$O/full_test.log" 2>&1; echo "rc=$?"
  summary "$O/full_test.log"; echo "passed: $(grep -c '^PASS' "$O/full_test.log"), failed: $(grep -c '^FAIL' "$O/full_test.log")"
  grep -E "^info plan" "$O/full_test.log" | head -3
  wait $ext
} > "$O/native.log" 2>&1
rm -f "$O/t.log"
tail -1 "$O/ext_build.log"
PYTHONUNBUFFERED=1 python3 tests/gpu/bench_families.py "$O/families.json" "$@" > "$O/families.log" 2>&1
echo "bench rc=$? at ${SECONDS}s"
python3 - "$O/families.json" <<'PY'
import collections, json, sys
d = json.load(open(sys.argv[1]))
print("mma_probe (head_dim, warps, tiles: sm80, resident, error, clusters of 2..8 resident):",
      [(x["head_dim"], x["warps"], x["tiles"], x["sm80"], x["resident"], x["query_error"], x.get("max_clusters"))
       for x in d.get("mma_probe", [])])
print("plans:", collections.Counter(r.get("plan_slot", "?").split(" ")[0] + " " + r["family"] for r in d["rows"]))
PY
cat "$O/native.log"

#!/usr/bin/env bash
# Issue 32 point 4 on the H200 in one call, nothing compiled there: the planner's tests, the last-block merge's
# cases (test_decode_attention --last-block-cases) and the other cases with split counters (--last-block-only, cut
# by its limit), bench_mixed.py (skewed and
# equal-length per-slot rows: the rule and the plain plan, each merged in the last block and by the merge kernel,
# in one process), bench_families.py on a few family rows with many splits (ours, last block and merge kernel,
# against SDPA's backends), the copies with the last-block merge broken on purpose (break_last_block.sh: only
# test_last_block's cases), and compute-sanitizer memcheck, racecheck and synccheck on its first pass.
# PREBUILT: the folder of BREAK_WITH=tests/gpu/break_last_block.sh BREAKS="noreset offbyone" bash
# tests/gpu/prebuild_mixed.sh PREBUILT. Each step has its own time limit (run_steps.sh). Outputs go to OUT_DIR.
# Usage (repository root): bash tests/gpu/run_lastmerge.sh PREBUILT OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
pre=$1 out=$2
. tests/gpu/run_steps.sh
step plan 8 "$pre/test_decode_plan"
step last_block 45 "$pre/test_decode_attention" --last-block-cases
step last_block_all 45 "$pre/test_decode_attention" --last-block-only
step mixed 80 python3 tests/gpu/bench_mixed.py "$out/mixed.json" --capi --last-block --uniform 4096,16384 \
  --uniform-batches 16,32,64
step families 45 python3 tests/gpu/bench_families.py "$out/families.json" --capi --dtypes fp16 --variants lb \
  --only llama3_8b,mqa32,qwen2_7b --bs 1:32768,4:8192,1:8192
for m in noreset offbyone; do
  step "broken_$m" 12 "$pre/test_decode_attention_broken_$m" --last-block-cases
  grep '^FAIL' "$out/broken_$m.txt" | cut -c1-140 | head -6
done
if command -v compute-sanitizer > /dev/null; then
  for tool_limit in memcheck:20 racecheck:20 synccheck:12; do
    tool=${tool_limit%:*}
    step "sanitizer_$tool" "${tool_limit#*:}" compute-sanitizer --tool "$tool" "$pre/test_decode_attention" --last-block-quick
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed" "$out/sanitizer_$tool.txt" | head -3
  done
fi
grep -h '^FAIL' "$out/plan.txt" "$out/last_block.txt" "$out/last_block_all.txt" | head -20

#!/usr/bin/env bash
# Issue 32 point 3 on the H200 in one call, nothing compiled there: the planner's tests, the balanced cases
# and every per-slot case balanced (test_decode_attention --balanced-only), bench_mixed.py (skewed rows and
# equal lengths: the default, balanced off, balanced forced; the copy rate in the same process), the copies
# with the balanced paths broken on purpose (break_balance.sh: choice, plain, mapping; only their first cases,
# the ones each break must fail), and ncu's kernel times of one skewed call (main kernel and merge apart).
# PREBUILT holds test_decode_plan, test_decode_attention, test_decode_attention_broken_{choice,plain,mapping}
# and libpvt_spec.so, packed in PREBUILT/bins.tar.xz (tests/gpu/prebuild_mixed.sh); each step has its own
# time limit, so that a slow one leaves the others their time. Outputs go to OUT_DIR.
# Usage (repository root): bash tests/gpu/run_mixed.sh PREBUILT OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
pre=$1 out=$2
. tests/gpu/run_steps.sh
step plan 8 "$pre/test_decode_plan"
step balanced 40 "$pre/test_decode_attention" --balanced-only
step mixed 80 python3 tests/gpu/bench_mixed.py "$out/mixed.json" --capi --balance 2,4 --rule-blocks 3,4 --balance-w8 1 \
  --uniform 4096,16384 --uniform-batches 16,32,64
for m in choice plain mapping; do
  step "broken_$m" 11 "$pre/test_decode_attention_broken_$m" --balanced-only
  grep '^FAIL' "$out/broken_$m.txt" | cut -c1-140 | head -8
done
if command -v ncu > /dev/null; then
  for how in "skewed" "uniform 4096"; do
    set -- $how
    step "ncu_$1" 14 ncu --clock-control none --kernel-name regex:'decode_attention|merge' --csv \
      --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
      python3 tests/gpu/profile_mixed.py 28 4 16 --capi --balance -1,0,2,4 ${2:+--uniform $2}
  done
fi
grep -h '^FAIL' "$out/plan.txt" "$out/balanced.txt" | head -20

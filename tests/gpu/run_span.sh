#!/usr/bin/env bash
# Span grids (DecodeOptions::balance_span, issue 32 point 3) on the H200 in one call, nothing compiled there:
# the planner's tests, the balanced and span cases and every per-slot case on a span grid
# (test_decode_attention --span-only; then under compute-sanitizer memcheck), bench_mixed.py (skewed rows and
# equal lengths: the default, the rule, span grids of 1 and 2 blocks an SM and of one 8-warp block an SM, the
# copy rate in the same process), the copies with the span grid broken on purpose
# (break_balance.sh: span_count, span_range), and ncu's kernel times of one skewed call.
# PREBUILT: BREAKS="span_count span_range stream_tile" bash tests/gpu/prebuild_mixed.sh PREBUILT [cmake args...].
# Usage (repository root): bash tests/gpu/run_span.sh PREBUILT OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
pre=$1 out=$2
mkdir -p "$out" build/spec_capi
tar -xJf "$pre/bins.tar.xz" -C "$pre"
cp "$pre/libpvt_spec.so" build/spec_capi/
step() {  # step NAME LIMIT_S command...: the output to OUT_DIR/NAME.txt, its last line and time printed
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  echo "== $name: rc $? in $((SECONDS - t0)) s: $(grep -c '^FAIL' "$out/$name.txt") FAIL lines; $(tail -1 "$out/$name.txt" | cut -c1-160)"
}
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; } > "$out/machine.txt" 2>&1
step plan 8 "$pre/test_decode_plan"
step span 120 "$pre/test_decode_attention" --span-only
step mixed 170 python3 tests/gpu/bench_mixed.py "$out/mixed.json" --capi --span 2 --span-stream \
  --uniform 4096,16384 --uniform-batches 16,32,64
for m in span_count span_range stream_tile; do
  step "broken_$m" 30 "$pre/test_decode_attention_broken_$m" --span-only
  grep '^FAIL' "$out/broken_$m.txt" | cut -c1-140 | head -6
done
if command -v compute-sanitizer > /dev/null; then
  step memcheck 120 compute-sanitizer --tool memcheck "$pre/test_decode_attention" --span-only
  grep -E 'ERROR SUMMARY|Invalid' "$out/memcheck.txt" | head -5
fi
if command -v ncu > /dev/null; then
  step ncu_skewed 25 ncu --clock-control none --kernel-name regex:'decode_attention|merge' --csv \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
    python3 tests/gpu/profile_mixed.py 28 4 16 --capi --balance -1,2 --span
fi
grep -h '^FAIL' "$out/plan.txt" "$out/span.txt" | head -20
rm -f "$out/mixed.txt"  # its rows are in mixed.json (at most 8 files come back)

#!/usr/bin/env bash
# Device call 3 (2026-12-07 evening): the kv heads' blocks in clusters kept in step (--head-cluster), against the
# plan (no clusters), with 4 and 8 warps; the checks of the build that has it. build/carry/q19/bins.tar.xz:
# test_kv_quant_cuda (cursor + head_cluster, commit of branch cursor), _base (main 5ba93e7), _broken (scale
# pointer never advanced), _broken_hc (head_cluster's range check gone).
set -uo pipefail
P=build/carry/q19
tar -xJf $P/bins.tar.xz -C $P
source tests/gpu/run_lib.sh
N=$P/test_kv_quant_cuda
for b in 8 32 1; do
  run plan_b$b 80 $N --bench-only --batch $b
  run hc8_b$b 80 $N --bench-only --batch $b --head-cluster 8
  run hc4_b$b 80 $N --bench-only --batch $b --head-cluster 4
  run hc8w8_b$b 80 $N --bench-only --batch $b --head-cluster 8 --warps 8
  run w8_b$b 80 $N --bench-only --batch $b --warps 8
  run inner_b$b 80 $N --bench-only --batch $b --scale-tokens-inner
  run plan2_b$b 80 $N --bench-only --batch $b
done
for f in "$O"/*.log; do echo "## $(basename "$f")"; grep "^BENCH llama" "$f" | awk '{print $2,$3,$4,$5,$6,$7}'; done
run kv_quant 200 $N --no-bench
run broken_cursor 60 $P/test_kv_quant_cuda_broken --tc-only
run broken_hc 30 $P/test_kv_quant_cuda_broken_hc --bad-only
run bad 30 $N --bad-only
run memcheck 100 compute-sanitizer --tool memcheck $N --tc-only
finish

#!/usr/bin/env bash
# Run 34 on the H200, from the repository root, OUT=<folder>: split_range divides by SplitCount's multiply-high
# in the one-row kernel too (its 64-bit division was a subroutine before the first load). The decode-attention
# and slot native tests; then the cold-L2 MHA table and sweep29.py, this tree against oldtree/ (commit d560ed2,
# copied there by git archive), alternating processes.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run34.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
(python3 tests/gpu/build.py > $L/build_new.log 2>&1; echo "rc=$?" >> $L/build_new.log) &
e1=$!
(cd oldtree && python3 tests/gpu/build.py > $L/build_old.log 2>&1; echo "rc=$?" >> $L/build_old.log) &
e2=$!
(cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb --target test_decode_attention test_slot_cache_cuda) > $L/native_build.log 2>&1
ts native built
/tmp/nb/test_decode_attention --no-bench > $L/test_decode_attention.log 2>&1; echo "rc=$?" >> $L/test_decode_attention.log
/tmp/nb/test_slot_cache_cuda > $L/test_slot_cache_cuda.log 2>&1; echo "rc=$?" >> $L/test_slot_cache_cuda.log
ts native tests done
wait $e1 $e2
ts ext built
for t in old new old new; do
  n=1; [ -f $L/cold_${t}_1.json ] && n=2
  d=.; [ $t = old ] && d=oldtree
  (cd $d && python3 tests/gpu/bench_attention.py $L/cold_${t}_$n.json --cold --kv-heads 32 > $L/cold_${t}_$n.log 2>&1)
  ts cold $t $n
done
cp sweep29.py oldtree/ 2>/dev/null
for t in new old; do
  d=.; [ $t = old ] && d=oldtree
  (cd $d && python3 sweep29.py $L/sweep_$t.json > $L/sweep_$t.log 2>&1)
  ts sweep $t
done

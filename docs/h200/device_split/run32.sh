#!/usr/bin/env bash
# Run 32 on the H200, from the repository root, OUT=<folder>: balance_splits costs a split count by the steps
# of a block (16 splits for MHA B=1 S=1k): the decode-attention and slot native tests, the cold-L2 table and
# the default (L2-resident) MHA table.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run32.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
(python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "rc=$?" >> $L/build_ext.log) &
ext=$!
(cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb --target test_decode_attention test_slot_cache_cuda) > $L/native_build.log 2>&1
ts native built
/tmp/nb/test_decode_attention --no-bench > $L/test_decode_attention.log 2>&1; echo "rc=$?" >> $L/test_decode_attention.log
/tmp/nb/test_slot_cache_cuda > $L/test_slot_cache_cuda.log 2>&1; echo "rc=$?" >> $L/test_slot_cache_cuda.log
ts native tests done
wait $ext
ts ext built
python3 tests/gpu/bench_attention.py $L/cold.json --cold > $L/cold.log 2>&1
ts cold
python3 tests/gpu/bench_attention.py $L/bench_mha.json --kv-heads 32 > $L/bench_mha.log 2>&1
ts bench mha

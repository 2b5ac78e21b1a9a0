#!/usr/bin/env bash
# Run 26 on the H200, from the repository root, OUT=<folder>: SplitCount (split_range divides by the split
# count as a multiply-high and a shift in the tensor-core and row-per-warp kernels): the decode attention and
# slot-cache native tests, a broken copy (the multiplier rounded down), sweep25.py (this tree only), and the
# attention table, GQA and MHA in separate processes.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run26.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
(python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log) &
ext=$!
rm -rf /tmp/brokenD && mkdir /tmp/brokenD && cp -r custom_ops tests /tmp/brokenD/
sed -i 's/((uint64_t(1) << (31 + l)) + static_cast<uint64_t>(count) - 1) \//((uint64_t(1) << (31 + l))) \/  \/\/ BROKEN/' /tmp/brokenD/custom_ops/kernels/decode_attention_common_cuda.cuh
grep -c "BROKEN" /tmp/brokenD/custom_ops/kernels/decode_attention_common_cuda.cuh > $L/broken_build.log
(cmake -S /tmp/brokenD/tests/native -B /tmp/nbD -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nbD --target test_decode_attention) >> $L/broken_build.log 2>&1 &
brk=$!
(cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb --target test_decode_attention test_slot_cache_cuda) > $L/native_build.log 2>&1
ts native built
/tmp/nb/test_decode_attention --no-bench > $L/test_decode_attention.log 2>&1; echo "rc=$?" >> $L/test_decode_attention.log
/tmp/nb/test_slot_cache_cuda > $L/test_slot_cache_cuda.log 2>&1; echo "rc=$?" >> $L/test_slot_cache_cuda.log
ts native tests done
wait $ext
ts ext built
python3 sweep25.py $L/sweep25_new.json > $L/sweep25_new.log 2>&1
ts sweep done
python3 tests/gpu/bench_attention.py $L/bench_gqa.json --kv-heads 8 > $L/bench_gqa.log 2>&1
ts bench gqa done
python3 tests/gpu/bench_attention.py $L/bench_mha.json --kv-heads 32 > $L/bench_mha.log 2>&1
ts bench mha done
wait $brk
timeout 90 /tmp/nbD/test_decode_attention --no-bench > $L/brokenD_test_decode_attention.log 2>&1; echo "rc=$?" >> $L/brokenD_test_decode_attention.log
ts broken run

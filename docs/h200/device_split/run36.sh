#!/usr/bin/env bash
# Run 36 on the H200, from the repository root with sweep35.py copied there, OUT=<folder>: the attention kernels
# launched programmatically (PDL) behind the kernel ahead, each waiting for it before any memory access; and
# f130cd1's capped split rule, never run before. Native tests (with the new late-input passes), a broken copy
# without the main kernels' waits (the late_inputs.* cases must fail, and only they), the cold table, both
# default tables, sweep35.py (the cap), the Llama loop (3 rounds, with the graph also captured without PDL).
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run36.tgz logs); }
ts start
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__)'; nproc; cat /proc/loadavg; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
(python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log) &
ext=$!
rm -rf /tmp/brokenW && mkdir /tmp/brokenW && cp -r custom_ops tests /tmp/brokenW/
for f in decode_attention_cuda.cu decode_attention_rows_cuda.cuh decode_attention_mma_cuda.cuh; do
  sed -i 's|^  wait_for_previous_grid();$|  // BROKEN: no wait|' /tmp/brokenW/custom_ops/kernels/$f
done
grep -c "BROKEN" /tmp/brokenW/custom_ops/kernels/decode_attention_*.cu* > $L/broken_build.log
(cmake -S /tmp/brokenW/tests/native -B /tmp/nbW -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nbW --target test_decode_attention) >> $L/broken_build.log 2>&1 &
brk=$!
(cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb) > $L/native_build.log 2>&1
ts native built
(while kill -0 $brk 2>/dev/null; do sleep 1; done; timeout 200 /tmp/nbW/test_decode_attention --no-bench > $L/brokenW_test_decode_attention.log 2>&1; echo "rc=$?" >> $L/brokenW_test_decode_attention.log) &
brun=$!
/tmp/nb/test_decode_attention --no-bench > $L/test_decode_attention.log 2>&1; echo "rc=$?" >> $L/test_decode_attention.log
for t in test_slot_cache_cuda test_cuda test_speculative_accept_cuda; do /tmp/nb/$t > $L/$t.log 2>&1; echo "rc=$?" >> $L/$t.log; done
ts native tests done
wait $brun
ts broken run
wait $ext
ts ext built
python3 tests/gpu/bench_attention.py $L/cold.json --cold > $L/cold.log 2>&1
ts cold
timeout 90 python3 sweep35.py $L/sweep35.json > $L/sweep35.log 2>&1
ts sweep35
python3 tests/gpu/bench_attention.py $L/bench_gqa.json --kv-heads 8 > $L/bench_gqa.log 2>&1
ts bench gqa
python3 tests/gpu/bench_attention.py $L/bench_mha.json --kv-heads 32 > $L/bench_mha.log 2>&1
ts bench mha
python3 tests/gpu/llama_loop.py $L/llama_mha.json --kv-heads 32 --rounds 3 > $L/llama_mha.log 2>&1
ts llama mha
python3 tests/gpu/llama_loop.py $L/llama_gqa.json --kv-heads 8 --rounds 3 > $L/llama_gqa.log 2>&1
ts llama gqa

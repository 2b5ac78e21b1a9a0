#!/usr/bin/env bash
# Run 28 on the H200, from the repository root, OUT=<folder>: this commit's code (eda0dd7's kernels):
# every native CUDA test (and the slot tests with 4 and 8 warps forced), a broken copy without the kv_len
# check (errors.kv_len_past_int32 must fail), then the Llama loop, 5 rounds, MHA and GQA.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run28.tgz logs); }
ts start
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__)'; nproc; cat /proc/loadavg; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
(python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log) &
ext=$!
rm -rf /tmp/brokenE && mkdir /tmp/brokenE && cp -r custom_ops tests /tmp/brokenE/
sed -i 's/^      p.kv_len > INT32_MAX) {/      false) {  \/\/ BROKEN/' /tmp/brokenE/custom_ops/kernels/decode_attention_cuda.cu
grep -c "BROKEN" /tmp/brokenE/custom_ops/kernels/decode_attention_cuda.cu > $L/broken_build.log
(cmake -S /tmp/brokenE/tests/native -B /tmp/nbE -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nbE --target test_decode_attention) >> $L/broken_build.log 2>&1 &
brk=$!
(cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb) > $L/native_build.log 2>&1
ts native built
(while kill -0 $brk 2>/dev/null; do sleep 1; done; timeout 150 /tmp/nbE/test_decode_attention --no-bench > $L/brokenE_test_decode_attention.log 2>&1; echo "rc=$?" >> $L/brokenE_test_decode_attention.log) &
brun=$!
/tmp/nb/test_decode_attention --no-bench > $L/test_decode_attention.log 2>&1; echo "rc=$?" >> $L/test_decode_attention.log
for t in test_slot_cache_cuda test_cuda test_speculative_accept_cuda test_core; do /tmp/nb/$t > $L/$t.log 2>&1; echo "rc=$?" >> $L/$t.log; done
for w in 4 8; do PVT_DECODE_MMA_WARPS=$w /tmp/nb/test_slot_cache_cuda > $L/test_slot_cache_cuda_warps$w.log 2>&1; echo "rc=$?" >> $L/test_slot_cache_cuda_warps$w.log; done
ts native tests done
wait $brun
ts broken run
wait $ext
ts ext built
cat /proc/loadavg >> $L/machine.txt
python3 tests/gpu/llama_loop.py $L/llama_mha.json --kv-heads 32 --rounds 5 > $L/llama_mha.log 2>&1
ts llama mha done
python3 tests/gpu/llama_loop.py $L/llama_gqa.json --kv-heads 8 --rounds 5 > $L/llama_gqa.log 2>&1
ts llama gqa done

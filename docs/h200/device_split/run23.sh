#!/usr/bin/env bash
# Run 23 on the H200, from the repository root, OUT=<folder>: split_range (each entry's own steps spread over
# the splits) with the new split rule: all native CUDA tests (+ 4 and 8 warps forced for the slot tests), a
# broken copy (the first steps % splits splits lose their extra step), sweep23.py (the rows at the bound,
# plan variants, capacity bounds), the full attention table and the full Llama loop.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run23.tgz logs); }
ts start
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__)'; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
(python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log) &
ext=$!
rm -rf /tmp/brokenC && mkdir /tmp/brokenC && cp -r custom_ops tests /tmp/brokenC/
sed -i 's/const unsigned last = first + each + (sp < extra ? 1u : 0u);/const unsigned last = first + each;  \/\/ BROKEN/' /tmp/brokenC/custom_ops/kernels/decode_attention_common_cuda.cuh
grep -c "BROKEN" /tmp/brokenC/custom_ops/kernels/decode_attention_common_cuda.cuh > $L/broken_build.log
(cmake -S /tmp/brokenC/tests/native -B /tmp/nbC -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nbC --target test_decode_attention test_slot_cache_cuda) >> $L/broken_build.log 2>&1 &
brk=$!
(cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb) > $L/native_build.log 2>&1
ts native built
/tmp/nb/test_decode_attention --no-bench > $L/test_decode_attention.log 2>&1; echo "rc=$?" >> $L/test_decode_attention.log
for t in test_slot_cache_cuda test_cuda test_speculative_accept_cuda test_core; do /tmp/nb/$t > $L/$t.log 2>&1; echo "rc=$?" >> $L/$t.log; done
for w in 4 8; do PVT_DECODE_MMA_WARPS=$w /tmp/nb/test_slot_cache_cuda > $L/test_slot_cache_cuda_warps$w.log 2>&1; echo "rc=$?" >> $L/test_slot_cache_cuda_warps$w.log; done
ts native tests done
wait $brk
/tmp/nbC/test_decode_attention --no-bench > $L/brokenC_test_decode_attention.log 2>&1; echo "rc=$?" >> $L/brokenC_test_decode_attention.log
/tmp/nbC/test_slot_cache_cuda > $L/brokenC_test_slot_cache_cuda.log 2>&1; echo "rc=$?" >> $L/brokenC_test_slot_cache_cuda.log
ts broken run
wait $ext
ts ext built
python3 sweep23.py $L/sweep23.json > $L/sweep23.log 2>&1
ts sweep done
python3 tests/gpu/bench_attention.py $L/bench_attention.json > $L/bench_attention.log 2>&1
ts bench done
python3 tests/gpu/llama_loop.py $L/llama_mha.json --kv-heads 32 > $L/llama_mha.log 2>&1
ts llama mha done
python3 tests/gpu/llama_loop.py $L/llama_gqa.json --kv-heads 8 > $L/llama_gqa.log 2>&1
ts llama gqa done

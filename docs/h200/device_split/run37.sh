#!/usr/bin/env bash
# Run 37 on the H200, from the repository root, OUT=<folder>: the tensor-core kernel's one-block-an-SM plans
# launched with more than half an SM's shared memory (sm_exclusive_smem), after run 36 found its 4-warp blocks
# doubling up under the programmatic launch. Native decode and slot tests, the cold table (fp16 first, then
# a second process bf16 first), the GQA table, then the MHA table with bf16 first.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run37.tgz logs); }
ts start
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__)'; nproc; cat /proc/loadavg; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
(python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log) &
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
python3 tests/gpu/bench_attention.py $L/cold_bf16_first.json --cold --dtypes bf16,fp16 > $L/cold_bf16_first.log 2>&1
ts cold bf16 first
python3 tests/gpu/bench_attention.py $L/bench_gqa.json --kv-heads 8 > $L/bench_gqa.log 2>&1
ts bench gqa
python3 tests/gpu/bench_attention.py $L/bench_mha_bf16_first.json --kv-heads 32 --dtypes bf16,fp16 > $L/bench_mha_bf16_first.log 2>&1
ts bench mha bf16 first

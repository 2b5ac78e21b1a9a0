#!/usr/bin/env bash
# Run 21 (final) on the H200, from the repository root, OUT=<folder>: all native CUDA tests (+ 4 and 8 warps
# forced for the slot tests), a broken copy (the one-row kernel's last split drops the keys past
# splits x keys_per_split), the split check (sweep20.py, one process), the full attention table and the full
# Llama loop.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run21.tgz logs); }
ts start
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__)'; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
(python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log) &
ext=$!
rm -rf /tmp/brokenA && mkdir /tmp/brokenA && cp -r custom_ops tests /tmp/brokenA/
sed -i 's/const int64_t s_end = split + 1 == splits ? e.n : s_lo + keys_per_split;  \/\/ the last split/const int64_t s_end = s_lo + keys_per_split;  \/\/ BROKEN/' /tmp/brokenA/custom_ops/kernels/decode_attention_cuda.cu
grep -c "BROKEN" /tmp/brokenA/custom_ops/kernels/decode_attention_cuda.cu > $L/broken_build.log
(cmake -S /tmp/brokenA/tests/native -B /tmp/nbA -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nbA --target test_decode_attention) >> $L/broken_build.log 2>&1 &
brk=$!
(cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb) > $L/native_build.log 2>&1
ts native built
/tmp/nb/test_decode_attention --no-bench > $L/test_decode_attention.log 2>&1; echo "rc=$?" >> $L/test_decode_attention.log
for t in test_slot_cache_cuda test_cuda test_speculative_accept_cuda test_core; do /tmp/nb/$t > $L/$t.log 2>&1; echo "rc=$?" >> $L/$t.log; done
for w in 4 8; do PVT_DECODE_MMA_WARPS=$w /tmp/nb/test_slot_cache_cuda > $L/test_slot_cache_cuda_warps$w.log 2>&1; echo "rc=$?" >> $L/test_slot_cache_cuda_warps$w.log; done
ts native tests done
wait $brk
/tmp/nbA/test_decode_attention --no-bench > $L/brokenA_test_decode_attention.log 2>&1; echo "rc=$?" >> $L/brokenA_test_decode_attention.log
ts broken run
wait $ext
ts ext built
python3 sweep20.py $L/sweep20.json > $L/sweep20.log 2>&1
ts sweep done
python3 tests/gpu/bench_attention.py $L/bench_attention.json > $L/bench_attention.log 2>&1
ts bench done
python3 tests/gpu/llama_loop.py $L/llama_mha.json --kv-heads 32 > $L/llama_mha.log 2>&1
ts llama mha done
python3 tests/gpu/llama_loop.py $L/llama_gqa.json --kv-heads 8 > $L/llama_gqa.log 2>&1
ts llama gqa done

#!/usr/bin/env bash
# Run 16 (final) as it ran on the H200, from the repository root, OUT=<folder>: all native CUDA tests, a
# broken copy (the last split drops the keys past splits x keys_per_split), the Llama loop (quick) and the
# full attention table. (One-off; the earlier runs' scripts differed in the steps listed in
# docs/H200_DECODE_PARITY.md, "Fourth session".)
set -uo pipefail
O=$OUT; L=/tmp/logs; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__)'; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
(python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log) &
ext=$!
rm -rf /tmp/broken && mkdir /tmp/broken && cp -r custom_ops tests /tmp/broken/
sed -i 's/const int64_t s_end = split + 1 == splits ? e.n : s_lo + keys_per_split;/const int64_t s_end = s_lo + keys_per_split;/' /tmp/broken/custom_ops/kernels/decode_attention_mma_cuda.cuh
grep -c "const int64_t s_end = s_lo + keys_per_split;" /tmp/broken/custom_ops/kernels/decode_attention_mma_cuda.cuh > $L/broken_build.log
(cmake -S /tmp/broken/tests/native -B /tmp/nbb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nbb --target test_decode_attention test_slot_cache_cuda) >> $L/broken_build.log 2>&1 &
brk=$!
(cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb) > $L/native_build.log 2>&1
/tmp/nb/test_decode_attention --no-bench > $L/test_decode_attention.log 2>&1; echo "rc=$?" >> $L/test_decode_attention.log
for t in test_slot_cache_cuda test_cuda test_speculative_accept_cuda test_core; do /tmp/nb/$t > $L/$t.log 2>&1; done
for w in 4 8; do PVT_DECODE_MMA_WARPS=$w /tmp/nb/test_slot_cache_cuda > $L/test_slot_cache_cuda_warps$w.log 2>&1; done
wait $brk
for t in test_decode_attention test_slot_cache_cuda; do /tmp/nbb/$t --no-bench > $L/broken_$t.log 2>&1; done
wait $ext
python3 tests/gpu/llama_loop.py $L/llama_gqa.json --kv-heads 8 --quick > $L/llama_gqa.log 2>&1
python3 tests/gpu/llama_loop.py $L/llama_mha.json --kv-heads 32 --quick > $L/llama_mha.log 2>&1
python3 tests/gpu/bench_attention.py $L/bench_attention.json > $L/bench_attention.log 2>&1
cd /tmp && tar czf $O/run16.tgz logs

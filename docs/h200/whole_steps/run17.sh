#!/usr/bin/env bash
# Run 17 on the H200, from the repository root, OUT=<folder>: all native CUDA tests, two broken copies
# (A: the one-row kernel's last split drops the keys past splits x keys_per_split; B: the same in the
# tensor-core kernel), the split sweep (sweep17.py) and the full attention table.
set -uo pipefail
O=$OUT; L=/tmp/logs; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; }
ts start
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__)'; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
(python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log) &
ext=$!
for X in A B; do rm -rf /tmp/broken$X && mkdir /tmp/broken$X && cp -r custom_ops tests /tmp/broken$X/; done
sed -i 's/const int64_t s_end = split + 1 == splits ? e.n : s_lo + keys_per_split;  \/\/ the last split/const int64_t s_end = s_lo + keys_per_split;  \/\/ BROKEN/' /tmp/brokenA/custom_ops/kernels/decode_attention_cuda.cu
sed -i 's/const int64_t s_end = split + 1 == splits ? e.n : s_lo + keys_per_split;/const int64_t s_end = s_lo + keys_per_split;/' /tmp/brokenB/custom_ops/kernels/decode_attention_mma_cuda.cuh
grep -c "BROKEN" /tmp/brokenA/custom_ops/kernels/decode_attention_cuda.cu > $L/broken_build.log
grep -c "const int64_t s_end = s_lo + keys_per_split;" /tmp/brokenB/custom_ops/kernels/decode_attention_mma_cuda.cuh >> $L/broken_build.log
for X in A B; do (cmake -S /tmp/broken$X/tests/native -B /tmp/nb$X -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb$X --target test_decode_attention) >> $L/broken_build.log 2>&1 & done
(cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb) > $L/native_build.log 2>&1
ts native built
/tmp/nb/test_decode_attention --no-bench > $L/test_decode_attention.log 2>&1; echo "rc=$?" >> $L/test_decode_attention.log
for t in test_slot_cache_cuda test_cuda test_speculative_accept_cuda test_core; do /tmp/nb/$t > $L/$t.log 2>&1; echo "rc=$?" >> $L/$t.log; done
for w in 4 8; do PVT_DECODE_MMA_WARPS=$w /tmp/nb/test_slot_cache_cuda > $L/test_slot_cache_cuda_warps$w.log 2>&1; echo "rc=$?" >> $L/test_slot_cache_cuda_warps$w.log; done
ts native tests done
wait $ext
ts ext built
python3 sweep17.py $L/sweep17.json > $L/sweep17.log 2>&1
ts sweep done
wait
ts broken built
for X in A B; do /tmp/nb$X/test_decode_attention --no-bench > $L/broken${X}_test_decode_attention.log 2>&1; echo "rc=$?" >> $L/broken${X}_test_decode_attention.log; done
ts broken run
python3 tests/gpu/bench_attention.py $L/bench_attention.json > $L/bench_attention.log 2>&1
ts bench done
cd /tmp && tar czf $O/run17.tgz logs

#!/usr/bin/env bash
# Run 19 on the H200 (OUT=<folder>): the full attention table (contenders in a seeded order each rep) and the
# full Llama loop (both kv-head counts, all 14 rows, best of 3 rounds) with this commit's kernels.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run19.tgz logs); }
ts start
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__)'; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log
ts ext built
python3 tests/gpu/bench_attention.py $L/bench_attention.json > $L/bench_attention.log 2>&1
ts bench done
python3 tests/gpu/llama_loop.py $L/llama_mha.json --kv-heads 32 > $L/llama_mha.log 2>&1
ts llama mha done
python3 tests/gpu/llama_loop.py $L/llama_gqa.json --kv-heads 8 > $L/llama_gqa.log 2>&1
ts llama gqa done
cd /tmp && tar czf $O/run19.tgz logs

#!/usr/bin/env bash
# Run 38 on the H200, from the repository root, OUT=<folder>: this commit's code (run 37's kernels, whose native
# decode and slot tests passed there): the Llama loop, 3 rounds, MHA and GQA (the graph also captured without PDL).
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run38.tgz logs); }
ts start
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__)'; nproc; cat /proc/loadavg; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log
ts ext built
python3 tests/gpu/llama_loop.py $L/llama_mha.json --kv-heads 32 --rounds 3 > $L/llama_mha.log 2>&1
ts llama mha
python3 tests/gpu/llama_loop.py $L/llama_gqa.json --kv-heads 8 --rounds 3 > $L/llama_gqa.log 2>&1
ts llama gqa

#!/usr/bin/env bash
# Run 18 on the H200 (OUT=<folder>): the timing-order experiment (order18.py) and the full Llama loop (both
# kv-head counts, all 14 rows) with this commit's kernels.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run18.tgz logs); }
ts start
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log
ts ext built
python3 order18.py $L/order18.json > $L/order18.log 2>&1
ts order done
python3 tests/gpu/llama_loop.py $L/llama_mha.json --kv-heads 32 > $L/llama_mha.log 2>&1
ts llama mha done
python3 tests/gpu/llama_loop.py $L/llama_gqa.json --kv-heads 8 > $L/llama_gqa.log 2>&1
ts llama gqa done
cd /tmp && tar czf $O/run18.tgz logs

#!/usr/bin/env bash
# Run 27 on the H200, from the repository root, OUT=<folder>: the MHA attention table with bf16 first, then
# with fp16 only and bf16 only in their own processes: does the per-slot bf16 B=1 S=1k row (9.16-9.30 us in
# the table's processes, 8.75-8.77 in sweeps) follow the process's history?
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run27.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log
ts ext built
python3 tests/gpu/bench_attention.py $L/bench_mha_bf16_first.json --kv-heads 32 --dtypes bf16,fp16 > $L/bench_mha_bf16_first.log 2>&1
ts bench bf16 first done
python3 tests/gpu/bench_attention.py $L/bench_mha_bf16_only.json --kv-heads 32 --dtypes bf16 > $L/bench_mha_bf16_only.log 2>&1
ts bench bf16 only done

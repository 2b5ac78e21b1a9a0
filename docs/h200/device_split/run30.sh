#!/usr/bin/env bash
# Run 30 on the H200, from the repository root, OUT=<folder>: bench_attention.py --cold (the rows whose K+V
# fit in L2 a few times, each call reading another copy) in two processes, fp16 first and bf16 first; then the
# default (L2-resident) table with bf16 first, MHA and GQA in separate processes.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run30.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "rc=$?" >> $L/build_ext.log
ts built
python3 tests/gpu/bench_attention.py $L/cold_fp16_first.json --cold --dtypes fp16,bf16 > $L/cold_fp16_first.log 2>&1
ts cold fp16 first
python3 tests/gpu/bench_attention.py $L/cold_bf16_first.json --cold --dtypes bf16,fp16 > $L/cold_bf16_first.log 2>&1
ts cold bf16 first
python3 tests/gpu/bench_attention.py $L/bench_mha_bf16_first.json --kv-heads 32 --dtypes bf16,fp16 > $L/bench_mha_bf16_first.log 2>&1
ts bench mha
python3 tests/gpu/bench_attention.py $L/bench_gqa_bf16_first.json --kv-heads 8 --dtypes bf16,fp16 > $L/bench_gqa_bf16_first.log 2>&1
ts bench gqa

#!/usr/bin/env bash
# Run 22 on the H200 (OUT=<folder>): the spread between processes of run 21's code: the attention table again,
# MHA twice and GQA once, each in its own process.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run22.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log
ts ext built
for i in 1 2; do python3 tests/gpu/bench_attention.py $L/bench_mha_$i.json --kv-heads 32 > $L/bench_mha_$i.log 2>&1; ts mha $i; done
python3 tests/gpu/bench_attention.py $L/bench_gqa_1.json --kv-heads 8 > $L/bench_gqa_1.log 2>&1; ts gqa 1

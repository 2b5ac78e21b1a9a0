#!/usr/bin/env bash
# Run 40 on the H200, from the repository root, OUT=<folder>: this commit's code; the MHA table in the default
# order (fp16 first), the order run 36 timed it in on the build before sm_exclusive_smem.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run40.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log
ts ext built
python3 tests/gpu/bench_attention.py $L/bench_mha.json --kv-heads 32 > $L/bench_mha.log 2>&1
ts bench mha

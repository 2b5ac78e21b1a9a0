#!/usr/bin/env bash
# Run 39 on the H200, from the repository root, OUT=<folder>: this commit's code; the two GQA Llama rows whose
# eager steps in run 38 followed the host's launch time (B=8 at 1k and 4k), again with 5 rounds each.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run39.tgz logs); }
ts start
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; cat /proc/loadavg; } > $L/machine.txt 2>&1
export PYTHONUNBUFFERED=1
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log
ts ext built
for c in 4096 1024; do
  python3 tests/gpu/llama_loop.py $L/llama_gqa_b8_$c.json --kv-heads 8 --only 8,$c --rounds 5 > $L/llama_gqa_b8_$c.log 2>&1
  ts llama gqa b8 $c
done
cat /proc/loadavg >> $L/machine.txt

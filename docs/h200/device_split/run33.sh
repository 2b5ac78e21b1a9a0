#!/usr/bin/env bash
# Run 33 on the H200, from the repository root, OUT=<folder>: run 32's code again: the cold-L2 table in a second
# process with bf16 first, and the Llama loop's MHA B=1 1k row (its attention plan changed: 16 splits).
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run33.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "rc=$?" >> $L/build_ext.log
ts ext built
python3 tests/gpu/bench_attention.py $L/cold_bf16_first.json --cold --dtypes bf16,fp16 > $L/cold_bf16_first.log 2>&1
ts cold
python3 tests/gpu/llama_loop.py $L/llama_mha_b1_1k.json --kv-heads 32 --rounds 5 --only 1,1024 > $L/llama_mha_b1_1k.log 2>&1
ts llama

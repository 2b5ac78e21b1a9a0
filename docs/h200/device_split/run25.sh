#!/usr/bin/env bash
# Run 25 on the H200, from the repository root, OUT=<folder>: sweep25.py (capacity bounds) with this tree's
# extension and with aad8711's (the tree before split_range), each in its own process, twice in turn; then
# the MHA attention table once more (spread between processes).
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run25.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
# old_aad8711/ was made beforehand: mkdir old_aad8711 && git archive aad8711 custom_ops tests/gpu | tar x -C old_aad8711
rm -rf /tmp/old && cp -r old_aad8711 /tmp/old && cp sweep25.py /tmp/old/  # custom_ops and tests/gpu of aad8711
(cd /tmp/old && python3 tests/gpu/build.py > $L/build_ext_old.log 2>&1; echo "rc=$?" >> $L/build_ext_old.log) &
old=$!
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "rc=$?" >> $L/build_ext.log
wait $old
ts built
for i in 1 2; do
  python3 sweep25.py $L/sweep25_new_$i.json > $L/sweep25_new_$i.log 2>&1
  (cd /tmp/old && python3 sweep25.py $L/sweep25_old_$i.json > $L/sweep25_old_$i.log 2>&1)
  ts sweep $i done
done
python3 tests/gpu/bench_attention.py $L/bench_mha.json --kv-heads 32 > $L/bench_mha.log 2>&1
ts bench mha done

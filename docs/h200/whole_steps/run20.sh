#!/usr/bin/env bash
# Run 20 on the H200 (OUT=<folder>): sweep20.py in three processes.
set -uo pipefail
O=$OUT; L=/tmp/logs; rm -rf $L; mkdir -p $L
ts() { echo "$(date -u +%T) $*" >> $L/timeline.txt; (cd /tmp && tar czf $O/run20.tgz logs); }
ts start
export PYTHONUNBUFFERED=1
python3 tests/gpu/build.py > $L/build_ext.log 2>&1; echo "ext build rc=$?" >> $L/build_ext.log
ts ext built
for i in 1 2 3; do python3 sweep20.py $L/sweep20_$i.json > $L/sweep20_$i.log 2>&1; ts sweep $i; done

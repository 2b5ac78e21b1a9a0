#!/usr/bin/env bash
# Run 35 on the H200, from the repository root with sweep35.py copied there (commit 6ee095e's code), OUT=<folder>:
# this is the one command that ran (given to the device tool as is).
export PYTHONUNBUFFERED=1; mkdir -p /tmp/logs; date -u +%T > /tmp/logs/timeline.txt; python3 tests/gpu/build.py > /tmp/logs/build_ext.log 2>&1; echo rc=$?; timeout 90 python3 sweep35.py /tmp/logs/sweep35.json > /tmp/logs/sweep35.log 2>&1; echo rc=$?; date -u +%T >> /tmp/logs/timeline.txt; cd /tmp && tar czf $OUT/run35.tgz logs; grep '^{' /tmp/logs/sweep35.log

#!/usr/bin/env bash
# Run 31 on the H200, from the repository root with sweep31.py copied there, OUT=<folder>: this is the one
# command that ran (given to the device tool as is).
export PYTHONUNBUFFERED=1; mkdir -p /tmp/logs; (python3 tests/gpu/build.py > /tmp/logs/build_ext.log 2>&1; echo rc=$?) ; date -u +%T > /tmp/logs/timeline.txt; timeout 300 python3 sweep31.py /tmp/logs/sweep31.json > /tmp/logs/sweep31.log 2>&1; echo rc=$?; date -u +%T >> /tmp/logs/timeline.txt; cd /tmp && tar czf $OUT/run31.tgz logs; grep -v Warn /tmp/logs/sweep31.log | grep -v "return F" | cut -c1-200

#!/usr/bin/env bash
# Run 41 on the H200, from the repository root (commit 6fee5c2, the review's helper), OUT=<folder>: the one command
# that ran (given to the device tool as is): the native decode-attention and slot tests, without their benchmarks.
# Its commit.txt names 104204e: the device's copy of .git was stale; the working tree it ran was 6fee5c2's.
set -o pipefail; mkdir -p /tmp/l; (cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja && cmake --build /tmp/nb --target test_decode_attention test_slot_cache_cuda) > /tmp/l/build.log 2>&1; echo build rc=$?; /tmp/nb/test_decode_attention --no-bench > /tmp/l/test_decode_attention.log 2>&1; echo rc=$?; tail -1 /tmp/l/test_decode_attention.log; /tmp/nb/test_slot_cache_cuda --no-bench > /tmp/l/test_slot_cache_cuda.log 2>&1; echo rc=$?; tail -1 /tmp/l/test_slot_cache_cuda.log; git log --oneline -1 > /tmp/l/commit.txt; date -u >> /tmp/l/commit.txt; cp /tmp/l/* $OUT/

#!/usr/bin/env bash
# Device call 1 (2026-12-07 evening): the 8-bit tiles' copy cursor (branch cursor) against main's kernels.
# Binaries built without a GPU: build/carry/q18/bins.tar.xz (test_kv_quant_cuda = cursor, _base = main 5ba93e7,
# _broken = cursor with the scale pointer never advanced).
set -uo pipefail
P=build/carry/q18
tar -xJf $P/bins.tar.xz -C $P
SECONDS=0
bash tests/gpu/run_quant_ab.sh $P "${STEPS:-checks bench}"

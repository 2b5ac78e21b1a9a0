#!/usr/bin/env bash
# The Llama-shaped loop's 8-bit rows on the H200 (issue 28 point 4): the torch extension built here, then
# tests/gpu/llama_loop.py with --cache-dtype float8_e4m3fn and int8 (every mode: cat, static, ours eager and
# graph-captured, ours 8-bit eager and graph-captured) at each ROW (B,ctx). GQA 32/8, one round of 12 steps.
# Usage: bash tests/gpu/run_quant_loop.sh [ROW ...]   (default 8,4096 8,16384; logs in $OUT/logs.tgz)
set -uo pipefail
ROWS=${*:-8,4096 8,16384}
source "$(dirname "$0")/run_lib.sh"  # O, run, finish
export MAX_JOBS=16 PADDLE_VTENSOR_TORCH_BUILD=${PADDLE_VTENSOR_TORCH_BUILD:-/tmp/pvt_torch}
run ext_build 330 python3 tests/gpu/build.py
for row in $ROWS; do
  for dt in float8_e4m3fn int8; do
    run "loop_${dt}_${row/,/_}" 150 python3 tests/gpu/llama_loop.py "$O/loop_${dt}_${row/,/_}.json" --kv-heads 8 --rounds 1 \
      --only "$row" --cache-dtype "$dt"
  done
done
python3 - "$O" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/loop_*.json")):
    for r in json.load(open(f))["rows"]:
        keys = ("static_ms", "ours_ms", "ours_graph_ms", "ours_q_ms", "ours_q_graph_ms", "static_peak_gib",
                "ours_graph_peak_gib", "ours_q_graph_peak_gib", "ours_q_graph_vs_graph", "maxdiff_ours_q_graph_vs_static",
                "maxdiff_ours_graph_vs_static", "maxdiff_ours_q_graph_vs_ours_q")
        print(f.rsplit("/", 1)[1], r["B"], r["ctx"], {k: r.get(k) for k in keys})
PY
finish

#!/usr/bin/env bash
# Everything issue 9 measures on the H200, in one go; results under $1 (default ./h200_out).
#   bash tests/gpu/run_h200.sh OUT_DIR [--quick]
# 1. native harness with CUDA: decode attention vs the host kernel (+ varlen), then its bandwidth;
# 2. the torch extension (core + kernels) and the attention comparison with PyTorch's SDPA;
# 3. the Llama-shaped decode loop, MHA and GQA.
set -uo pipefail
out=${1:-h200_out}
quick=${2:-}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1;
  python3 -c 'import torch; print("torch", torch.__version__)'; } > "$out/machine.txt" 2>&1
export PYTHONUNBUFFERED=1
# The extension build and the native build run side by side (16 cores).
(python3 tests/gpu/build.py > "$out/build_ext.log" 2>&1; echo "ext build rc=$?" >> "$out/build_ext.log") &
ext=$!
cmake -S tests/native -B /tmp/nb -DPVT_WITH_CUDA=ON -G Ninja > "$out/native.log" 2>&1 && cmake --build /tmp/nb >> "$out/native.log" 2>&1
/tmp/nb/test_decode_attention --no-bench > "$out/test_decode_attention.log" 2>&1; echo "rc=$?" >> "$out/test_decode_attention.log"
tail -3 "$out/test_decode_attention.log"; grep FAIL "$out/test_decode_attention.log" | head -20
/tmp/nb/test_decode_attention --bench-only >> "$out/test_decode_attention.log" 2>&1
wait $ext
tail -2 "$out/build_ext.log"
python3 tests/gpu/bench_attention.py "$out/bench_attention.json" $quick 2>&1 | tee "$out/bench_attention.log" | cut -c1-400
[ -n "$quick" ] || [ -n "${NO_SWEEP:-}" ] || python3 tests/gpu/bench_attention.py "$out/splits_sweep.json" --sweep 2>&1 | tee "$out/splits_sweep.log" | cut -c1-300
python3 tests/gpu/llama_loop.py "$out/llama_mha.json" --kv-heads 32 $quick 2>&1 | tee "$out/llama_mha.log"
[ -n "$quick" ] || python3 tests/gpu/llama_loop.py "$out/llama_gqa.json" --kv-heads 8 2>&1 | tee "$out/llama_gqa.log"

#!/usr/bin/env bash
# Run every test that needs no GPU: the native core harness on the host backend, a compile of every
# CUDA source with nvcc (when nvcc exists; CI has no GPU), and the pytest suite.
# Expects scripts/setup.sh to have run (the README's test command does both).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== native harness (host backend)"
cmake -S tests/native -B build/native -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/native -j2 > /dev/null
./build/native/test_core
./build/native/test_slot_cache
./build/native/test_speculative_accept
./build/native/test_attention_cpu
if command -v nvcc > /dev/null; then
  echo "== nvcc compile check of every CUDA source (no GPU needed)"
  bash scripts/compile_cuda.sh
else
  echo "== nvcc not found: CUDA compile check skipped"
fi
echo "== pytest"
.venv/bin/python -m pytest -q tests "$@"

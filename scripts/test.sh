#!/usr/bin/env bash
# Run every test that needs no GPU: the native core harness on the host backend, a compile of every
# CUDA source with nvcc (when nvcc exists; CI has no GPU), and the pytest suite.
# Expects scripts/setup.sh to have run (the README's test command does both).
#
#   bash scripts/test.sh [pytest args]       # everything, in .venv (PaddleNLP 2.8.1)
#   bash scripts/test.sh --paddlenlp3        # the PaddleNLP tests (eager integration, static
#                                            # llama) in .venv-paddlenlp3 (bash scripts/setup.sh paddlenlp3)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--paddlenlp3" ]; then
  shift
  echo "== pytest, PaddleNLP 3.0.0b4 (.venv-paddlenlp3)"
  .venv-paddlenlp3/bin/python -m pytest -q tests/test_integration_eager.py tests/test_static_llama.py tests/test_autopatch.py \
    tests/test_speculation_policy.py "$@"  # the policy: numpy 1.26 here, 2.4 in .venv
  exit 0
fi
echo "== native harness (host backend)"
cmake -S tests/native -B build/native -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/native -j2 > /dev/null
./build/native/test_core
./build/native/test_slot_cache
./build/native/test_speculative_accept
./build/native/test_attention_cpu
./build/native/test_decode_plan
./build/native/test_phys_chunks
./build/native/test_chunk_pool
./build/native/test_deferred_release
./build/native/test_slot_share
./build/native/test_slot_threads
./build/native/test_slot_threads_tsan
./build/native/test_background_mapper
./build/native/test_background_mapper_tsan
./build/native/test_lookahead
./build/native/test_lookahead_tsan
./build/native/test_step_counters
./build/native/test_zero_cover
if command -v nvcc > /dev/null; then
  echo "== nvcc compile check of every CUDA source (no GPU needed)"
  bash scripts/compile_cuda.sh
else
  echo "== nvcc not found: CUDA compile check skipped"
fi
echo "== pytest"
.venv/bin/python -m pytest -q tests "$@"

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
# The native harness and the nvcc compile check run beside pytest: pytest keeps about one core busy, the
# compiles take the other (on CI's 2 cores the three in a row took 17 of its 28 minutes). Their output is
# printed after pytest's; either failing fails the run.
mkdir -p build
beside=build/test_beside_pytest.log
(
  set -e
  echo "== native harness (host backend)"
  cmake -S tests/native -B build/native -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build/native -j2 > /dev/null
  for t in test_core test_slot_cache test_speculative_accept test_attention_cpu test_decode_plan test_phys_chunks \
           test_chunk_pool test_deferred_release test_slot_share test_slot_threads test_slot_threads_tsan \
           test_background_mapper test_background_mapper_tsan test_lookahead test_lookahead_tsan \
           test_step_counters test_zero_cover; do
    ./build/native/$t
  done
  if command -v nvcc > /dev/null; then
    echo "== nvcc compile check of every CUDA source (no GPU needed)"
    bash scripts/compile_cuda.sh
  else
    echo "== nvcc not found: CUDA compile check skipped"
  fi
) > "$beside" 2>&1 &
pid=$!
echo "== pytest (beside it: the native harness and the nvcc compile check, output in $beside)"
rc=0
.venv/bin/python -m pytest -q tests "$@" || rc=$?
beside_rc=0
wait $pid || beside_rc=$?
cat "$beside"
if [ $beside_rc != 0 ]; then
  echo "FAILED: the native harness or the nvcc compile check (exit $beside_rc; its output above)"
  exit $beside_rc
fi
exit $rc

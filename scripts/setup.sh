#!/usr/bin/env bash
# Fresh machine -> .venv with every pinned dependency and the compiled ops installed.
# Idempotent: re-running reuses .venv and rebuilds the ops only when their sources changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
# Build and install the ops against the installed paddle (about 1.5 minutes on 2 cores).
if ! .venv/bin/python -m paddle_vtensor._installed_check 2>/dev/null; then
  echo "building paddle_vtensor ops (setup_ops.py install)..."
  .venv/bin/python setup_ops.py install > .venv/setup_ops.log 2>&1 || { tail -40 .venv/setup_ops.log; exit 1; }
  rm -rf build paddle_vtensor_ops.egg-info
fi
.venv/bin/python -m paddle_vtensor._installed_check

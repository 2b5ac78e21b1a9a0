#!/usr/bin/env bash
# Fresh machine -> a virtual environment with every pinned dependency and paddle_vtensor installed
# with `pip install --no-build-isolation .` (its ops compiled against that environment's paddle).
#
#   bash scripts/setup.sh              # .venv: paddle 3.3.1 + PaddleNLP 2.8.1 (requirements.txt)
#   bash scripts/setup.sh paddlenlp3   # .venv-paddlenlp3: paddle 3.3.1 + PaddleNLP 3.0.0b4
#
# Idempotent: re-running reuses the environment and rebuilds the ops only when their sources
# changed (the built library is kept in build/ops/<source digest>/, so a second environment with the
# same paddle and Python compiles nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
case "${1:-}" in
  "") VENV=.venv; REQ=requirements.txt; CON=constraints.txt ;;
  paddlenlp3) VENV=.venv-paddlenlp3; REQ=requirements-paddlenlp3.txt; CON=constraints-paddlenlp3.txt ;;
  *) echo "usage: bash scripts/setup.sh [paddlenlp3]" >&2; exit 2 ;;
esac
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# (Not --no-compile: where PYTHONDONTWRITEBYTECODE is set, as on CI, every process would then compile paddle's
# modules again; pytest took 724 s against 461.)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" -c "$CON"
# Build the ops against the installed paddle and install the package (about 4 minutes on 2 cores
# the first time).
if ! "$VENV/bin/python" -m paddle_vtensor._installed_check > /dev/null 2>&1; then
  echo "building and installing paddle_vtensor into $VENV (pip install --no-build-isolation .)..."
  "$VENV/bin/python" -m pip install --disable-pip-version-check --no-build-isolation --no-deps . \
    > "$VENV/pip_install.log" 2>&1 || { tail -40 "$VENV/pip_install.log"; exit 1; }
fi
"$VENV/bin/python" -m paddle_vtensor._installed_check

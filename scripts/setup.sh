#!/usr/bin/env bash
# Installs commscope and what it needs into the current Python environment.
# torch: a torch that is already importable is kept as it is; only when none is found do we install
# torch==2.13.0 (a CPU build where a local wheel exists; an unpinned torch would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "commscope setup: no torch found, installing torch==2.13.0"
  "$PY" -m pip install -q "torch==2.13.0"
fi
extras=${1:-}
"$PY" -m pip install -q -e ".${extras}"

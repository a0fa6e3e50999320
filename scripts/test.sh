#!/usr/bin/env bash
# Installs commscope with its test extras, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "[test,hta]"
python3 -m pytest -q "$@"

#!/usr/bin/env bash
# The main job on the embedded default: 8 CPU ranks with gloo, tiny preset; then the HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
commscope run --nproc 8 --out runs/demo --overwrite  # replaces the run of an earlier demo, nothing else
commscope report runs/demo -o runs/demo-report.html  # the report never writes into its input

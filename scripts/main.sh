#!/usr/bin/env bash
# The main job in its own environment: the default sweep, modelled on the CPU, run headless
# through the three notebooks (papermill). Writes results/default/ (executed notebooks,
# figures as PNG + SVG, tables) and prints where they are and a three-line summary.
# Extra arguments go to the runner, e.g. --run-name mine; another parameter file:
#   .venv/bin/python scripts/run_notebooks.py notebooks/params/h200-measure.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh "notebooks"
.venv/bin/python scripts/run_notebooks.py notebooks/params/default.yaml "$@"

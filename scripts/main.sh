#!/usr/bin/env bash
# The main job in its own environment: the default frontier grid, modelled on the CPU.
# Writes results/frontier/frontier.csv and prints a summary table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh "notebooks"
.venv/bin/indexer-lab frontier --out results/frontier/frontier.csv "$@"

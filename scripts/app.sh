#!/usr/bin/env bash
# The dashboards as a web app in its own environment: Voilà serves notebooks/app.ipynb with no
# code shown, on http://127.0.0.1:8866/ unless told otherwise; Ctrl-C stops it.
#   bash scripts/app.sh [--port N] [--host ADDRESS]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh "notebooks"
exec .venv/bin/python -m indexer_lib app "$@"

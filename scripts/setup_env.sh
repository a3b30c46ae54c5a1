#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv and install into it.
# Usage: scripts/setup_env.sh EXTRAS   (e.g. "test" or "notebooks,test")
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
python3 -m venv .venv
# the CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extras}]"

#!/usr/bin/env bash
# The whole test suite in its own environment: bash scripts/test.sh [pytest args]
set -uo pipefail
cd "$(dirname "$0")/.."
# a fresh run puts about 4 GB under the clone (.venv, .venv-engines); say so before pip fails on it
free_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
if [ "${free_kb:-0}" -lt $((5 * 1024 * 1024)) ]; then
    echo "test.sh: $((free_kb / 1024)) MiB free under $(pwd); a fresh run needs about 4 GB" >&2
fi
bash scripts/setup_env.sh "test,notebooks,cluster" || exit 1
# Debian's chromium for tests/browser (playwright comes with the test extra)
bash scripts/install_browser.sh || exit 1
# vLLM's own scheduler (about a minute): tests/test_vllm_scheduler.py holds the simulator to it
bash scripts/install_vllm.sh || exit 1
# the engines' own code (vLLM 0.15.1 to 0.32.0 as overlays on .venv, SGLang releases; about a
# minute and a half, 0.7 GB): tests/test_engines.py and tests/test_replay.py hold the model to it
bash scripts/install_engines.sh || exit 1
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: failing on purpose" >&2
    exit 1
fi
exit "$rc"

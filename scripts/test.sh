#!/usr/bin/env bash
# The whole test suite in its own environment: bash scripts/test.sh [pytest args]
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh "test,notebooks,cluster" || exit 1
# Debian's chromium for tests/browser (playwright comes with the test extra)
bash scripts/install_browser.sh || exit 1
# vLLM's own scheduler (about a minute): tests/test_vllm_scheduler.py holds the simulator to it
bash scripts/install_vllm.sh || exit 1
# the engines' own chunkers and budget code (vLLM 0.15.1, 0.19.0; SGLang 0.5.23; about two
# minutes): tests/test_engines.py holds the engine profiles to them
bash scripts/install_engines.sh || exit 1
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: failing on purpose" >&2
    exit 1
fi
exit "$rc"

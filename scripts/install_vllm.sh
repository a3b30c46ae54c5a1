#!/usr/bin/env bash
# vLLM's V1 scheduler for the `vllm` workload source, installed into .venv (or $PYTHON's
# environment) next to the CPU build of torch: bash scripts/install_vllm.sh
#
# vllm's wheel pins torch==2.14.0 and CUDA packages, so it goes in with --no-deps, and so
# does xgrammar (its dependencies want triton); the `vllm` extra of pyproject.toml holds
# what the scheduler's imports need.  No compiled vLLM extension is used: the warning
# "Failed to import from vllm._C" is expected.  Verified with vllm 0.33.0, torch 2.13.0+cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION=0.33.0
XGRAMMAR_VERSION=0.2.8
PY="${PYTHON:-.venv/bin/python}"
pip=("$PY" -m pip install -q --disable-pip-version-check)
start=$(date +%s)
if ! "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm') != '$VLLM_VERSION')" 2>/dev/null; then
    "${pip[@]}" --no-deps "vllm==$VLLM_VERSION" "xgrammar==$XGRAMMAR_VERSION"
fi
"${pip[@]}" -e ".[vllm]"
# the import the workload source makes, and torch left as it was
"$PY" - <<'PY'
import warnings
warnings.simplefilter("ignore")
import importlib.metadata as m
import torch
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: F401
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: F401
print(f"vllm {m.version('vllm')} scheduler importable next to torch {torch.__version__}")
PY
echo "install_vllm.sh: done in $(( $(date +%s) - start )) s"

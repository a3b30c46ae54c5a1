#!/usr/bin/env bash
# The one-shot H200 measurement (indexer_lib/cli/devicecheck/), one command:
#
#   bash scripts/h200_check.sh              # on the H200: wheels from .whl/ if present, else the installed deep_gemm
#   bash scripts/h200_check.sh --dry-run    # anywhere: reference backend on the CPU, tiny shapes
#
# Results: h200_check.json (provenance, stage status) and one CSV per stage under $OUT
# (the device tool's folder) or results/h200_check/; a short table is printed last.
# Ends within H200_CHECK_SECONDS (default 450 s) whatever happens: each stage is bounded
# and the JSON is rewritten after each stage, so a run cut short keeps what it measured.
# Extra arguments go to the Python module (--stages, --seed, --total-seconds, --backend).
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0
for a in "$@"; do [ "$a" = "--dry-run" ] && dry=1; done

# the interpreter: the project's venv for a dry run here, else the machine's python3 (torch there)
if [ -n "${PYTHON:-}" ]; then py="$PYTHON"
elif [ "$dry" = 1 ] && [ -x .venv/bin/python ]; then py=.venv/bin/python
else py=python3; fi

export H200_CHECK_COMMAND="bash scripts/h200_check.sh $*"
export INDEXER_LAB_GIT_SHA="${INDEXER_LAB_GIT_SHA:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"  # pass it where .git did not travel
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the package, without installing it

if [ "$dry" = 0 ]; then
    export DEEPGEMM_SOURCE="installed"
    if ls .whl/*.whl >/dev/null 2>&1; then
        # carried wheels (sgl-deep-gemm + apache-tvm-ffi), installed beside the machine's torch
        "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl || { echo "h200_check: installing .whl/*.whl failed" >&2; exit 1; }
        export PYTHONPATH="$PYTHONPATH:/tmp/site"
        DEEPGEMM_SOURCE="wheels: $(cd .whl && ls *.whl | tr '\n' ' ')"
    fi
    if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null 2>&1; then
        export CUDA_HOME="$(dirname "$(dirname "$(command -v nvcc)")")"
    fi
    # the prebuilt _C.so (linked against libtorch, libcudart.so.13, libtvm_ffi.so) must load with
    # this torch; the wheel ships no csrc/, so it cannot be rebuilt here: record why and go on
    # (the Python module then reports "no backend" with the error in h200_check.json)
    log="${OUT:-results/h200_check}/deep_gemm_import.log"
    mkdir -p "$(dirname "$log")"
    if ! timeout 120 "$py" -c "import torch, deep_gemm; print('deep_gemm', deep_gemm.__version__, deep_gemm.__file__)" >"$log" 2>&1; then
        echo "h200_check: import deep_gemm failed (see $log): $(tail -n 3 "$log")" >&2
        DEEPGEMM_SOURCE="$DEEPGEMM_SOURCE; import failed"
    else
        rm -f "$log"
    fi
    export DEEPGEMM_SOURCE
fi

timeout --signal=INT --kill-after=15 "${H200_CHECK_SECONDS:-450}" "$py" -m indexer_lib.cli.devicecheck "$@"

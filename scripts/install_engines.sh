#!/usr/bin/env bash
# The engines' own code for the differential tests (tests/test_engines.py) and the engine
# replay (tests/test_replay.py), each release in its own place under .venv-engines/:
#
#   vllm-X.Y.Z/     an overlay on the project's .venv (torch, the CPU build): the release's
#                   unpacked wheel in site/, run by bin/python, a wrapper that puts site/ (and,
#                   for the releases that want transformers below 5, the shared deps-tf4/) in
#                   front of .venv's packages.  No second torch.  The wheel's compiled CUDA
#                   extensions (*.so under vllm/) are left out: they cannot load without CUDA
#                   (vLLM imports them in try/except either way), and they are most of its size
#   deps-tf4/       transformers below 5 (as 0.15.1-0.20.0 declare), gguf and openai-harmony,
#                   what those releases' indexer modules import beyond .venv's packages
#   sglang-X.Y.Z/   the release's wheel, unpacked: its budget and chunk code is loaded from the
#                   files (no triton, no GPU kernels); 0.5.23 for the DSA indexer and every era of
#                   DeepSeek-V4's C4 indexer (0.5.12, 0.5.14, 0.5.15, 0.5.17, 0.5.20, 0.5.21, 0.5.22)
#
# vLLM 0.33.0 is the project's own (.venv, scripts/install_vllm.sh, which runs first).
# Idempotent: what already imports is kept.
#   bash scripts/install_engines.sh [vllm-0.15.1 vllm-0.19.0 vllm-0.20.0 vllm-0.30.0 vllm-0.32.0 sglang-0.5.23 ...]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=.venv-engines
BASE="$(pwd)/.venv/bin/python"
DEPS_TF4="$(pwd)/$ROOT/deps-tf4"
TF4_PACKAGES=("transformers>=4.56.0,<5" gguf openai-harmony)
# what 0.15.1's scheduler imports beyond those (its structured-output manager), without their own
# dependencies (all present already): the seed release's own scheduler runs in the tests
SCHEDULER_PACKAGES=("mistral_common==1.8.8" pydantic-extra-types pycountry tiktoken diskcache)
TARGETS=("$@"); [ ${#TARGETS[@]} -gt 0 ] || TARGETS=(vllm-0.15.1 vllm-0.19.0 vllm-0.20.0 vllm-0.30.0 vllm-0.32.0 sglang-0.5.23
    sglang-0.5.12 sglang-0.5.14 sglang-0.5.15 sglang-0.5.17 sglang-0.5.20 sglang-0.5.21 sglang-0.5.22)
# the releases whose overlay also takes deps-tf4 (found by importing their indexer module)
declare -A WANTS_TF4=([0.15.1]=1 [0.19.0]=1 [0.20.0]=1)
quiet() {  # pip's resolver complains that vllm wants another torch: expected with --no-deps
    local rc
    set +e
    "$@" 2>&1 | grep -v -e "is ignored: it is neither" -e "dependency resolver does not currently" \
        -e "^vllm [0-9.]* requires " -e "^xgrammar [0-9.]* requires " -e "already exists. Specify --upgrade"
    rc=${PIPESTATUS[0]}
    set -e
    return "$rc"
}
vllm_ready() {  # $1 python, $2 release
    "$1" - "$2" >/dev/null 2>&1 <<'PY'
import importlib.metadata as m, sys, warnings
warnings.simplefilter("ignore")
assert m.version("vllm") == sys.argv[1]
import vllm.v1.attention.backends.mla.indexer  # noqa: F401
import vllm.v1.core.sched.scheduler  # noqa: F401
PY
}
[ -x "$BASE" ] || { echo "install_engines: needs the project's .venv first (scripts/setup_env.sh)" >&2; exit 1; }
mkdir -p "$ROOT"
for target in "${TARGETS[@]}"; do
    start=$SECONDS
    case "$target" in
        vllm-*)
            release=${target#vllm-}; venv="$ROOT/$target"; py="$venv/bin/python"
            if [ -x "$py" ] && vllm_ready "$py" "$release"; then echo "$target: ready"; continue; fi
            path="$(pwd)/$venv/site"
            if [ -n "${WANTS_TF4[$release]+set}" ]; then
                if [ ! -f "$DEPS_TF4/.complete" ]; then
                    rm -rf "$DEPS_TF4"
                    quiet "$BASE" -m pip install -q --disable-pip-version-check --no-cache-dir \
                        --target "$DEPS_TF4" "${TF4_PACKAGES[@]}"
                    touch "$DEPS_TF4/.complete"
                fi
                if [ ! -f "$DEPS_TF4/.scheduler" ]; then
                    quiet "$BASE" -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps \
                        --target "$DEPS_TF4" "${SCHEDULER_PACKAGES[@]}"
                    touch "$DEPS_TF4/.scheduler"
                fi
                path="$path:$DEPS_TF4"
            fi
            rm -rf "$venv" && mkdir -p "$venv/bin" "$venv/site" "$venv/wheel"
            quiet "$BASE" -m pip download -q --disable-pip-version-check --no-cache-dir --no-deps \
                -d "$venv/wheel" "vllm==$release"
            "$BASE" -m zipfile -e "$venv"/wheel/vllm-*.whl "$venv/site"
            rm -rf "$venv/wheel"
            find "$venv/site/vllm" -name "*.so" -delete
            printf '#!/bin/sh\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec "%s" "$@"\n' \
                "$path" "$BASE" > "$py"
            chmod +x "$py"
            vllm_ready "$py" "$release" || { echo "$target: vllm $release does not import" >&2; exit 1; }
            ;;
        sglang-*)
            release=${target#sglang-}; dir="$ROOT/$target"
            if [ -f "$dir/src/sglang/srt/environ.py" ]; then
                echo "$target: ready"; continue
            fi
            rm -rf "$dir" && mkdir -p "$dir/wheel"
            quiet "$BASE" -m pip download -q --disable-pip-version-check --no-cache-dir --no-deps \
                -d "$dir/wheel" "sglang==$release"
            "$BASE" -m zipfile -e "$dir"/wheel/sglang-*.whl "$dir/src"
            rm -rf "$dir/wheel"
            # what no test reads: the diffusion server, the release's own tests and benchmarks
            rm -rf "$dir/src/sglang/multimodal_gen" "$dir/src/sglang/test" "$dir/src/sglang/benchmark"
            ;;
        *) echo "install_engines: unknown target $target (vllm-X.Y.Z or sglang-X.Y.Z)" >&2; exit 2 ;;
    esac
    echo "$target: installed in $((SECONDS - start)) s ($(du -sh "$ROOT/$target" | cut -f1))"
done

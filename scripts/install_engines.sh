#!/usr/bin/env bash
# The engines' own code for the differential tests (tests/test_engines.py), each release in
# its own place under .venv-engines/:
#
#   vllm-0.15.1/, vllm-0.19.0/   virtual environments: torch (the CPU build), the release with
#                                --no-deps, and the few pure-Python packages its indexer module
#                                imports (its chunker runs there, called by tests/engine_oracles/)
#   vllm-0.20.0/, vllm-0.30.0/   overlays, for the engine replay (tests/test_replay.py): the
#                                release's unpacked wheel and the packages it adds, in front of
#                                another environment's (0.19.0's; the project's .venv with 0.33.0),
#                                run by bin/python, a wrapper that sets PYTHONPATH (no second torch)
#   sglang-0.5.23/               the release's wheel, unpacked: its budget and chunk code is
#                                loaded from the files (no triton, no GPU kernels)
#
# vLLM 0.33.0 is the project's own (.venv, scripts/install_vllm.sh).  Idempotent: what already
# imports is kept.  bash scripts/install_engines.sh [vllm-0.15.1 vllm-0.19.0 sglang-0.5.23]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=.venv-engines
TORCH=torch==2.13.0  # the CPU wheel on disk; an unpinned torch pulls a CUDA build
# what vllm.v1.attention.backends.mla.indexer imports in 0.15.1 and 0.19.0 (found by trying);
# transformers below 5, as both releases declare
VLLM_DEPS=(numpy packaging pydantic regex psutil cbor2 "transformers>=4.56.0,<5" gguf aiohttp pyzmq)
TARGETS=("$@"); [ ${#TARGETS[@]} -gt 0 ] || TARGETS=(vllm-0.15.1 vllm-0.19.0 vllm-0.20.0 vllm-0.30.0 sglang-0.5.23)
# overlays: the environment whose packages a release runs on, and what it needs besides them
declare -A OVERLAY_BASE=([0.20.0]="$ROOT/vllm-0.19.0/bin/python" [0.30.0]=".venv/bin/python")
declare -A OVERLAY_DEPS=([0.20.0]="openai-harmony openai" [0.30.0]="")
quiet() {  # pip's resolver complains that vllm wants another torch: expected with --no-deps
    local rc
    set +e
    "$@" 2>&1 | grep -v -e "is ignored: it is neither" -e "^vllm [0-9.]* requires " \
        -e "dependency resolver does not currently"
    rc=${PIPESTATUS[0]}
    set -e
    return "$rc"
}
vllm_ready() {  # $1 venv python, $2 release
    "$1" - "$2" >/dev/null 2>&1 <<'PY'
import importlib.metadata as m, sys, warnings
warnings.simplefilter("ignore")
assert m.version("vllm") == sys.argv[1]
import vllm.v1.attention.backends.mla.indexer  # noqa: F401
PY
}
mkdir -p "$ROOT"
for target in "${TARGETS[@]}"; do
    start=$SECONDS
    case "$target" in
        vllm-*)
            release=${target#vllm-}; venv="$ROOT/$target"; py="$venv/bin/python"
            if [ -x "$py" ] && vllm_ready "$py" "$release"; then echo "$target: ready"; continue; fi
            if [ -n "${OVERLAY_BASE[$release]+set}" ]; then
                base="$(pwd)/${OVERLAY_BASE[$release]}"
                [ -x "$base" ] || { echo "$target: needs $base first" >&2; exit 1; }
                rm -rf "$venv" && mkdir -p "$venv/bin" "$venv/site" "$venv/wheel"
                quiet "$base" -m pip download -q --disable-pip-version-check --no-deps \
                    -d "$venv/wheel" "vllm==$release"
                "$base" -m zipfile -e "$venv"/wheel/vllm-*.whl "$venv/site"
                rm -rf "$venv/wheel"
                deps=${OVERLAY_DEPS[$release]}
                [ -z "$deps" ] || quiet "$base" -m pip install -q --disable-pip-version-check \
                    --target "$venv/site" $deps
                site="$(pwd)/$venv/site"
                printf '#!/bin/sh\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec "%s" "$@"\n' \
                    "$site" "$base" > "$py"
                chmod +x "$py"
                vllm_ready "$py" "$release" || { echo "$target: vllm $release does not import" >&2; exit 1; }
                echo "$target: installed in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1), on $base)"
                continue
            fi
            [ -x "$py" ] || python3 -m venv "$venv"
            pip=("$py" -m pip install -q --disable-pip-version-check)
            quiet "${pip[@]}" "$TORCH"
            quiet "${pip[@]}" --no-deps "vllm==$release"
            quiet "${pip[@]}" "${VLLM_DEPS[@]}" "$TORCH"  # torch again, so nothing moves it
            vllm_ready "$py" "$release" || { echo "$target: vllm $release does not import" >&2; exit 1; }
            ;;
        sglang-*)
            release=${target#sglang-}; dir="$ROOT/$target"
            if [ -f "$dir/src/sglang/srt/layers/attention/mqa_logits_utils.py" ]; then
                echo "$target: ready"; continue
            fi
            rm -rf "$dir" && mkdir -p "$dir/wheel"
            py=python3; [ -x .venv/bin/python ] && py=.venv/bin/python
            quiet "$py" -m pip download -q --disable-pip-version-check --no-deps \
                -d "$dir/wheel" "sglang==$release"
            "$py" -m zipfile -e "$dir"/wheel/sglang-*.whl "$dir/src"
            rm -rf "$dir/wheel"
            ;;
        *) echo "install_engines: unknown target $target (vllm-X.Y.Z or sglang-X.Y.Z)" >&2; exit 2 ;;
    esac
    echo "$target: installed in $((SECONDS - start)) s ($(du -sh "$ROOT/$target" | cut -f1))"
done

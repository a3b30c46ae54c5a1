"""Where a device-check run happened: date, command, git sha, GPU, driver, torch, DeepGEMM."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess

import torch

from ...sweep.results import git_state


def _run(cmd: list[str], timeout: float = 10) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance(backend, args_command: str) -> dict:
    sha, dirty = git_state()
    sha = os.environ.get("INDEXER_LAB_GIT_SHA") or sha
    info = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": os.environ.get("H200_CHECK_COMMAND") or args_command,
        "git_sha": sha or "unknown",
        "git_dirty": dirty,
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "backend": backend.name,
        "deepgemm_rules": backend.deepgemm_version,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update({
            "gpu": props.name,
            "gpu_capability": f"{props.major}.{props.minor}",
            "gpu_total_bytes": props.total_memory,
            "gpu_multiprocessors": props.multi_processor_count,
            "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        })
    else:
        info.update({"gpu": None, "driver": None})
    dg_info = getattr(backend, "info", None)
    if dg_info is not None:
        info["deepgemm"] = dg_info.to_json()
        info["deepgemm"]["source"] = os.environ.get("DEEPGEMM_SOURCE", "installed")
    return info

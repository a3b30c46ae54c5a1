"""Model and GPU presets: the shapes the indexer works with.

Numbers come from the models' public configs (docs/design.md#the-indexer-and-its-logits); capacity is
what torch reports as ``total_memory`` for an H200 (139.8 GiB).
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from .checks import BadValue

GIB = 2**30
MIB = 2**20
# fp32 scale stored next to each token's fp8 key in the gather workspace
K_SCALE_BYTES = 4


@dataclass(frozen=True)
class ModelPreset:
    name: str
    index_heads: int  # H
    head_dim: int  # D
    topk: int
    kv_block: int  # tokens per KV cache block (prefix-cache granularity)
    max_model_len: int

    @property
    def k_bytes_per_token(self) -> int:
        """Bytes one token occupies in the K gather workspace: fp8 values + fp32 scale."""
        return self.head_dim + K_SCALE_BYTES

    @property
    def default_workspace_tokens(self) -> int:
        """vLLM sizes the gather workspace at 40 x max_model_len tokens."""
        return 40 * self.max_model_len


MODELS: dict[str, ModelPreset] = {
    "deepseek-v3.2": ModelPreset("deepseek-v3.2", 64, 128, 2048, 64, 163_840),
    "glm-5": ModelPreset("glm-5", 32, 128, 2048, 64, 202_752),
}


@dataclass(frozen=True)
class GpuPreset:
    name: str
    capacity_bytes: int


GPUS: dict[str, GpuPreset] = {
    # torch.cuda.get_device_properties(0).total_memory on an H200 reads 139.8 GiB ("GPU 1 has a
    # total capacity of 139.81 GiB", vllm-project/vllm#35488)
    "h200": GpuPreset("h200", round(139.8 * GIB)),
    # a B200-class GPU as PyTorch's OOM message prints it: "total capacity of 178.35 GiB"
    # (sgl-project/sglang#35759)
    "b200": GpuPreset("b200", round(178.35 * GIB)),
}


def get_model(name: str) -> ModelPreset:
    """A model's preset by name; case and spaces do not matter (``GLM-5`` is ``glm-5``)."""
    key = str(name).strip().lower()
    if key in MODELS:
        return MODELS[key]
    near = difflib.get_close_matches(key, list(MODELS), n=1)
    hint = f" (nearest: {near[0]})" if near else ""
    raise BadValue("model", f"unknown model {name!r}: must be one of {', '.join(sorted(MODELS))}{hint}")


def get_gpu(name: str) -> GpuPreset:
    try:
        return GPUS[str(name).strip().lower()]
    except KeyError:
        raise BadValue("gpu", f"unknown GPU {name!r}: must be one of {', '.join(sorted(GPUS))}") from None


def free_bytes_from_gib(free_gib: float) -> int:
    """'Free bytes for the indexer', stated directly in GiB (2^30 bytes).

    This is memory free at run time, after the engine has loaded weights, sized
    its KV cache and reserved its persistent indexer buffers (as vLLM does).
    """
    if not isinstance(free_gib, (int, float)) or isinstance(free_gib, bool) or not free_gib >= 0:
        raise BadValue("free_gib", f"free memory {free_gib!r} GiB: must be a number >= 0")
    if not math.isfinite(free_gib):
        raise BadValue("free_gib", f"free memory {free_gib!r} GiB: must be a finite number")
    return int(free_gib * GIB)


def budget_bytes_from_mb(budget_mb: float) -> int:
    """A budget named in MB as vLLM names it (MiB, 2^20 bytes), in whole bytes."""
    if isinstance(budget_mb, bool) or not isinstance(budget_mb, (int, float)):
        raise BadValue("budget_mb", f"budget {budget_mb!r} MB: must be a number > 0")
    if not budget_mb > 0:
        raise BadValue("budget_mb", f"budget {budget_mb!r} MB: must be > 0")
    if not math.isfinite(budget_mb):
        raise BadValue("budget_mb", f"budget {budget_mb!r} MB: must be a finite number")
    return max(1, round(budget_mb * MIB))

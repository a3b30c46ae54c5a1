"""Model and GPU presets: the shapes the indexer works with.

The models are data (``data/models/``, one file per model, every fact with its source and
whether it was seen there): a model is a list of indexer layer kinds
(docs/design.md#models).  So are the GPUs (``data/gpus/``): capacity is what torch reports as
``total_memory`` (docs/design.md#gpus).
"""
from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import ClassVar

from .checks import BadValue, unknown_name
from .refdata import data_path

GIB = 2**30
MIB = 2**20
# fp32 scale stored next to each token's fp8 key in the gather workspace
K_SCALE_BYTES = 4


@dataclass(frozen=True)
class LayerKind:
    """A group of a model's layers whose indexer has one geometry (``data/models/``)."""

    name: str
    index_heads: int  # 0: the layers reuse another layer's selection and compute no indexer
    head_dim: int | None
    topk: int  # tokens
    compress_ratio: int | None  # tokens per K entry the indexer scores (1: uncompressed)
    layers: tuple[int, ...]
    indexer_layers: int  # of ``layers``, those that compute an indexer
    reuse_layers: int  # of ``layers``, those that reuse another layer's selection
    candidates: int | None = None  # a sparse consumer scores this many candidate positions
    pool: int | None = None  # tokens pooled into one K entry (GLM-5.3-Flash's kpool, QSA's blocks)
    has_weights: bool = True  # per-head weights (QSA's indexer has none)
    unverified: tuple[str, ...] = ()  # facts not seen at their source
    # each request's last this many prefill rows reach the kind's layers (DeepSeek-V4.1's layers
    # from the last KV source on, under the engines' decoder SWA bounded replay); None: every row
    replay_rows: int | None = None

    @property
    def computes_indexer(self) -> bool:
        return self.indexer_layers > 0 and self.index_heads > 0

    @property
    def pooled(self) -> bool:
        """Whether its K entries are pools of ``pool`` tokens scored with per-head weights
        (GLM-5.3-Flash's kpool): the indexer selects ``topk // pool`` pools and the engines skip or
        size its logits by tokens.  QSA's blocks (``qsa``) have paths of their own."""
        return self.pool is not None and self.pool > 1 and not self.qsa

    @property
    def qsa(self) -> bool:
        """Qwen's QSA indexer (Qwen3.8-Flash-Next): weight-free, every query row scored against K
        compressed ``compress_ratio`` tokens to a block (``seq_len // ratio`` blocks, a row at
        position p scoring ``(p + 1) // ratio``); planned on the releases whose QSA path is read
        (``EngineProfile.qsa_path``)."""
        return (self.name == "qsa" and not self.has_weights and isinstance(self.compress_ratio, int)
                and self.compress_ratio >= 1 and self.pool in (None, self.compress_ratio))

    @property
    def plannable(self) -> bool:
        """Whether the planners model it: every query row scored densely against its K, either
        uncompressed or compressed (DeepSeek-V4's C4, GLM-5.3-Flash's kpool, whose pools are its
        compressed entries: ``seq_len // ratio`` entries, a row at position p scoring
        ``(p + 1) // ratio``), with per-head weights.  Which releases model a pooled indexer's path
        is the engine profile's (``pooled_kv``).  A candidate consumer (DeepSeek-V4.1) is plannable
        as the releases read compute it on an H200: dense logits over its whole K, masked to the
        candidates afterwards; the releases whose path for it is not read are refused by
        ``PlanSettings``.  QSA's indexer (``qsa``) is plannable on the releases whose path for it
        is read."""
        if self.qsa and self.candidates is None:
            return True
        pool_ok = self.pool is None or self.pool == self.compress_ratio
        return (isinstance(self.compress_ratio, int) and self.compress_ratio >= 1
                and pool_ok and self.has_weights)


@dataclass(frozen=True)
class ModelPreset:
    name: str
    index_heads: int  # H of the kind that computes the indexer
    head_dim: int  # D
    topk: int
    kv_block: int  # tokens per KV cache block (prefix-cache granularity)
    max_model_len: int
    layer_kinds: tuple[LayerKind, ...] = ()
    num_layers: int | None = None
    what: str = ""
    unverified: tuple[str, ...] = ()  # the model's facts (and its kinds', as kind.fact) not seen at their source

    @property
    def k_bytes_per_token(self) -> int:
        """Bytes one token occupies in the K gather workspace: fp8 values + fp32 scale (QSA's
        bf16 index keys: 2 bytes a value, no scale)."""
        if self.qsa:
            return 2 * self.head_dim
        return self.head_dim + K_SCALE_BYTES

    # vLLM sizes the gather workspace at 40 x max_model_len tokens (planned without an engine release)
    default_workspace_factor: ClassVar[int] = 40

    @property
    def default_workspace_tokens(self) -> int:
        return self.default_workspace_factor * self.max_model_len

    @cached_property  # every plan asks (``PlanSettings.view``): found once per model
    def indexing_kinds(self) -> tuple[LayerKind, ...]:
        """The layer kinds that compute an indexer (the others reuse a selection)."""
        return _indexing(self.layer_kinds)

    @property
    def indexer_layers(self) -> int:
        """Layers that compute an indexer: a step's indexer work is this many layers' worth."""
        return sum(k.indexer_layers for k in self.indexing_kinds)

    @property
    def plannable(self) -> bool:
        return all(k.plannable for k in self.indexing_kinds)

    @cached_property
    def kv_ratio(self) -> int:
        """Tokens per K entry its indexer scores (1: uncompressed; DeepSeek-V4: 4)."""
        return self.main_kind.compress_ratio if self.layer_kinds else 1

    @cached_property
    def pooled(self) -> bool:
        """Whether its indexer scores pooled K (GLM-5.3-Flash's kpool): see ``LayerKind.pooled``."""
        return self.main_kind.pooled if self.layer_kinds else False

    @property
    def qsa(self) -> bool:
        """Whether its indexer is QSA's (``LayerKind.qsa``)."""
        return bool(self.layer_kinds) and self.main_kind.qsa

    @cached_property
    def main_kind(self) -> LayerKind:
        """The kind most of its indexer layers are (the one a plan is made for)."""
        return _main_kind(self.indexing_kinds)

    @property
    def multi_kind(self) -> bool:
        """Whether its kinds that compute an indexer see a step differently (DeepSeek-V4.1: K
        compressed by 2 on every row, uncompressed K on each request's last rows): a plan is made
        per kind and the step's peak is the worst of them (``PlanSettings.kind``)."""
        return len({_view_key(k) for k in self.indexing_kinds}) > 1

    @property
    def compressed(self) -> bool:
        """Whether one of its kinds that compute an indexer scores compressed K."""
        return any(k.compress_ratio != 1 for k in self.indexing_kinds)

    @property
    def has_candidates(self) -> bool:
        """Whether a kind scores a fixed candidate set (DeepSeek-V4.1's two-level selection)."""
        return any(k.candidates is not None for k in self.indexing_kinds)

    @property
    def c4(self) -> bool:
        """Whether its indexer is DeepSeek-V4's C4 one: compressed K, not pooled, not QSA's, no
        candidate set."""
        return self.kv_ratio != 1 and not (self.pooled or self.qsa or self.has_candidates)

    def for_kind(self, name: str) -> "ModelPreset":
        """The model narrowed to one kind that computes an indexer: its shapes, its K ratio, its rows
        (the same name, so every message names the model)."""
        for k in self.indexing_kinds:
            if k.name == name:
                return ModelPreset(self.name, k.index_heads, k.head_dim, k.topk, self.kv_block, self.max_model_len,
                                   (k,), self.num_layers, self.what, self.unverified)
        names = ", ".join(k.name for k in self.indexing_kinds)
        raise BadValue("kind", f"{self.name} has no layer kind {name!r} that computes an indexer: one of {names}")


def _view_key(k: LayerKind) -> tuple:
    """What a plan of the kind depends on: its geometry, its K ratio and its rows."""
    return (k.index_heads, k.head_dim, k.topk, k.compress_ratio, k.replay_rows)


def _indexing(kinds) -> tuple[LayerKind, ...]:
    return tuple(k for k in kinds if k.computes_indexer)


def _main_kind(indexing) -> LayerKind:
    return max(indexing, key=lambda k: k.indexer_layers)


def _value(facts: dict, name: str, default=None):
    fact = facts.get(name)
    return default if fact is None else fact["value"]


def _unverified(facts: dict, prefix: str = "") -> tuple[str, ...]:
    return tuple(prefix + name for name, fact in facts.items() if not fact.get("verified", False))


def _layer_kind(doc: dict, model_facts: dict | None = None) -> LayerKind:
    f = doc["facts"]
    layers = tuple(_value(f, "layers", ()))
    replay = None
    mf = model_facts or {}
    sources, window = _value(mf, "kv_source_layer_ids"), _value(mf, "sliding_window")
    if sources and window and layers and min(layers) >= max(sources):
        replay = int(window)  # the layers from the last KV source on run on each request's last rows
    return LayerKind(name=doc["name"], index_heads=int(_value(f, "index_heads", 0) or 0),
                     head_dim=_value(f, "head_dim"), topk=_topk_tokens(_value(f, "topk")),
                     compress_ratio=_value(f, "compress_ratio"), layers=layers,
                     indexer_layers=int(_value(f, "indexer_layers", len(layers))),
                     reuse_layers=int(_value(f, "reuse_layers", 0)), candidates=_value(f, "candidates"),
                     pool=_value(f, "pool"), has_weights=_value(f, "has_weights", True) is not False,
                     unverified=_unverified(f), replay_rows=replay)


def _topk_tokens(value) -> int:
    """A top-k in tokens (pooled indexers give {'tokens': ..., 'pools': ...})."""
    return int(value["tokens"]) if isinstance(value, dict) else int(value)


def _documents(folder: str, what: str) -> list[tuple[Path, dict]]:
    """(path, parsed JSON) of every file of ``data/<folder>/``, in name order; one at least."""
    files = sorted(data_path(folder).glob("*.json"))
    if not files:
        raise FileNotFoundError(f"{data_path(folder)}: no {what} files (data/{folder}/*.json)")
    return [(path, json.loads(path.read_text())) for path in files]


@lru_cache(maxsize=None)
def _load_models() -> dict[str, ModelPreset]:
    """Every model of ``data/models/`` (one JSON file each, every fact with its source)."""
    models = {}
    for path, doc in _documents("models", "model"):
        kinds = tuple(_layer_kind(k, doc["facts"]) for k in doc["layer_kinds"])
        indexing = _indexing(kinds)
        if not indexing:
            raise ValueError(f"{path}: no layer kind computes an indexer")
        main = _main_kind(indexing)  # its shapes are the preset's
        facts = doc["facts"]
        unverified = _unverified(facts) + tuple(f"{k.name}.{u}" for k in kinds for u in k.unverified)
        models[doc["model"]] = ModelPreset(
            doc["model"], main.index_heads, main.head_dim, main.topk, int(_value(facts, "kv_block")),
            int(_value(facts, "max_model_len")), kinds, _value(facts, "num_hidden_layers"), doc.get("what", ""),
            unverified)
    return models


def known_models() -> dict[str, ModelPreset]:
    """Every model the project has data for, plannable or not."""
    return _load_models()


@dataclass(frozen=True)
class GpuPreset:
    """A GPU as the planners see it (``data/gpus/``, every fact with its source)."""

    name: str
    capacity_bytes: int  # what torch reports as total_memory (unified memory: the OS's RAM CUDA reports)
    sm_count: int | None = None  # SMs (CUs on ROCm)
    hbm_tbps: float | None = None  # memory bandwidth, TB/s
    arch: str = ""  # sm90, sm100, sm103, sm121, gfx950
    vendor: str = "nvidia"
    unified_memory: bool = False  # the GPU shares the host's memory (GB10)
    what: str = ""
    unverified: tuple[str, ...] = ()  # facts not seen at their source

    @property
    def cuda_family(self) -> int | None:
        """The CUDA capability family (90, 100, 120) as the engines test it
        (``is_device_capability_family``); None off CUDA."""
        if self.vendor != "nvidia" or not self.arch.startswith("sm"):
            return None
        return int(self.arch[2:]) // 10 * 10

    @property
    def cuda_major(self) -> int | None:
        """The compute capability's major (8, 9, 10, 12) as the engines' backends test it
        (``supports_compute_capability``); None off CUDA."""
        family = self.cuda_family
        return None if family is None else family // 10

    @property
    def rocm(self) -> bool:
        """An AMD GPU: no DeepGEMM, the engines call aiter (docs/design.md#rocm)."""
        return self.vendor == "amd"

    @property
    def capacity_gib(self) -> float:
        return self.capacity_bytes / GIB


@lru_cache(maxsize=None)
def _load_gpus() -> dict[str, GpuPreset]:
    """Every GPU of ``data/gpus/`` (one JSON file each, every fact with its source)."""
    gpus = {}
    for _, doc in _documents("gpus", "GPU"):
        f = doc["facts"]
        sms = _value(f, "sm_count")
        tbps = _value(f, "hbm_tbps")
        gpus[doc["gpu"]] = GpuPreset(doc["gpu"], int(_value(f, "capacity_bytes")),
                                     None if sms is None else int(sms), None if tbps is None else float(tbps),
                                     str(_value(f, "arch", "")), str(_value(f, "vendor", "nvidia")),
                                     bool(_value(f, "unified_memory", False)), doc.get("what", ""), _unverified(f))
    return gpus


GPUS: dict[str, GpuPreset] = _load_gpus()


# the models the planners model (every layer kind that computes an indexer scores uncompressed K
# with every query row); the others are known, and refused with the reason
MODELS: dict[str, ModelPreset] = {name: m for name, m in _load_models().items() if m.plannable}
# the model every subcommand of the command line and every grid plans without --model (the notebooks' too)
DEFAULT_MODEL = "glm-5"


def get_model(name: str) -> ModelPreset:
    """A model's preset by name; case and spaces do not matter (``GLM-5`` is ``glm-5``)."""
    key = str(name).strip().lower()
    if key in MODELS:
        return MODELS[key]
    known = known_models()
    if key in known:
        kinds = [k for k in known[key].indexing_kinds if not k.plannable]
        why = "; ".join(f"its {k.name} layers score " + (f"a fixed {k.candidates} candidates" if k.candidates
                                                          else f"K pooled {k.pool} tokens to an entry" if k.pool
                                                          else "without per-head weights")
                        for k in kinds)
        raise BadValue("model", f"model {name!r} is known (data/models/{key}.json) but not planned yet: {why}; "
                                f"planned: {', '.join(sorted(MODELS))}")
    # the nearest among every model of data/models/ (one not planned yet says why when named)
    raise unknown_name("model", "model", name, sorted(MODELS), near=difflib.get_close_matches(key, list(known), n=3))


# words a GPU's name carries that do not change which GPU it is: the vendor and product line, the
# board, the rack, the memory size and kind (``NVIDIA GB200 NVL72``, ``A100-SXM4-80GB``)
_NAME_NOISE = re.compile(r"nvidia|amd|instinct|blackwell|server edition|workstation edition|max-?q|superchip|"
                         r"hgx|dgx|nvl\d*|sxm\d*|pcie|oam|\d+\s*gb|hbm\d*e?|gddr\d*")


@lru_cache(maxsize=256)
def gpu_key(name: str) -> str:
    """A GPU's name as the lookup compares it: lower case, without the words of ``_NAME_NOISE`` and
    without spaces or punctuation (``GB200 NVL72``, ``gb-200`` and ``NVIDIA GB200`` are ``gb200``)."""
    return re.sub(r"[^a-z0-9]", "", _NAME_NOISE.sub("", str(name).strip().lower()))


@lru_cache(maxsize=None)
def _gpus_by_key() -> dict[str, str]:
    """Each GPU of ``GPUS`` by its ``gpu_key`` (read once: every plan and row looks its GPU up)."""
    return {gpu_key(n): n for n in GPUS}


def get_gpu(name: str | GpuPreset) -> GpuPreset:
    """A GPU's preset by name, as people and tools write it (``H200``, ``NVIDIA GB200 NVL72``,
    ``A100-SXM4-80GB``: ``gpu_key``); an unknown name is refused with the nearest known ones."""
    if isinstance(name, GpuPreset):
        return name
    by_key = _gpus_by_key()
    key = gpu_key(str(name))
    if key in by_key:
        return GPUS[by_key[key]]
    near = [by_key[k] for k in difflib.get_close_matches(key, list(by_key), n=3)] if key else []
    raise unknown_name("gpu", "GPU", name, sorted(GPUS), near=near, rule=f"one of {', '.join(sorted(GPUS))}")


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
        raise BadValue("budget_mb", f"budget {budget_mb!r} MiB: must be a number > 0")
    if not budget_mb > 0:
        raise BadValue("budget_mb", f"budget {budget_mb!r} MiB: must be > 0")
    if not math.isfinite(budget_mb):
        raise BadValue("budget_mb", f"budget {budget_mb!r} MiB: must be a finite number")
    return max(1, round(budget_mb * MIB))


def format_bytes(n: int) -> str:
    """Bytes as GiB from one GiB up, else as MiB."""
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB"


def check_within_gpu(name: str, nbytes: int, gpu: str | GpuPreset, said: str) -> int:
    """``nbytes`` (free memory read on the GPU, a logits budget), or BadValue where it is more than
    the GPU holds: no reading of free memory and no budget that can bind passes its capacity.
    ``said``: the value as the user gave it (``--free-gib 1000``)."""
    g = get_gpu(gpu)
    if nbytes > g.capacity_bytes:
        raise BadValue(name, f"{said}: more than the {g.name} holds ({g.capacity_gib:.1f} GiB); "
                             "no free memory or logits budget can pass the GPU's capacity")
    return nbytes

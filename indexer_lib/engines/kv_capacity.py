"""The KV cache a deployment has per GPU, derived from its checkpoint's weights and the KV bytes
each token takes (docs/design.md#kv-cache-capacity).

vLLM gives its KV cache what is left of ``gpu_memory_utilization`` of the GPU after the weights
and its profile run (activations, non-torch memory, CUDA graphs); SGLang what is left of
``mem_fraction_static`` after the weights.  Every layer caches the MLA latent and, where it
computes an indexer, the indexer's K; both caches share one block table, so the cache holds
``blocks x block`` tokens.  The facts are data (``data/checkpoints/``,
``data/kv_cache_rules.json``), each with its source; the term besides weights and KV that vLLM's
profile run takes is calibrated on one public deployment and named as an assumption wherever a
derived cache is shown.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache

from ..checks import BadValue
from ..refdata import data_path
from ..presets import GIB, get_gpu, get_model
from .budget import SGLANG_MEM_FRACTION_STATIC
from .profiles import EngineProfile, get_engine

KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8")


@dataclass(frozen=True)
class Checkpoint:
    """A model's weights and KV cache geometry as the engines load it (``data/checkpoints/``)."""

    name: str
    model: str
    weights_bytes: int  # over all ranks together
    kv_layers: int  # layers caching the MLA latent
    indexer_cache_layers: int  # of them, those caching the indexer's K
    mtp_layers: int  # more of both when speculative decoding runs the model's MTP layers
    kv_latent_dim: int
    unverified: tuple[str, ...] = ()
    sources: dict | None = None

    def bytes_per_token(self, mla_bytes: int, indexer_bytes: int, mtp: bool) -> int:
        extra = self.mtp_layers if mtp else 0
        return (self.kv_layers + extra) * mla_bytes + (self.indexer_cache_layers + extra) * indexer_bytes


@lru_cache(maxsize=None)
def _rules() -> dict:
    return json.loads(data_path("kv_cache_rules.json").read_text())["facts"]


@lru_cache(maxsize=None)
def checkpoints() -> dict[str, Checkpoint]:
    """Each model's default checkpoint, by model name."""
    out = {}
    for path in sorted(data_path("checkpoints").glob("*.json")):
        doc = json.loads(path.read_text())
        f = doc["facts"]
        values = {k: int(f[k]["value"]) for k in ("weights_bytes", "kv_layers", "indexer_cache_layers",
                                                   "mtp_layers", "kv_latent_dim")}
        unverified = tuple(k for k, v in f.items() if not v.get("verified", False))
        if doc.get("default"):
            out[doc["model"]] = Checkpoint(doc["checkpoint"], doc["model"], unverified=unverified,
                                           sources={k: v["source"] for k, v in f.items()}, **values)
    return out


@dataclass(frozen=True)
class KvCapacity:
    """A derived KV cache per GPU, with every term that went into it."""

    tokens: int
    blocks: int
    block_tokens: int
    engine: str
    checkpoint: str
    gpu: str
    tp: int
    setting: str  # "gpu_memory_utilization" (vLLM) or "mem_fraction_static" (SGLang)
    fraction: float
    total_bytes: int
    weights_bytes: int  # per GPU
    other_bytes: int  # vLLM's profile run besides the weights (assumed); 0 for SGLang
    kv_bytes: int
    bytes_per_token: int
    kv_cache_dtype: str
    mtp: bool
    assumptions: tuple[str, ...]

    def phrase(self) -> str:
        """The derivation in one line, for a summary."""
        other = f" - {self.other_bytes / GIB:.2f} GiB profile run (assumed)" if self.other_bytes else ""
        return (f"{self.tokens:,} tokens per GPU (derived: {self.setting} {self.fraction:g} x "
                f"{self.total_bytes / GIB:.2f} GiB - {self.weights_bytes / GIB:.2f} GiB of {self.checkpoint} "
                f"at TP {self.tp}{other} = {self.kv_bytes / GIB:.2f} GiB, {self.bytes_per_token:,} B per token "
                f"({self.kv_cache_dtype} cache{', MTP layer' if self.mtp else ''}), blocks of {self.block_tokens})")


def kv_bytes_per_token(model: str, kv_cache_dtype: str = "auto", mtp: bool = False) -> int | None:
    """The KV cache bytes one token takes per GPU on the model's default checkpoint (every layer's
    MLA latent and indexer K; ``mtp``: the MTP layers' too), None where no checkpoint is in
    ``data/checkpoints/``."""
    ckpt = checkpoints().get(get_model(model).name)
    if ckpt is None:
        return None
    rules = _rules()
    mla = int(rules["mla_bytes_per_token"]["value"][kv_cache_dtype])
    return ckpt.bytes_per_token(mla, int(rules["indexer_bytes_per_token"]["value"]), mtp)


def vllm_requested_bytes(capacity_bytes: int, gpu_memory_utilization: float) -> int:
    """The memory vLLM takes for everything it runs (weights, profile run, KV cache, CUDA graphs):
    ``ceil(total x gpu_memory_utilization)`` (vllm 0.33.0 v1/worker/utils.py:716-726,
    ``data/kv_cache_rules.json``: vllm_kv_bytes); the rest of the GPU is outside its share."""
    return math.ceil(capacity_bytes * gpu_memory_utilization)


def derive_kv_cache(model: str, engine: str | EngineProfile | None, gpu="h200", tp: int = 1,
                    fraction: float | None = None, kv_cache_dtype: str = "auto",
                    speculative_tokens: int = 0) -> KvCapacity:
    """The KV cache per GPU that ``engine`` gives ``model``'s default checkpoint on ``tp`` GPUs of
    ``gpu``: ``fraction`` is vLLM's --gpu-memory-utilization (default: the release's) or SGLang's
    --mem-fraction-static (default: about 0.9); with ``speculative_tokens`` the model's MTP layer
    caches too (MTP is taken as the drafter)."""
    profile, g, name = get_engine(engine), get_gpu(gpu), get_model(model).name
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise BadValue("kv_cache_dtype", f"kv_cache_dtype {kv_cache_dtype!r}: must be one of {', '.join(KV_CACHE_DTYPES)}")
    if tp < 1:
        raise BadValue("tp", f"tp {tp}: must be >= 1")
    ckpt = checkpoints().get(name)
    if ckpt is None:
        raise BadValue("kv_cache_tokens", f"kv_cache_tokens auto: no checkpoint of {name} in data/checkpoints/ "
                                          f"(derived for {', '.join(sorted(checkpoints()))}); give the engine's "
                                          "'GPU KV cache size' as --kv-cache-tokens N")
    rules = _rules()
    assumptions = [f"{ckpt.name}: {fact} not seen at its source" for fact in ckpt.unverified]
    if profile.engine == "vllm":
        setting = "gpu_memory_utilization"
        if fraction is None:
            fraction = profile.gpu_memory_utilization
            if fraction is None:
                raise BadValue("kv_cache_tokens", f"kv_cache_tokens auto: {profile.name}'s default "
                                                  "gpu_memory_utilization is not read; give --gpu-memory-utilization")
        other = int(rules["vllm_other_bytes"]["value"])
        assumptions.append("vLLM's profile run (activations, non-torch memory, CUDA graphs) takes "
                           f"{other / GIB:.2f} GiB, as on vllm-project/recipes#893's deployment")
        requested = vllm_requested_bytes(g.capacity_bytes, fraction)
    elif profile.engine == "sglang":
        setting = "mem_fraction_static"
        fraction = SGLANG_MEM_FRACTION_STATIC if fraction is None else fraction
        other = 0
        requested = int(g.capacity_bytes * fraction)  # free before the weights taken as the total
    else:
        raise BadValue("kv_cache_tokens", f"kv_cache_tokens auto: {profile.name}'s KV cache sizing is not read; "
                                          "give its KV cache in tokens as --kv-cache-tokens N")
    if not 0 < fraction <= 1:
        raise BadValue(setting, f"{setting} {fraction!r}: must be in (0, 1]")
    weights = -(-ckpt.weights_bytes // tp)  # split evenly over the TP ranks (assumed)
    if tp > 1:
        assumptions.append(f"the weights split evenly over {tp} TP ranks")
    mtp = speculative_tokens > 0
    if mtp:
        assumptions.append("the drafter is the model's MTP layer, which caches its KV too")
    per_token = kv_bytes_per_token(name, kv_cache_dtype, mtp)
    block = int(rules["block_tokens"]["value"])
    kv = requested - weights - other
    blocks = kv // (block * per_token) if kv > 0 else 0
    if blocks < 1:
        raise BadValue("tp", f"{ckpt.name} at TP {tp} on {g.name}: {weights / GIB:.1f} GiB of weights per GPU"
                             f"{f' and {other / GIB:.2f} GiB for the profile run' if other else ''} leave no KV "
                             f"cache in {setting} {fraction:g} x {g.capacity_gib:.2f} GiB: give a larger --tp")
    return KvCapacity(blocks * block, blocks, block, profile.name, ckpt.name, g.name, tp, setting, fraction,
                      g.capacity_bytes, weights, other, kv, per_token, kv_cache_dtype, mtp, tuple(assumptions))


def deployment_kv_cache(kv_cache_tokens: int | str, model: str, engine: str | EngineProfile | None, gpu, tp: int,
                        fraction: float | None, kv_cache_dtype: str,
                        speculative_tokens: int) -> KvCapacity | None:
    """The cache ``kv_cache_tokens`` "auto" derives (``derive_kv_cache``); None for a number of
    tokens, which is the cache itself, so a fraction or a cache dtype given with one is refused."""
    if kv_cache_tokens == "auto":
        return derive_kv_cache(model, engine, gpu, tp, fraction, kv_cache_dtype, speculative_tokens)
    if fraction is not None or kv_cache_dtype != "auto":
        raise BadValue("kv_cache_tokens", "gpu_memory_utilization and kv_cache_dtype size the KV cache only "
                                          "with kv_cache_tokens auto (a number of tokens is the cache itself)")
    return None

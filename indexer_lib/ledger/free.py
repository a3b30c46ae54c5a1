"""The memory free when a step runs, from the server's own flags (docs/design.md#the-ledger).

vLLM sizes its KV cache so that weights, the profile run's peak, non-torch memory, the KV cache
and (from 0.21.0) its CUDA-graph estimate fill ``gpu_memory_utilization`` of the GPU
(``data/kv_cache_rules.json``: vllm_kv_bytes).  What its profile run reserved for the indexer's
logits (``engines.profile_run_logits_bytes``) is free again once the run ends, so a step's
transients have that reservation plus what lies outside the share:
``total - ceil(total x gpu_memory_utilization) + reservation``.
SGLang's ``mem_fraction_static`` holds weights and KV pools; everything else (activations, CUDA
graphs, the indexer's logits) lives in ``total x (1 - mem_fraction_static)``.
What neither rule derives is named as an assumption next to the figure.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import BadValue
from ..engines import SGLANG_MEM_FRACTION_STATIC, get_engine, profile_run_logits_bytes
from ..engines.kv_capacity import vllm_requested_bytes
from ..engines.profiles import _parse_version
from ..presets import GIB, free_bytes_from_gib, get_gpu

# vLLM subtracts its CUDA-graph estimate inside gpu_memory_utilization from this release on
# (vllm 0.33.0 envs.py:2219 VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, "default since v0.21.0")
VLLM_CUDAGRAPH_ESTIMATE_FROM = "0.21.0"


@dataclass(frozen=True)
class FreeMemory:
    bytes: int
    source: str  # how the figure was made, for a person
    assumptions: tuple[str, ...] = ()


def given_free(free_gib: float) -> FreeMemory:
    """A free figure the user typed (--free-gib): used as it is, and named."""
    return FreeMemory(free_bytes_from_gib(free_gib), f"--free-gib {free_gib:g}, given")


def free_from_flags(engine, gpu, reservation_bytes: int, gpu_memory_utilization: float | None = None,
                    mem_fraction_static: float | None = None) -> FreeMemory:
    """The memory a step's transients have on ``engine`` on ``gpu`` under the server's flags
    (None: the release's default); ``reservation_bytes``: what its profile run reserved for the
    indexer's logits."""
    profile, g = get_engine(engine), get_gpu(gpu)
    total = g.capacity_bytes
    if profile.engine == "vllm":
        util = profile.gpu_memory_utilization if gpu_memory_utilization is None else gpu_memory_utilization
        if util is None:
            raise BadValue("gpu_memory_utilization", f"{profile.name}'s default gpu_memory_utilization is not "
                                                     "read: give --gpu-memory-utilization (or --free-gib)")
        check_fraction("gpu_memory_utilization", util)
        outside = total - vllm_requested_bytes(total, util)
        assumptions = ["the step's other activations fit in what vLLM's profile run measured for them "
                       "(it runs max_num_batched_tokens tokens)"]
        if _parse_version(profile.release) < _parse_version(VLLM_CUDAGRAPH_ESTIMATE_FROM):
            assumptions.append(f"{profile.name} captures CUDA graphs outside gpu_memory_utilization and their "
                               "size is not derived: counted as 0, so this free memory is an upper bound")
        named = "" if gpu_memory_utilization is None else ", given"
        source = (f"derived: {g.name} {total / GIB:.2f} GiB x (1 - gpu_memory_utilization {util:g}{named}) + "
                  f"{reservation_bytes / GIB:.2f} GiB the profile run reserved for the logits")
        return FreeMemory(outside + reservation_bytes, source, tuple(assumptions))
    if profile.engine == "sglang":
        mfs = SGLANG_MEM_FRACTION_STATIC if mem_fraction_static is None else mem_fraction_static
        check_fraction("mem_fraction_static", mfs)
        named = "" if mem_fraction_static is not None else ", SGLang's choice on an H200"
        source = (f"derived: {g.name} {total / GIB:.2f} GiB x (1 - mem_fraction_static {mfs:g}{named})")
        return FreeMemory(int(total * (1 - mfs)), source, (
            "SGLang's activations and CUDA graphs (but the indexer's logits in their pool, where a line counts "
            "them) share that remainder with the indexer and are not derived: counted as 0, so this free memory is "
            "an upper bound",))
    raise BadValue("free_gib", f"{profile.name}: how its server divides the GPU is not read; give --free-gib")


def server_free(settings, budget_mb: float | None, decode_tokens: int, max_model_len: int | None = None,
                gpu_memory_utilization: float | None = None, mem_fraction_static: float | None = None) -> FreeMemory:
    """``free_from_flags`` for a server planned under ``settings``, with what its profile run
    reserved (``engines.profile_run_logits_bytes``): the logits knob as set (``budget_mb``; None:
    the release's default), the decode tokens a kpool profile run sizes for, the server's
    ``max_model_len`` (None: the model's)."""
    profile = settings.profile
    reserved = profile_run_logits_bytes(profile, budget_mb, settings.preset, decode_tokens, max_model_len)
    return free_from_flags(profile, settings.gpu, reserved, gpu_memory_utilization, mem_fraction_static)


def check_fraction(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise BadValue(name, f"{name} {value!r}: must be a fraction in (0, 1]")

"""What the GPU changes in each engine release: its scheduler defaults, and the GPUs on which
the release's indexer path is not the one the memory model counts (refused, with the reason).

The GPUs are data (``data/gpus/``); each rule here is named by a fact of the release's profile
(``data/engines/``), whose source says where the release does it (docs/design.md#gpus).
"""
from __future__ import annotations

from ..checks import BadValue
from ..presets import GIB, GpuPreset, get_gpu
from .profiles import EngineProfile, get_engine

# the scheduler rules a profile's ``scheduler_gpu_rule`` names
SCHEDULER_GPU_RULES = ("none", "vllm-70gib", "vllm-160gib", "vllm-160gib-gb10", "sglang-memory-tiers")


def scheduler_gpu_defaults(engine: str | EngineProfile | None, gpu: str | GpuPreset) -> dict:
    """The release's scheduler defaults that depend on the GPU, as its OpenAI server picks them
    from the device's total memory (and, for vLLM 0.33, from its being a GB10); {} where the
    release has no such rule.  The engines read the total from NVML, a few hundred MiB above
    torch's total; no GPU of ``data/gpus/`` lies that close to a threshold."""
    profile, g = get_engine(engine), get_gpu(gpu)
    rule, memory = profile.scheduler_gpu_rule, g.capacity_bytes
    if rule not in SCHEDULER_GPU_RULES:
        raise ValueError(f"{profile.name}: scheduler_gpu_rule {rule!r} must be one of {', '.join(SCHEDULER_GPU_RULES)}")
    if rule == "none":
        return {}
    if rule.startswith("vllm"):
        if rule != "vllm-70gib" and memory >= 160 * GIB:
            tokens, seqs = 16384, 1024
        elif memory >= 70 * GIB and not (rule == "vllm-160gib-gb10" and g.arch == "sm121"):
            tokens, seqs = 8192, 1024
        else:
            tokens, seqs = 2048, 256
        return {"max_num_batched_tokens": tokens, "max_num_seqs": seqs}
    # SGLang: chunked_prefill_size by device memory; max_running_requests does not depend on it
    if memory < 60 * GIB:
        raise BadValue("gpu", f"{g.name}: {g.capacity_gib:.2f} GiB, below the 60 GiB from which SGLang's "
                              "chunked_prefill_size tiers are modelled")
    return {"max_num_batched_tokens": 16384 if memory >= 160 * GIB else 8192}


def gpu_refusal(engine: str | EngineProfile | None, gpu: str | GpuPreset) -> str | None:
    """Why no plan is made for this release on this GPU (one line), or None where its path is
    the one the memory model counts: DeepGEMM's fp32 logits."""
    g = get_gpu(gpu)
    profile = None if engine is None else get_engine(engine)
    if g.vendor != "nvidia":
        return (f"{g.name} ({g.arch}, ROCm) has no DeepGEMM: vLLM runs its own rocm_aiter_sparse_attn_indexer and "
                "SGLang aiter's triton fp8_mqa_logits (logits capped at 2^31-1 bytes), whose allocation rule is "
                "not modelled (data/gpus/" + g.name + ".json)")
    if profile is None:
        return None
    if profile.rocm_only:  # an AMD GPU answered above; this one is not
        return (f"{profile.name} runs only on ROCm (AMD GPUs, aiter's kernels), not on {g.name} ({g.arch}) "
                f"(sources: {profile.sources.get('rocm_only', profile.sources.get('file'))})")
    families = profile.deepgemm_families
    if families is not None and g.cuda_family not in families:
        return (f"{profile.name} runs DeepGEMM only on CUDA families {', '.join(f'{f // 10}.x' for f in families)}; "
                f"on {g.name} ({g.arch}) its indexer takes another kernel, which is not modelled "
                f"(sources: {profile.sources.get('deepgemm_families', profile.sources.get('file'))})")
    if g.cuda_family == 100 and profile.sm100_logits != "float32":
        return (f"{profile.name} on {g.name} ({g.arch}): DeepGEMM returns bf16 logits there and the release copies "
                "them to fp32 while both are alive (sparse_attn_indexer.py as_fp32_logits), which the memory model "
                "does not count; plan on an sm90 GPU, or on a release before vllm==0.33.0 (fp32 logits)")
    return None


def check_gpu(engine: str | EngineProfile | None, gpu: str | GpuPreset) -> GpuPreset:
    """The GPU's preset, or BadValue naming why the release is not planned on it."""
    g = get_gpu(gpu)
    why = gpu_refusal(engine, g)
    if why is not None:
        raise BadValue("gpu", f"GPU {g.name!r}: not planned: {why}")
    return g

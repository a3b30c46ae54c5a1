"""What the GPU changes in each engine release: its scheduler defaults, and the GPUs on which
the release's indexer path is not the one the memory model counts (refused, with the reason; on
ROCm, ``engines.rocm``).

The GPUs are data (``data/gpus/``); each rule here is named by a fact of the release's profile
(``data/engines/``), whose source says where the release does it (docs/design.md#gpus).
"""
from __future__ import annotations

from ..checks import BadValue
from ..presets import GIB, GPUS, GpuPreset, get_gpu
from .profiles import ENGINES, EngineProfile, engine_names, get_engine, releases_text
from .rocm import rocm_refusal

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
        # the middle tier leaves out A100s by device name ('"a100" not in device_name': arg_utils.py
        # get_batch_defaults, 0.15.1:1837 to 0.33.0:2983-2986)
        elif memory >= 70 * GIB and g.name != "a100" and not (rule == "vllm-160gib-gb10" and g.arch == "sm121"):
            tokens, seqs = 8192, 1024
        else:
            tokens, seqs = 2048, 256
        return {"max_num_batched_tokens": tokens, "max_num_seqs": seqs}
    # SGLang: chunked_prefill_size by device memory; max_running_requests does not depend on it
    if memory < 60 * GIB:
        raise BadValue("gpu", f"{g.name}: {g.capacity_gib:.2f} GiB, below the 60 GiB from which SGLang's "
                              "chunked_prefill_size tiers are modelled")
    return {"max_num_batched_tokens": 16384 if memory >= 160 * GIB else 8192}


def decode_graph_max_bs(engine: str | EngineProfile | None, gpu: str | GpuPreset, tp: int = 1,
                        max_num_seqs: int | None = None) -> int | None:
    """The largest decode batch SGLang captures in its decode CUDA graph (on by default), by the
    device's total memory and TP, at most the requests a rank runs (``max_num_seqs``); a decode
    step of at most this many requests replays the graph.  None: the release's decode graph is
    not read (``decode_cuda_graph``)."""
    profile, g = get_engine(engine), get_gpu(gpu)
    if profile.decode_cuda_graph != "sglang-memory-tiers":
        return None
    if g.capacity_bytes < 60 * GIB:
        raise BadValue("gpu", f"{g.name}: {g.capacity_gib:.2f} GiB, below the 60 GiB from which SGLang's decode "
                              "CUDA-graph tiers are modelled")
    tier = 512 if g.capacity_bytes >= 160 * GIB or tp >= 4 else 256
    return tier if max_num_seqs is None else min(tier, max_num_seqs)


def gpu_refusal(engine: str | EngineProfile | None, gpu: str | GpuPreset, model=None) -> str | None:
    """Why no plan is made for this release (and ``model``, a preset, where given) on this GPU
    (one line), or None where its path is one the memory model counts: DeepGEMM's fp32 logits, on
    CUDA family 100 under a release whose ``sm100_logits`` is "bfloat16+float32" DeepGEMM's bf16
    logits and the release's fp32 copy alive at once (``PlanSettings.upcast``), or on ROCm aiter's
    (``engines.rocm``)."""
    g = get_gpu(gpu)
    profile = None if engine is None else get_engine(engine)
    if g.rocm:
        return rocm_refusal(profile, g, model)
    if profile is None:
        return None
    if profile.rocm_only:  # an AMD GPU answered above; this one is not
        amd = ", ".join(sorted(name for name, preset in GPUS.items() if preset.rocm))
        return (f"{profile.name} runs only on ROCm (AMD GPUs, aiter's kernels), not on {g.name} ({g.arch}): "
                f"name one with --gpu ({amd}) "
                f"(sources: {profile.sources.get('rocm_only', profile.sources.get('file'))})")
    majors = profile.indexer_cuda_majors
    if majors is not None and g.cuda_major not in majors:
        return (f"{profile.name} has no indexer path for these models on compute capability {g.cuda_major}.x "
                f"({g.name}, {g.arch}): only on {', '.join(f'{m}.x' for m in majors)} "
                f"(sources: {profile.sources.get('indexer_cuda_majors')})")
    families = profile.deepgemm_families
    if families is not None and g.cuda_family not in families:
        return (f"{profile.name} runs DeepGEMM only on CUDA families {', '.join(f'{f // 10}.x' for f in families)}; "
                f"on {g.name} ({g.arch}) its indexer does not take DeepGEMM's logits, the path the memory model counts "
                f"(sources: {profile.sources.get('deepgemm_families', profile.sources.get('file'))})")
    return None


def planned_on(gpu: str | GpuPreset, model=None) -> dict[str, str | None]:
    """Per engine, the releases planned on this GPU (for ``model``, a preset, where given) as one
    phrase (``vllm==0.30.0-0.33.0``), None where every release is refused there."""
    out = {}
    for engine in ENGINES:
        planned = [n for n in engine_names(engine) if gpu_refusal(n, gpu, model) is None]
        out[engine] = releases_text(planned) if planned else None
    return out


def check_gpu(engine: str | EngineProfile | None, gpu: str | GpuPreset, model=None) -> GpuPreset:
    """The GPU's preset, or BadValue naming why the release (and model) is not planned on it."""
    g = get_gpu(gpu)
    why = gpu_refusal(engine, g, model)
    if why is not None:
        raise BadValue("gpu", f"GPU {g.name!r}: not planned: {why}")
    return g

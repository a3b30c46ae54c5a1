"""Which (release, ROCm GPU, model) the memory model plans, and why the others are refused
(docs/design.md#rocm).

On ROCm there is no DeepGEMM: a release's indexer calls aiter's ``fp8_mqa_logits`` (or, vLLM 0.33.0
on gfx942, aiter's FlyDSL kernel), whose logits allocation is ``aiter_logits``.  A release is
planned on a ROCm GPU where its profile names that rule for the GPU's architecture
(``rocm_logits_on``) and the model's indexer is the DSA one (uncompressed K: DeepSeek-V3.2,
GLM-5), or DeepSeek-V4's C4 indexer on the architectures where the release scores it with that
same path (``rocm_compressed_arches``); everything else is refused in one line naming the
release's own reason (``rocm_path``, ``rocm_not_modelled``, ``rocm_compressed_not_modelled``: each
with its file and line).
"""
from __future__ import annotations

from ..presets import GpuPreset
from .profiles import EngineProfile, engine_names, get_engine


def rocm_modelled_text() -> str:
    """The releases whose ROCm path is modelled, and on which architectures, for a refusal's last
    words: consecutive releases of one engine on the same architectures as one range."""
    runs: list[list] = []  # [engine, arches, first release, last release]
    for profile in map(get_engine, engine_names()):
        key = (profile.engine, profile.rocm_arches if profile.rocm_logits is not None else None)
        if runs and (runs[-1][0], runs[-1][1]) == key:
            runs[-1][3] = profile.release
        else:
            runs.append([*key, profile.release, profile.release])
    text = [f"{engine}=={first}" + ("" if last == first else f"-{last}") + f" on {', '.join(arches)}"
            for engine, arches, first, last in runs if arches is not None]
    return "; ".join(text) or "none"


def _own_c4_paths(engine: str | None = None, scope: bool = False) -> list[str]:
    """The releases (of ``engine``, or of every engine) with a C4 indexer path of their own modelled
    on ROCm, each with its architectures (and, with ``scope``, what of it is modelled)."""
    return [f"{p.name} on {', '.join(p.compressed_rocm_arches)}" + (f": {p.compressed_rocm_scope}" if scope else "")
            for p in map(get_engine, engine_names(engine)) if p.compressed_rocm_arches]


def rocm_refusal(profile: EngineProfile | None, gpu: GpuPreset, model=None) -> str | None:
    """Why no plan is made for this release (and model) on this ROCm GPU, in one line, or None
    where its path is modelled."""
    where = f"{gpu.name} ({gpu.arch}, ROCm)"
    modelled = f"modelled on ROCm: {rocm_modelled_text()}"
    if profile is None:
        return f"{where} has no DeepGEMM: name the engine release whose ROCm path is planned ({modelled})"
    c4 = model is not None and model.c4
    if c4 and not profile.compressed_rocm_arches:
        read = "; ".join(_own_c4_paths(profile.engine, scope=True))
        if read:  # another release's C4 path on ROCm was read: this one's was not
            return (f"{profile.name} on {where}: its C4 indexer path on ROCm ({model.name}) was not read at this "
                    f"release; modelled for {read}")
    path = profile.rocm_path or "its ROCm indexer path was not read at this release"
    if profile.rocm_logits_on(gpu.arch) is None:
        why = profile.rocm_not_modelled or "its logits allocation there is not modelled"
        return f"{profile.name} on {where}: {path}; {why} ({modelled})"
    if model is None or not (model.kv_ratio != 1 or model.pooled or model.qsa or model.has_candidates):
        return None
    if c4 and (gpu.arch in (profile.rocm_compressed_arches or ()) or profile.own_rocm_c4(model, gpu)):
        return None  # the DSA path's rule, or a C4 path of its own (plan.paths.SglangC4Hip)
    if c4 and profile.compressed_rocm_arches:  # its own C4 path, read on other architectures than this one
        return (f"{profile.name} on {where}: its DeepSeek-V4 C4 indexer on ROCm ({profile.compressed_rocm_path}) "
                f"is modelled on {', '.join(profile.compressed_rocm_arches)} alone; not read for {gpu.arch}")
    if c4 and profile.rocm_compressed_not_modelled is not None:
        return (f"{profile.name} on {where}: {model.name}'s C4 indexer: {profile.rocm_compressed_not_modelled} "
                f"({modelled}; {model.name} on {_compressed_text()})")
    return (f"{profile.name} on {where}: only its DSA indexer (uncompressed K: DeepSeek-V3.2, GLM-5) is "
            f"modelled on ROCm; {model.name}'s indexer takes the release's AMD model path, not read")


def _compressed_text() -> str:
    """The releases whose C4 indexer (DeepSeek-V4) is modelled on ROCm, and where."""
    text = [f"{p.name} on {', '.join(p.rocm_compressed_arches)}" for p in map(get_engine, engine_names())
            if p.rocm_compressed_arches]
    text += [f"{own} (a C4 path of its own)" for own in _own_c4_paths()]
    return "; ".join(text) or "none"


def rocm_setting(profile: EngineProfile | None, gpu: GpuPreset) -> str | None:
    """The setting that differs from the release's default which its modelled ROCm path needs
    (vLLM 0.33.0: aiter turned on), as ``name=value (default D)``; None off ROCm or where none."""
    if profile is None or not gpu.rocm or profile.rocm_setting is None:
        return None
    return f"{profile.rocm_setting}: the ROCm path modelled (docs/design.md#rocm)"

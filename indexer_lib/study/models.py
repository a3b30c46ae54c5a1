"""The indexers of 2026 side by side: every model of ``data/models/`` at its own ``max_model_len``,
planned on each engine's latest release whose path for it is modelled (vLLM, SGLang, TensorRT-LLM),
with the layer kind that sets the peak; the models not planned yet, and the engines that refuse a
model, with the reason (docs/design.md#models).  Modelled."""
from __future__ import annotations

from ..checks import BadValue
from ..engines import engine_names, engines_for, get_engine
from ..presets import GIB, MIB, get_model, known_models
from ..sweep.grid import Grid
from ..sweep.rows import model_rows


ENGINES = ("vllm", "sglang", "trtllm")


def release_for(model: str, engine: str = "vllm") -> str:
    """The engine's latest release whose path for the model's indexer is modelled (its latest
    release where none is: planning it then says why)."""
    modelled = [e for e in engines_for(get_model(model)) if get_engine(e).engine == engine]
    return modelled[-1] if modelled else engine_names(engine)[-1]


def model_rows_2026(concurrency=(1, 8), free_gib: float = 2.63, engines=ENGINES) -> list[dict]:
    """Per known model and engine: at concurrency C x ISL = its max_model_len (OSL 64), the
    release's own chunker at its default budget and scheduler, the worst step, its largest logits
    allocation and peak, and the layer kind that sets it; a model not planned yet gets one row
    that says why, and so does an engine whose path for the model is not modelled."""
    rows = []
    for name, preset in sorted(known_models().items()):
        kinds = ", ".join(f"{k.name} ({k.indexer_layers}/{len(k.layers)} layers, ratio {k.compress_ratio})"
                          for k in preset.layer_kinds)
        base = {"model": name, "max_model_len": preset.max_model_len, "layer_kinds": kinds,
                "unverified": ", ".join(preset.unverified)}
        try:
            get_model(name)
        except BadValue as e:
            rows.append({**base, "planned": False, "why_not": str(e).split(": ", 1)[1].split("; planned:")[0]})
            continue
        for family in engines:
            rows += _engine_rows(name, preset, base, release_for(name, family), tuple(concurrency), free_gib)
    return rows


def _engine_rows(name: str, preset, base: dict, engine: str, concurrency: tuple, free_gib: float) -> list[dict]:
    # the release's own chunker at its own default budget (a release that measures its budget
    # from free memory ignores the number)
    try:
        grid = Grid.of(model=name, concurrency=concurrency, isl=(preset.max_model_len,), osl=64,
                    budget_mb=(get_engine(engine).default_budget_mb or 512,), strategy=("engine",),
                    free_gib=(free_gib,), engine=(engine,))
        found = list(model_rows(grid))
    except ValueError as e:  # the release's path for this model is not modelled: say why
        return [{**base, "planned": False, "engine": engine, "why_not": str(e)}]
    rows = []
    kind = preset.main_kind
    for r in found:
        rows.append({**base, "planned": True, "engine": engine, "concurrency": r["concurrency"],
                     "isl": r["isl"], "peak_layer_kind": r.get("worst_layer_kind") or kind.name,
                     "indexer_layers": preset.indexer_layers,
                     "worst_rows": r["worst_rows"], "worst_kv_tokens": r["worst_kv_tokens"],
                     "worst_chunks": r["worst_chunks"],
                     "largest_logits_mib": r["largest_logits_bytes"] / MIB,
                     "peak_transient_gib": r["peak_transient_bytes"] / GIB,
                     "free_gib": free_gib, "oom": r["oom"], "mode": "model"})
    return rows


def model_table_2026(concurrency=(1, 8), free_gib: float = 2.63, engines=ENGINES):
    import pandas as pd

    return pd.DataFrame(model_rows_2026(concurrency, free_gib, engines))

"""Speculative decoding release by release: which decodes reach the indexer's prefill path (modelled).

A decode with drafts takes ``1 + K`` new tokens; each release's indexer computes it in its decode
path only up to its own number of drafts (``indexer_decode_max_drafts`` in data/engines/), and
in its prefill path beyond, with its whole context, next to the step's prompt chunks
(docs/design.md#the-scheduler-that-produces-the-batches).  ``drafts_table`` runs the same
workload on each release's own chunker and scheduler defaults for each number of drafts.
"""
from __future__ import annotations

from ..engines import get_engine
from ..presets import GIB
from ..sweep.grid import Grid
from ..sweep.rows import model_rows


def drafts_table(model: str, engines: list[str], drafts: list[int], concurrency: int, isl: int, osl: int,
                 free_gib: float, gpu: str = "h200") -> list[dict]:
    """One row per release and number of drafts: the worst step's rows, requests and KV tokens, its
    largest logits allocation, its transient peak and whether it fits ``free_gib`` (modelled)."""
    rows = []
    for engine in engines:
        profile = get_engine(engine)
        for k in drafts:
            # the release's own chunker at its own default budget (a release without one ignores it)
            grid = Grid.of(model=model, concurrency=(concurrency,), isl=(isl,), osl=(osl,), strategy=("engine",),
                        budget_mb=(profile.default_budget_mb or 512,), free_gib=(free_gib,), engine=(engine,),
                        speculative_tokens=k, gpu=gpu)
            (row,) = model_rows(grid)
            rows.append({
                "engine": profile.name, "budget_mb": row["budget_mb"], "speculative_tokens": k,
                "decode_path_takes": profile.indexer_decode_threshold(k),
                "worst_rows": row["worst_rows"], "worst_requests": row["worst_requests"],
                "worst_kv_tokens": row["worst_kv_tokens"],
                "largest_logits_gib": row["largest_logits_bytes"] / GIB,
                "peak_transient_gib": row["peak_transient_bytes"] / GIB,
                "oom": bool(row["oom"]), "not_default": row["not_default"], "mode": "model",
            })
    return rows

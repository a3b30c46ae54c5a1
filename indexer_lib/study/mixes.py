"""One long prompt among short ones against the same tokens in prompts of one length: the compressed
logits layout's worst case (docs/design.md#mixed-lengths).  Modelled.

Under the compressed layout (vLLM 0.33.0's DeepGEMM) a chunk's logits are as wide as its longest
request, so when a long prompt's chunk shares a step with short prompts, every short row is as wide
as the long one.  A mix is one schedule: the long prompts meet the short ones in the same steps.
"""
from __future__ import annotations

from ..engines import get_engine
from ..shapes import GIB
from ..workload import ClosedLoopWorkload
from .grid import Grid
from .sweep import model_rows, to_frame


def long_among_short(model: str, engine: str, free_gib: float, concurrency: int = 64, short_isl: int = 2048,
                     long_isl: int = 131_072, share: float = 0.01, osl: int = 64, budget_mb: float = 512,
                     strategies=("engine", "n-only", "causal"), seed: int = 0):
    """The worst step of a mix (``share`` of the prompts at ``long_isl``, the rest at ``short_isl``)
    next to the homogeneous workload of the same concurrency and (to a token per prompt) the same
    prompt tokens, per strategy at one budget: one row each, with what the table shows."""
    mix = f"{share:g}x{long_isl}"
    lens = ClosedLoopWorkload(concurrency, short_isl, osl, mix=mix, seed=seed).prompt_lens
    same_isl = round(sum(lens) / len(lens))
    rows = []
    for isl, m in ((short_isl, mix), (same_isl, "")):
        grid = Grid.of(model=model, concurrency=(concurrency,), isl=(isl,), osl=(osl,), mix=(m,), length_seed=seed,
                    budget_mb=(budget_mb,), strategy=tuple(strategies), free_gib=(free_gib,), engine=(engine,))
        rows += model_rows(grid)
    frame = to_frame(rows)
    longs = lens.count(long_isl)
    frame.insert(0, "workload", [
        f"{longs} x {long_isl:,} among {len(lens) - longs} x {short_isl:,}" if m else f"{len(lens)} x {isl:,}"
        for isl, m in zip(frame["isl"], frame["mix"].fillna(""))])
    frame["prompt_tokens"] = [sum(lens) if m else same_isl * len(lens) for m in frame["mix"].fillna("")]
    frame["layout"] = get_engine(engine).layout
    frame["largest_logits_gib"] = frame["largest_logits_bytes"] / GIB
    frame["worst_allocated_logits_gib"] = frame["worst_allocated_logits_bytes"] / GIB
    # share of the worst step's allocated logits a row's own window needs
    frame["worst_useful_share"] = frame["worst_useful_elements"] * 4 / frame["worst_allocated_logits_bytes"]
    return frame

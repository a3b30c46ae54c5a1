"""One long prompt among short ones against the same tokens in prompts of one length: the compressed
logits layout's worst case (docs/design.md#mixed-lengths).  Modelled.

Under the compressed layout (vLLM 0.33.0's DeepGEMM) a chunk's logits are as wide as its longest
request, so when a long prompt's chunk shares a step with short prompts, every short row is as wide
as the long one.  A mix is one schedule: the long prompts meet the short ones in the same steps.
"""
from __future__ import annotations

from ..dtypes import FP32_BYTES
from ..engines import get_engine
from ..presets import GIB
from ..workload import ClosedLoopWorkload
from ..sweep.grid import Grid
from ..sweep.rows import model_rows, to_frame


# the case notebook 01 shows a mix on: 64 clients, 2,048-token prompts, 64 output tokens, the
# release's own chunker, n-only and causal at 512 MiB
CASE = dict(concurrency=64, isl=2048, osl=64, budget_mb=512, strategy=("engine", "n-only", "causal"))


def long_among_short(grid: Grid, long_isl: int = 131_072, share: float = 0.01):
    """The worst step of a mix (``share`` of the prompts at ``long_isl``, the rest at the grid's ISL)
    next to the homogeneous workload of the same concurrency and (to a token per prompt) the same
    prompt tokens, per strategy: one row each, with what the table shows.  ``grid``: one
    concurrency, ISL, OSL, budget and free memory (``CASE``), its model, release and seed."""
    (concurrency,), (short_isl,), (osl,) = grid.concurrency, grid.isl, grid.osl
    mix = f"{share:g}x{long_isl}"
    lens = ClosedLoopWorkload(concurrency, short_isl, osl, mix=mix, seed=grid.length_seed).prompt_lens
    same_isl = round(sum(lens) / len(lens))
    rows = []
    for isl, m in ((short_isl, mix), (same_isl, "")):
        rows += model_rows(grid.where(isl=isl, mix=m))
    frame = to_frame(rows)
    longs = lens.count(long_isl)
    frame.insert(0, "workload", [
        f"{longs} x {long_isl:,} among {len(lens) - longs} x {short_isl:,}" if m else f"{len(lens)} x {isl:,}"
        for isl, m in zip(frame["isl"], frame["mix"].fillna(""))])
    frame["prompt_tokens"] = [sum(lens) if m else same_isl * len(lens) for m in frame["mix"].fillna("")]
    frame["layout"] = [get_engine(e).layout for e in frame["engine"]]
    frame["largest_logits_gib"] = frame["largest_logits_bytes"] / GIB
    frame["worst_allocated_logits_gib"] = frame["worst_allocated_logits_bytes"] / GIB
    # share of the worst step's allocated logits a row's own window needs
    frame["worst_useful_share"] = frame["worst_useful_elements"] * FP32_BYTES / frame["worst_allocated_logits_bytes"]
    return frame

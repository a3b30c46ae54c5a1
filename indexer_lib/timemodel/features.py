"""What a plan's time depends on, counted from its chunks: the chunks and gathers, the logits
its rows really score, the logits it allocates and the K it gathers (``timemodel.model``)."""
from __future__ import annotations

from ..dtypes import FP32_BYTES
from ..workload import StepBatch
from ..plan.chunks import Chunk, Plan
from ..plan.packing import window_sum


def _clipped_window_sum(u: int, v: int, start: int, width: int) -> int:
    """Sum over window ends x in [u, v] of the window [0, x) clipped to [start, start + width)."""
    total = 0
    lo, hi = max(u, start + 1), min(v, start + width - 1)  # partly inside: x - start columns
    if hi >= lo:
        total += (lo - start + hi - start) * (hi - lo + 1) // 2
    lo = max(u, start + width)  # past the range: all width columns
    if v >= lo:
        total += (v - lo + 1) * width
    return total


def chunk_useful_elements(chunk: Chunk, batch: StepBatch) -> int:
    """Logits the chunk's rows really score: the sum over its rows of ke - ks (for a
    column range of kv-split, only the part of each window inside the range)."""
    if chunk.num_requests == 1 and not chunk.compressed and batch.kv_ratio == 1:
        r = batch.requests[chunk.requests[0]]
        a, b = chunk.rows
        return _clipped_window_sum(r.context_len + a + 1, r.context_len + b, chunk.kv_start,
                                   chunk.logits_cols)
    if chunk.kv_start:
        raise ValueError("a column range of a compressed-K step: kv-split is not planned on compressed K")
    total, offset = 0, 0
    for r in batch.requests[chunk.requests[0]:chunk.requests[1]]:
        a = max(chunk.rows[0], offset) - offset
        b = min(chunk.rows[1], offset + r.query_len) - offset
        if b > a:  # rows a..b-1 of this request: r.window(i + 1) columns each
            total += window_sum(r, a, b)
        offset += r.query_len
    return total


def plan_features(plan: Plan) -> dict:
    """What the time model (and the strategy comparison) needs to know of a plan."""
    useful = sum(chunk_useful_elements(c, plan.batch) for c in plan.chunks)
    return {
        "chunks": plan.num_chunks,
        "gathers": plan.num_gathers,
        "useful_elements": useful,
        "useful_logits_bytes": FP32_BYTES * useful,  # as fp32 logits
        "allocated_logits_bytes": sum(c.logits_bytes for c in plan.chunks),
        "largest_logits_bytes": plan.largest_logits_bytes,
        "gathered_kv_tokens": sum(c.kv_tokens for c in plan.chunks if c.gather),
        "heads": plan.settings.preset.index_heads,
        "k_bytes_per_token": plan.settings.preset.k_bytes_per_token,
        # what the per-kernel time model reads (timemodel.model; it computes the chunks' work
        # from the plan only when a time is asked for, and keeps it here)
        "plan": plan,
        "topk": plan.settings.preset.topk,
        "clean_logits": bool(plan.settings.profile is not None and plan.settings.profile.clean_logits),
        "indexer_layers": plan.settings.preset.indexer_layers,
    }

"""Per-chunk row and column metadata, derived from a plan (never hand-filled).

A chunk's requests sit back to back in the gather workspace from column 0:
request b of the chunk starts at column ``cu[b]``.  Query row i of request b
(request-local index) scores workspace columns ``[ks, ke)`` with
``ks = cu[b]`` and ``ke = cu[b] + context_len_b + i + 1`` (docs/design.md#the-indexer-and-its-logits).

The executor turns these into int32 device tensors; the memory model reads the
same runs to count the backend's tiles.  Pure Python + numpy, no torch.
"""
from __future__ import annotations

import numpy as np

from ..plan import Chunk, chunk_runs
from ..workload import StepBatch


def chunk_windows(batch: StepBatch, chunk: Chunk) -> tuple[np.ndarray, np.ndarray]:
    """``ks`` and ``ke`` per row of the chunk (int32, workspace columns)."""
    ks = np.empty(chunk.num_rows, dtype=np.int32)
    ke = np.empty(chunk.num_rows, dtype=np.int32)
    for run in chunk_runs(batch, chunk):
        sl = slice(run.row_start, run.row_start + run.rows)
        ks[sl] = run.ks
        ke[sl] = run.ks + run.first_len + np.arange(run.rows, dtype=np.int32)
    return ks, ke


def cache_offsets(batch: StepBatch) -> list[int]:
    """Where each request's tokens start in the flat K cache (requests back to back)."""
    offsets, pos = [], 0
    for req in batch.requests:
        offsets.append(pos)
        pos += req.seq_len
    return offsets


def kv_slots(batch: StepBatch, chunk: Chunk) -> np.ndarray:
    """For each workspace token of the chunk, its slot in the flat K cache (int32).

    This is what a serving gather kernel reads (block table expanded to tokens):
    one int32 per gathered KV token.
    """
    r0, r1 = chunk.requests
    offsets = cache_offsets(batch)
    parts = [np.arange(offsets[b], offsets[b] + batch.requests[b].seq_len, dtype=np.int64)
             for b in range(r0, r1)]
    slots = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    if slots.size and slots[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"K cache slot {int(slots[-1])} does not fit int32")
    return slots.astype(np.int32)


def column_windows(ks: np.ndarray, ke: np.ndarray, kv_start: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Windows of a column range: the part of each row's ``[ks, ke)`` that falls in
    workspace columns ``[kv_start, kv_start + width)``, in the range's own columns
    (0 = workspace column ``kv_start``).  A row whose window ends before the range
    gets an empty window (ks == ke): it has no candidates there."""
    lo = np.clip(ks.astype(np.int64) - kv_start, 0, width)
    hi = np.clip(ke.astype(np.int64) - kv_start, 0, width)
    return lo.astype(np.int32), np.maximum(lo, hi).astype(np.int32)

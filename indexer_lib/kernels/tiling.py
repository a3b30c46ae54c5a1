"""The reference backend's tiles and the bytes each one allocates.

The reference backend never materialises more than one tile of float64 work or
of top-k keys at a time, so its temporaries are bounded whatever the chunk.
This module says how it tiles and how many bytes a tile holds at its peak, in
plain Python (no torch) so the memory model can use it cheaply.  The tracer
checks these formulas against the allocations the backend really makes.

Tiles never cross a request: rows of one request share ``ks``, so a tile's
columns are one contiguous KV range starting at ``ks``.
"""
from __future__ import annotations

from functools import lru_cache

from ..metadata import chunk_runs
from ..shapes import get_model

F64 = 8
I64 = 8
I32 = 4
F32 = 4
BOOL = 1

# logits: row tiles of at most this many rows, column tiles of at most this many KV tokens
LOGITS_TILE_ROWS = 128
LOGITS_TILE_COLS = 4096
# top-k: at most this many logits per tile (rows x width of the request's widest row)
TOPK_TILE_ELEMENTS = 1 << 21


def logits_row_bytes(rows: int, heads: int, head_dim: int) -> int:
    """Live for a whole row tile: q as float64 [H, rows, D] and weights as float64 [rows, H]."""
    return F64 * heads * rows * head_dim + F64 * rows * heads


def logits_col_bytes(rows: int, cols: int, head_dim: int) -> int:
    """Live for one column tile: k and its scale as float64, the accumulator and one head's dots."""
    return F64 * cols * head_dim + F64 * cols + 2 * F64 * rows * cols


def logits_tile_bytes(rows: int, cols: int, heads: int, head_dim: int) -> int:
    return logits_row_bytes(rows, heads, head_dim) + logits_col_bytes(rows, cols, head_dim)


def topk_tile_rows(width: int) -> int:
    """Rows per top-k tile for a request whose widest window is ``width`` columns."""
    return max(1, TOPK_TILE_ELEMENTS // max(width, 1))


def topk_tile_bytes(rows: int, width: int, k: int) -> int:
    """Everything one top-k tile allocates (all of it lives until the tile ends).

    [rows, width]: sign (int32), ordered bits (int32), keys (int64), window mask (bool);
    [width]: column numbers (int32), low key bits (int64); [rows]: window lengths (int32);
    [rows, k]: top-k keys and indices (int64), int32 result, invalid mask (bool).
    """
    return ((I32 + I32 + I64 + BOOL) * rows * width + (I32 + I64) * width + I32 * rows
            + (I64 + I64 + I32 + BOOL) * rows * k)


def run_logits_peak_bytes(rows: int, first_len: int, heads: int, head_dim: int) -> int:
    """Largest logits tile of one run.

    A tile's bytes grow with its rows and its width, and the widths grow with
    the rows (causal windows): the largest tile is the last full one or the
    final one, so only those two are counted.
    """
    peak = 0
    full = rows // LOGITS_TILE_ROWS
    last_starts = {(full - 1) * LOGITS_TILE_ROWS} if full else set()
    if rows % LOGITS_TILE_ROWS:
        last_starts.add(full * LOGITS_TILE_ROWS)
    for t0 in last_starts:
        tile_rows = min(LOGITS_TILE_ROWS, rows - t0)
        extent = first_len + t0 + tile_rows - 1  # the tile's last row has the widest window
        peak = max(peak, logits_tile_bytes(tile_rows, min(LOGITS_TILE_COLS, extent), heads, head_dim))
    return peak


def run_topk_peak_bytes(rows: int, first_len: int, k: int) -> int:
    """Largest top-k tile of one run: all its tiles are as wide as its widest row."""
    width = first_len + rows - 1
    tile_rows = min(rows, topk_tile_rows(width))
    return topk_tile_bytes(tile_rows, width, min(k, width))


@lru_cache(maxsize=65536)
def run_peak_bytes(rows: int, first_len: int, heads: int, head_dim: int, k: int) -> int:
    """Largest tile of either phase for one run (runs of equal shape recur: cached)."""
    return max(run_logits_peak_bytes(rows, first_len, heads, head_dim),
               run_topk_peak_bytes(rows, first_len, k))


def reference_temporaries_bytes(plan, chunk, topk: int) -> int:
    """Peak temporaries of the reference backend for one chunk of ``plan``.

    The logits phase and the top-k phase run one after the other, each holding
    one tile at a time: the larger tile is the chunk's peak.
    """
    model = get_model(plan.model)
    heads, head_dim = model.index_heads, model.head_dim
    peak = 0
    for _, rows, _, first_len in chunk_runs(plan.batch, chunk):
        peak = max(peak, run_peak_bytes(rows, first_len, heads, head_dim, topk))
    return peak

"""The reference backend's tiles and the bytes each one allocates.

The reference backend never materialises more than one tile of float64 work or
of top-k keys at a time, so its temporaries are bounded whatever the chunk.
This module says how it tiles and how many bytes a tile holds at its peak, in
plain Python (no torch) so the memory model can use it cheaply.  The tracer
checks these formulas against the allocations the backend really makes.

Tiles never cross a request: rows of one request share ``ks``, so a tile's
columns are one contiguous KV range starting at ``ks``.

A column-range chunk (kv-split, ``Chunk.kv_start``) sees each window clipped to
its columns (``run.metadata.column_windows``): row t of a run then has
``min(max(first_len + t - cut, 0), cap)`` columns, still non-decreasing in t,
so the same "last tiles are the largest" argument holds.
"""
from __future__ import annotations

from functools import lru_cache

from ..plan import chunk_runs
from ..presets import get_model

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


def _run_len(t: int, first_len: int, cut: int, cap: int | None) -> int:
    """Window length of row t of a run, clipped to a column range."""
    n = max(first_len + t - cut, 0)
    return n if cap is None else min(n, cap)


def run_logits_peak_bytes(rows: int, first_len: int, heads: int, head_dim: int,
                          cut: int = 0, cap: int | None = None) -> int:
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
        extent = _run_len(t0 + tile_rows - 1, first_len, cut, cap)  # the last row is the widest
        peak = max(peak, logits_tile_bytes(tile_rows, min(LOGITS_TILE_COLS, extent), heads, head_dim))
    return peak


def run_topk_peak_bytes(rows: int, first_len: int, k: int, cut: int = 0,
                        cap: int | None = None) -> int:
    """Largest top-k tile of one run: all its tiles are as wide as its widest row
    (a run whose windows are all empty is skipped)."""
    width = _run_len(rows - 1, first_len, cut, cap)
    if width == 0:
        return 0
    tile_rows = min(rows, topk_tile_rows(width))
    return topk_tile_bytes(tile_rows, width, min(k, width))


@lru_cache(maxsize=65536)
def run_peak_bytes(rows: int, first_len: int, heads: int, head_dim: int, k: int,
                   cut: int = 0, cap: int | None = None) -> int:
    """Largest tile of either phase for one run (runs of equal shape recur: cached)."""
    return max(run_logits_peak_bytes(rows, first_len, heads, head_dim, cut, cap),
               run_topk_peak_bytes(rows, first_len, k, cut, cap))


def _run_clips(plan, chunk):
    """Per run of the chunk: (rows, first_len, cut, cap) of its windows as the chunk's
    logits columns see them."""
    column_range = not chunk.compressed and chunk.kv_start > 0
    for _, rows, ks, first_len in chunk_runs(plan.batch, chunk):
        if column_range:
            # the windows clipped to [kv_start, kv_start + logits_cols)
            a, width = ks - chunk.kv_start, chunk.logits_cols
            cut, cap = max(0, -a), width - min(max(a, 0), width)
        elif not chunk.compressed:
            # a first column range (kv_start 0) is narrower than its rows' windows
            cut, cap = 0, chunk.logits_cols - ks
        else:
            cut, cap = 0, None
        if cut == 0 and cap is not None and cap >= first_len + rows - 1:
            cap = None  # no clipping: the same cache entry as any run of this shape
        yield rows, first_len, cut, cap


def reference_temporaries_bytes(plan, chunk, topk: int) -> int:
    """Peak temporaries of the reference backend for one chunk of ``plan``.

    The logits phase and the top-k phase run one after the other, each holding
    one tile at a time: the larger tile is the chunk's peak.
    """
    model = get_model(plan.model)
    heads, head_dim = model.index_heads, model.head_dim
    return max((run_peak_bytes(rows, first_len, heads, head_dim, topk, cut, cap)
                for rows, first_len, cut, cap in _run_clips(plan, chunk)), default=0)


def reference_phase_bytes(plan, chunk, topk: int) -> tuple[int, int]:
    """The reference backend's largest tile during the logits call and during top-k."""
    model = get_model(plan.model)
    heads, head_dim = model.index_heads, model.head_dim
    logits = topk_phase = 0
    for rows, first_len, cut, cap in _run_clips(plan, chunk):
        logits = max(logits, run_logits_peak_bytes(rows, first_len, heads, head_dim, cut, cap))
        topk_phase = max(topk_phase, run_topk_peak_bytes(rows, first_len, topk, cut, cap))
    return logits, topk_phase


# the exact top-k merge of column ranges (kernels.merge): bytes per (row, k) entry
MERGE_BYTES_PER_ENTRY = 48


def merge_temporaries_bytes(rows: int, k: int) -> int:
    """Peak bytes ``merge.merge_running_topk`` allocates for ``rows`` x ``k`` running entries.

    Per row and k, over the 2k candidates (running + the range's): the float32
    values and int32 indices concatenated (16 bytes), the key's int32 sign and
    magnitude (16) then its int64 key (16), and torch.topk's int64 keys and
    positions of the k kept (16): at most 48 bytes live at once.
    """
    return MERGE_BYTES_PER_ENTRY * rows * k

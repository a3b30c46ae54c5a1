"""The bytes the window top-k (``run.kernels.topk.window_topk``) holds beyond the logits.

The top-k works on blocks of rows sized so that one block's temporaries stay
within ``DEFAULT_BLOCK_BYTES``; this module says how many rows a block has and
what a block holds at its largest phase, in plain Python (no torch), so the
memory model can count it.  The tracer checks these formulas against the
allocations the top-k really makes.
"""
from __future__ import annotations

import functools

from ..dtypes import BOOL_BYTES, FP32_BYTES, INT64_BYTES
from ..elementwise import maximum, minimum, where

DEFAULT_BLOCK_BYTES = 128 * 2**20  # bound on one row block's temporaries
# tie repair per element: fp32 copy, bool gt, eq, keep and the int64 running count
REPAIR_BYTES_PER_ELEMENT = FP32_BYTES + 3 * BOOL_BYTES + INT64_BYTES


def _bytes_per_row(width, kk):
    """Most bytes one row of a block holds at once (see ``topk_temporaries_bytes``)."""
    mask = 2 * width * BOOL_BYTES  # two [r, width] bool masks
    select = kk * (FP32_BYTES + INT64_BYTES) + width * BOOL_BYTES  # topk result + tie check
    # ordering: the pair, a stable sort's values and int64 permutation, one gathered copy
    order = kk * (FP32_BYTES + INT64_BYTES + 2 * INT64_BYTES + INT64_BYTES)
    return maximum(maximum(mask, select), order)


def repair_bytes_per_row(width: int, kk: int) -> int:
    """Tie repair per row: fp32 copy, bool masks, int64 running count; nonzero's int64
    pairs and the gathered values of the kept columns."""
    return width * REPAIR_BYTES_PER_ELEMENT + kk * (2 * INT64_BYTES + FP32_BYTES)


def rows_per_block(width, k: int, block_bytes: int = DEFAULT_BLOCK_BYTES):
    """Rows per block so that one block's temporaries stay within ``block_bytes``."""
    kk = maximum(1, minimum(k, width))
    return maximum(1, block_bytes // _bytes_per_row(maximum(1, width), kk))


def topk_temporaries_bytes(rows, width, k: int, block_bytes: int = DEFAULT_BLOCK_BYTES, ties: bool = False):
    """Upper bound of the bytes ``window_topk`` holds at once beyond the logits and ``out``
    (numbers, or arrays of them without ``ties``).

    Per-row int64 window bounds (at most five [rows] tensors), the int64 column
    range, and one row block of r = ``rows_per_block`` rows at its largest phase
    (two [r, width] bool masks; or topk's fp32 values and int64 indices with the
    [r, width] bool of the tie check; or the ordering's old and new pairs and one
    int64 permutation).  ``ties``: add the repair of rows whose k-th value is
    tied with a value left out (a sub-block of at most ``block_bytes``), which
    exact ties at the k-th value cause and random logits almost never do.
    """
    kk = minimum(k, width)
    r = minimum(rows, rows_per_block(width, k, block_bytes))
    total = where((rows <= 0) | (width <= 0), 0,
                  5 * rows * INT64_BYTES + width * INT64_BYTES + r * _bytes_per_row(width, kk))
    if ties and total:
        # the repair runs while the block's topk values and indices are alive
        sub = min(r, max(1, block_bytes // repair_bytes_per_row(width, kk)))
        total += sub * repair_bytes_per_row(width, kk) + 3 * r * INT64_BYTES
    return total


def topk_counter(k: int, block_bytes: int = DEFAULT_BLOCK_BYTES):
    """``count(rows, width)``: ``topk_temporaries_bytes(rows, width, k, block_bytes)`` (no tie
    repair), for numbers or arrays of them."""
    return functools.partial(topk_temporaries_bytes, k=k, block_bytes=block_bytes)


def topk_holds_every_row(k: int, block_bytes: int = DEFAULT_BLOCK_BYTES):
    """``holds(rows, width)``: whether one block of ``topk_counter`` holds every row at this width.
    Up to that width its count only grows with the width (each term does); past it the block's
    rows shrink as a row's bytes grow, and the count can fall."""
    if k < 1:
        return lambda rows, width: False  # nothing claimed

    def holds(rows, width):
        return (width <= 0) | (rows * _bytes_per_row(width, minimum(k, width)) <= block_bytes)

    return holds

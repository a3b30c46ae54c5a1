"""The bytes the window top-k (``run.kernels.topk.window_topk``) holds beyond the logits.

The top-k works on blocks of rows sized so that one block's temporaries stay
within ``DEFAULT_BLOCK_BYTES``; this module says how many rows a block has and
what a block holds at its largest phase, in plain Python (no torch), so the
memory model can count it.  The tracer checks these formulas against the
allocations the top-k really makes.
"""
from __future__ import annotations

INT32_BYTES, INT64_BYTES, FP32_BYTES, BOOL_BYTES = 4, 8, 4, 1
DEFAULT_BLOCK_BYTES = 128 * 2**20  # bound on one row block's temporaries
# tie repair per element: fp32 copy, bool gt, eq, keep and the int64 running count
REPAIR_BYTES_PER_ELEMENT = FP32_BYTES + 3 * BOOL_BYTES + INT64_BYTES


def _bytes_per_row(width: int, kk: int, larger=max) -> int:
    """Most bytes one row of a block holds at once (see ``topk_temporaries_bytes``); ``larger``
    (numpy's ``maximum``) takes arrays of widths."""
    mask = 2 * width * BOOL_BYTES  # two [r, width] bool masks
    select = kk * (FP32_BYTES + INT64_BYTES) + width * BOOL_BYTES  # topk result + tie check
    # ordering: the pair, a stable sort's values and int64 permutation, one gathered copy
    order = kk * (FP32_BYTES + INT64_BYTES + 2 * INT64_BYTES + INT64_BYTES)
    return larger(larger(mask, select), order)


def repair_bytes_per_row(width: int, kk: int) -> int:
    """Tie repair per row: fp32 copy, bool masks, int64 running count; nonzero's int64
    pairs and the gathered values of the kept columns."""
    return width * REPAIR_BYTES_PER_ELEMENT + kk * (2 * INT64_BYTES + FP32_BYTES)


def rows_per_block(width: int, k: int, block_bytes: int = DEFAULT_BLOCK_BYTES) -> int:
    """Rows per block so that one block's temporaries stay within ``block_bytes``."""
    kk = max(1, min(k, width))
    return max(1, block_bytes // _bytes_per_row(max(1, width), kk))


def topk_temporaries_bytes(rows: int, width: int, k: int,
                           block_bytes: int = DEFAULT_BLOCK_BYTES, ties: bool = False) -> int:
    """Upper bound of the bytes ``window_topk`` holds at once beyond the logits and ``out``.

    Per-row int64 window bounds (at most five [rows] tensors), the int64 column
    range, and one row block of r = ``rows_per_block`` rows at its largest phase
    (two [r, width] bool masks; or topk's fp32 values and int64 indices with the
    [r, width] bool of the tie check; or the ordering's old and new pairs and one
    int64 permutation).  ``ties``: add the repair of rows whose k-th value is
    tied with a value left out (a sub-block of at most ``block_bytes``), which
    exact ties at the k-th value cause and random logits almost never do.
    """
    if rows <= 0 or width <= 0:
        return 0
    kk = min(k, width)
    r = min(rows, rows_per_block(width, k, block_bytes))
    total = 5 * rows * INT64_BYTES + width * INT64_BYTES + r * _bytes_per_row(width, kk)
    if ties:
        # the repair runs while the block's topk values and indices are alive
        sub = min(r, max(1, block_bytes // repair_bytes_per_row(width, kk)))
        total += sub * repair_bytes_per_row(width, kk) + 3 * r * INT64_BYTES
    return total


def topk_counter(k: int, block_bytes: int = DEFAULT_BLOCK_BYTES):
    """``count(rows, width)``: ``topk_temporaries_bytes(rows, width, k, block_bytes)`` (no tie
    repair) as a closure with its constants at hand: a frontier asks it for millions of shapes."""
    if k < 1:  # the block's rows and the total would count different k: the plain function
        return lambda rows, width: topk_temporaries_bytes(rows, width, k, block_bytes)

    def count(rows: int, width: int) -> int:
        if rows <= 0 or width <= 0:
            return 0
        kk = k if k < width else width  # min(k, width), at least 1 here
        per_row = _bytes_per_row(width, kk)
        block_rows = block_bytes // per_row
        if block_rows < 1:
            block_rows = 1
        r = rows if rows < block_rows else block_rows
        return 5 * rows * INT64_BYTES + width * INT64_BYTES + r * per_row

    return count


def topk_holds_every_row(k: int, block_bytes: int = DEFAULT_BLOCK_BYTES):
    """``holds(rows, width)``: whether one block of ``topk_counter`` holds every row at this width.
    Up to that width its count only grows with the width (each term does); past it the block's
    rows shrink as a row's bytes grow, and the count can fall."""
    if k < 1:
        return lambda rows, width: False  # the plain function: nothing claimed

    def holds(rows: int, width: int) -> bool:
        if width <= 0:
            return True
        kk = k if k < width else width
        return rows * _bytes_per_row(width, kk) <= block_bytes

    return holds

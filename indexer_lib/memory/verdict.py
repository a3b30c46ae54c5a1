"""Which of a step's lines fails: the one rule the ledger's verdict (``ledger.Ledger.oom_line``)
and a sweep's rows (``sweep.rows.step_verdict``) read, so the two cannot disagree.

A step's lines (its prefill transient peak, its decode logits, the caching allocator's segments)
are held, in the ledger's order, against the memory free when the step runs; the first that asks
for more than is free is the line that fails, and a line asking for exactly what is free fits.
"""
from __future__ import annotations

import numpy as np

NO_LINE = -1  # every line fits


def first_past_free(needs, free_bytes):
    """The index of the first of ``needs`` (the lines' bytes, in order) above ``free_bytes``, or
    ``NO_LINE``.  Each need is a number or an array with one entry a row (a sweep's rows at
    once): the answer is then an array of indices, one a row."""
    if len(needs) == 0:
        return NO_LINE
    past = np.stack(np.broadcast_arrays(*(np.asarray(n) for n in needs))) > free_bytes
    return np.where(past.any(axis=0), past.argmax(axis=0), NO_LINE)

"""A chunk's transient bytes, each term written once, for one chunk or for arrays of them.

A chunk allocates its logits (DeepGEMM's padded layout, or what a release's own path sizes), its
metadata (ks and ke per row, and one cache slot per K token it gathers), a K buffer of its own
where the engine allocates one per chunk, and the temporaries of what runs it; the previous
chunk's logits may still be alive while its logits are computed.  ``chunk_memory`` counts a
plan's chunks with these terms, ``ChunkBytes`` counts a chunk from its shape alone (the frontier's
planned shapes, and arrays of steps at once: ``memory.steps``).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import FP32_BYTES, INT32_BYTES
from ..elementwise import is_array, maximum, where
from .topk_bytes import topk_counter, topk_holds_every_row


def transient_total(logits, metadata, temporaries, running=0, kv_buffer=0, held=0, held_with=0, staged=0):
    """A chunk's transient bytes: its logits, metadata, a column range's merge state
    (``running``) and its own K buffer, with the larger of its temporaries and what lives
    during its logits call: the previous chunk's logits (``held``), the kernel's own logits before
    the engine's copy of them (``staged``: DeepGEMM's bf16 on SM100) and its own temporaries then
    (``held_with``)."""
    return logits + metadata + running + kv_buffer + maximum(temporaries, held + held_with + staged)


def metadata_bytes_of(rows, gathered):
    """ks and ke per row; one cache slot per K token the chunk gathers (``gathered``: those tokens)."""
    return INT32_BYTES * (2 * rows + gathered)


def padded_inputs_of(rows: int, alloc_rows: int | None, heads: int, head_dim: int) -> int:
    """DeepGEMM allocates its own logits, so a fixed-shape chunk pads its inputs instead: q ``[R,
    H, D]`` fp8, weights ``[R, H]`` fp32 and ks/ke ``[R]`` int32 with R = ``alloc_rows`` (the extra
    rows have empty windows).  0 for a chunk that is not padded."""
    if alloc_rows is None or alloc_rows <= rows:
        return 0
    return alloc_rows * input_row_bytes(heads, head_dim)


def input_row_bytes(heads: int, head_dim: int) -> int:
    """One query row of a logits call's inputs: q ``[H, D]`` fp8, weights ``[H]`` fp32, ks and ke int32."""
    return heads * head_dim + FP32_BYTES * heads + 2 * INT32_BYTES


def kernel_inputs_of(rows, alloc_rows, heads: int, head_dim: int, rules):
    """The inputs a kernel that pads its rows copies to them before allocating its logits, alive
    through its call (``PaddingRules.copies_inputs``: aiter's FlyDSL kernel on gfx942,
    ``aiter/ops/flydsl/kernels/mqa_logits/fp8_mqa_logits.py:528-536`` at e4048607a5: torch.cat of
    q, weights, ks and ke with zero rows up to an even count).  0 where the rows are already
    whole; the kernel sees ``alloc_rows`` where a fixed-shape chunk padded its inputs first."""
    if not rules.copies_inputs:
        return 0
    seen = rows if alloc_rows is None else alloc_rows
    padded = rules.rows_allocated(seen, heads)
    return where(padded > seen, padded * input_row_bytes(heads, head_dim), 0)


def kv_bytes_per_gathered_token(settings) -> int:
    """The bytes of a chunk's own K buffer per token it gathers: fp8 K + fp32 scale where the
    engine allocates one per chunk (vLLM before 0.13.0), else none (the workspace holds them)."""
    return settings.preset.k_bytes_per_token if settings.workspace_lifetime == "chunk" else 0


def deepgemm_phases(rows, cols, alloc_rows, heads: int, head_dim: int, topk_bytes, rules=None):
    """The H200 path's temporaries of a chunk, (during its logits call, during its top-k):
    DeepGEMM computes on chip, so a fixed-shape chunk's padded inputs live through the call (and,
    on ROCm, the inputs the logits ``rules``' kernel copies to its padded rows: ``kernel_inputs_of``),
    then the window top-k's (``topk_bytes(rows, cols)``) take their place."""
    during = padded_inputs_of(rows, alloc_rows, heads, head_dim)
    if rules is not None:
        during = during + kernel_inputs_of(rows, alloc_rows, heads, head_dim, rules)
    return during, topk_bytes(rows, cols)


def logits_alloc(allocated, rows, cols, compressed: bool, alloc_rows=None, alloc_bytes=None):
    """A chunk's logits allocation: ``allocated(rows, cols, compressed)`` (the build's layout,
    ``PlanSettings.counters``) at its padded rows where it has them, or ``alloc_bytes`` where the
    release's path sizes them its own way."""
    if alloc_bytes is not None:
        return alloc_bytes
    return allocated(rows if alloc_rows is None else alloc_rows, cols, compressed)


def staged_alloc(staged, rows, cols, compressed: bool, alloc_rows=None, alloc_bytes=None):
    """The kernel's own logits before the engine's copy (``PlanSettings.staged``), counted as
    ``logits_alloc`` counts the copy: none where there is no copy or the path sizes its own."""
    if staged is None or alloc_bytes is not None:
        return 0
    return staged(rows if alloc_rows is None else alloc_rows, cols, compressed)


class ChunkBytes:
    """A chunk's transient bytes from its shape, under one set of plan settings, with the H200
    path's temporaries (``deepgemm``: the window top-k's, or a fixed-shape chunk's padded inputs)
    or none counted.  Numbers or numpy arrays of them."""

    def __init__(self, settings, deepgemm: bool, topk: int):
        model = settings.preset
        self.deepgemm = deepgemm
        self.allocated = settings.counters[1]  # what DeepGEMM allocates, padding included
        self.staged = settings.staged  # DeepGEMM's bf16 before the engine's fp32 copy, or None
        self.topk_bytes = topk_counter(topk)  # the window top-k's temporaries
        self.topk_grows = topk_holds_every_row(topk)  # where they only grow with the width
        self.heads, self.head_dim = model.index_heads, model.head_dim
        self.rules = settings.rules  # the logits kernel's rules: whether it copies its inputs
        self.kv_per_token = kv_bytes_per_gathered_token(settings)

    def logits(self, rows, cols, compressed: bool, alloc_rows=None, alloc_bytes=None):
        return logits_alloc(self.allocated, rows, cols, compressed, alloc_rows, alloc_bytes)

    def total(self, rows, cols, compressed: bool, gather, kv, held=0, alloc_rows=None, alloc_bytes=None):
        """The chunk's transient bytes, ``held``: the logits of the chunk before it still alive
        (freed before the top-k's temporaries take their place)."""
        gathered = where(gather, kv, 0)
        staged = staged_alloc(self.staged, rows, cols, compressed, alloc_rows, alloc_bytes)
        tmp = held_with = 0
        if self.deepgemm:
            during_logits, during_topk = deepgemm_phases(rows, cols, alloc_rows, self.heads, self.head_dim,
                                                         self.topk_bytes, self.rules)
            tmp, held_with = maximum(during_logits, during_topk), where((held > 0) | (staged > 0), during_logits, 0)
        return transient_total(self.logits(rows, cols, compressed, alloc_rows, alloc_bytes),
                               metadata_bytes_of(rows, gathered), tmp, 0, gathered * self.kv_per_token, held,
                               held_with, staged)

    def run_largest(self, rows, start, count, ratio: int, compressed: bool, gather, kv):
        """The largest of a causal run's ``count`` chunks of ``rows`` rows, the j-th (j = 1..count)
        ``(start + j x rows) // ratio`` wide (0 for none): its widest where no term can fall as the
        width grows (the logits' padded stride never does; the top-k's block holds every row at the
        widest), else each counted."""
        widest = (start + count * rows) // ratio
        largest = where(count > 0, self.total(rows, widest, compressed, gather, kv), 0)
        if not self.deepgemm:
            return largest
        each = (count > 0) & (self.topk_grows(rows, widest) ^ True)
        if not is_array(each):
            if not each:
                return largest
            j = np.arange(1, count + 1)
            return int(self.total(rows, (start + j * rows) // ratio, compressed, gather, kv).max())
        at = np.flatnonzero(each)
        if at.size:
            counts = count[at]
            owner = np.repeat(np.arange(at.size), counts)
            j = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + 1
            r = _at(rows, at)[owner]
            totals = self.total(r, (_at(start, at)[owner] + j * r) // ratio, compressed, _at(gather, at)[owner],
                                _at(kv, at)[owner])
            most = np.zeros(at.size, dtype=np.int64)
            np.maximum.at(most, owner, totals)
            largest[at] = most
        return largest


def _at(x, at):
    """``x`` at the positions ``at``, where ``x`` is an array (a number: itself, broadcast)."""
    return x[at] if is_array(x) else np.full(at.size, x)

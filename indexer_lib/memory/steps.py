"""Arrays of steps planned at once, as the frontier reads them: a builder (``plan.builders``) that
records, per step, its chunk count, whether a chunk breaks a limit and its largest chunk's
transient bytes (``chunk_bytes.ChunkBytes``), from the same strategy and release-path code that
plans one step into chunks (``Strategy.split`` on a ``workload.StepArrays``).

``StepsMemory.outcomes`` adds each step's buffers (``buffer_bytes``): per step, what
``memory_report`` says of its plan's peak.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..elementwise import any_of, maximum, where
from ..plan import Budgeting, Piece, RowSlices, Slicing, equal_slices
from .chunk_bytes import ChunkBytes
from .model import buffer_bytes


def _at(x, at: np.ndarray):
    """``x`` at positions ``at`` where it is an array (a number holds for every step)."""
    return x[at] if type(x) is np.ndarray else x


class StepPeaks(NamedTuple):
    """Per step (arrays, one entry a step): what ``memory_report`` says of its plan's peak."""

    transient: np.ndarray
    peak: np.ndarray
    chunks: np.ndarray
    over_budget: np.ndarray


class StepsMemory:
    """Records arrays of steps' chunks (``add``, ``add_rows``, ``add_alone``) into their counts and
    largest chunk, each chunk after the logits the chunk before it left alive where the plan keeps
    two chunks' logits (``logits_alive`` 2)."""

    def __init__(self, batch, b: Budgeting, chunk_bytes: ChunkBytes, logits_alive: int):
        self.batch, self.b, self.bytes = batch, b, chunk_bytes
        self.alive = logits_alive
        self.every_chunk_gathers = b.settings.workspace_lifetime == "chunk"  # a K buffer per chunk
        size = batch.size
        self.count = np.zeros(size, dtype=np.int64)
        self.over = np.zeros(size, dtype=bool)
        self.largest = np.zeros(size, dtype=np.int64)
        self.held = np.zeros(size, dtype=np.int64)  # the logits the last chunk so far leaves alive

    def _chunks(self, among, shape: tuple, times=1):
        """``times`` alike chunks of this ``shape`` (rows, cols, compressed, alloc rows, K, gather,
        alloc bytes) where ``among`` holds: the first after what is held, each after it after the
        one before."""
        at = np.flatnonzero(np.broadcast_to(among, self.count.shape))
        if at.size:
            self._chunks_at(at, tuple(_at(x, at) for x in shape), _at(times, at))

    def _chunks_at(self, at: np.ndarray, shape: tuple, times=1):
        """``_chunks`` for the steps at positions ``at``, the shape's lengths given for those."""
        rows, cols, compressed, alloc_rows, kv, gather, alloc_bytes = shape
        gather = gather | self.every_chunk_gathers
        held = self.held[at]
        total = self.bytes.total(rows, cols, compressed, gather, kv, held, alloc_rows, alloc_bytes)
        logits = self.bytes.logits(rows, cols, compressed, alloc_rows, alloc_bytes) if self.alive > 1 else 0
        if self.alive > 1 and any_of(times > 1):
            total = maximum(total, self.bytes.total(rows, cols, compressed, gather, kv, logits, alloc_rows,
                                                    alloc_bytes))
        self.largest[at] = maximum(self.largest[at], total)
        self.count[at] += times
        self.held[at] = logits

    def _over(self, among, over, kv) -> None:
        """A chunk breaks a limit where ``among`` holds: no split meets the budget, or its K
        outgrows the workspace."""
        at = np.flatnonzero(np.broadcast_to(among, self.count.shape))
        self._over_at(at, _at(over, at), _at(kv, at))

    def _over_at(self, at: np.ndarray, over, kv) -> None:
        """``_over`` for the steps at positions ``at``, ``over`` and ``kv`` given for those."""
        self.over[at] |= over | (kv > _at(self.b.workspace, at))

    def add(self, piece: Piece, times: int = 1, among=True) -> None:
        r0, r1, q0, q1, cols, gather, over, compressed, kv, kv_start, alloc_rows, alloc_bytes = piece
        if kv is None or kv_start:
            raise ValueError("arrays of steps record chunks with their K given and no column split")
        self._over(among, over, kv)
        self._chunks(among, (q1 - q0, cols, compressed, alloc_rows, kv, gather, alloc_bytes), times)

    def add_rows(self, run: RowSlices, times: int = 1, among=True) -> None:
        r0, r1, rows, per, cols, q0, kv, over, compressed, alloc_bytes = run
        kv = cols if kv is None else kv
        size = (lambda n: None) if alloc_bytes is None else alloc_bytes
        first, full, rest = equal_slices(rows, per)
        self._over(among, over, kv)
        for _ in range(times):
            self._chunks(among, (first, cols, compressed, None, kv, True, size(first)))
            self._chunks(among & (full > 0), (per, cols, compressed, None, kv, False, size(per)), full)
            self._chunks(among & (rest > 0), (rest, cols, compressed, None, kv, False, size(rest)))

    def add_alone(self, i: int, slicing: Slicing, times: int = 1, among=True) -> None:
        """A request cut into runs of growing slices (``Slicing.growing``: a causal cut), each run's
        lengths given for the steps that have it."""
        if not slicing.growing or self.alive > 1:
            raise ValueError("arrays of steps record causal cuts, with one chunk's logits alive at once")
        compressed, ratio = slicing.compressed, slicing.request.ratio
        context = slicing.request.context_len
        for _ in range(times):
            for (q0, q1, cols, gather, over, _, kv), alike, at in slicing.runs():
                self._over_at(at, over, kv)
                self._chunks_at(at, (q1 - q0, cols, compressed, None, kv, gather, None))
                # the run after it: alike - 1 slices of as many rows, each as wide as its last row's window
                grown = np.flatnonzero(np.broadcast_to(alike > 1, at.shape))
                if grown.size:
                    g = at[grown]
                    total = self.bytes.run_largest(_at(q1 - q0, grown), context[g] + _at(q1, grown),
                                                   _at(alike, grown) - 1, ratio, compressed,
                                                   self.every_chunk_gathers, _at(kv, grown))
                    self.largest[g] = maximum(self.largest[g], total)
                    self.count[g] += _at(alike, grown) - 1

    def outcomes(self, topk_rows, topk: int) -> StepPeaks:
        """Each step's peaks, with its top-k output ``topk_rows`` rows (None: the step's own rows)."""
        rows = self.batch.num_rows if topk_rows is None else topk_rows
        workspace, topk_out, call = buffer_bytes(self.b.settings, self.b.workspace, rows, topk)
        transient = call + self.largest
        return StepPeaks(transient, workspace + topk_out + transient, self.count, self.over)

"""Where a strategy puts the chunks it decides on.

A strategy decides; a builder records.  ``ChunkBuilder`` records every chunk
(the plan the executor, the memory model and the JSON read).  ``ShapeBuilder``
records only how many chunks there are, whether one breaks a limit, and their
distinct shapes: a frontier asks nothing else of a step, and the memory model's
transient peak depends on a chunk's shape alone (``memory.shapes_peak``).  Both
run the same strategy code, so the two cannot drift.

A request sliced alone is sliced the same way wherever it appears (its rows and
context decide, not its neighbours): ``lone_slices`` remembers each slicing, with
the budget interval over which it holds, across steps, workloads and budgets.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from ..caches import PerSettings
from ..workload import PrefillRequest, StepBatch
from .chunks import Chunk


class Slice(NamedTuple):
    """One row slice of a request planned alone, relative to the request."""

    q0: int
    q1: int
    cols: int
    gather: bool
    over: bool  # no split meets the budget (the workspace is checked when it is placed)
    compressed: bool
    kv_tokens: int


class LoneSlices:
    """A request's slices and the budget interval over which the slicing holds."""

    __slots__ = ("slices", "low", "high", "sequence", "shapes", "pairs", "over", "kv_tokens")

    def __init__(self, slices: tuple[Slice, ...], low: int, high: int | None):
        self.slices, self.low, self.high = slices, low, high
        # the shape key of memory.model (rows, cols, compressed, alloc_rows, kv_tokens, gather), per slice
        self.sequence = tuple((s.q1 - s.q0, s.cols, s.compressed, None, s.kv_tokens, s.gather) for s in slices)
        self.shapes = dict.fromkeys(self.sequence)
        self.pairs = dict.fromkeys(zip(self.sequence, self.sequence[1:]))  # each slice after the one before
        self.over = any(s.over for s in slices)
        self.kv_tokens = max(s.kv_tokens for s in slices)


# per (kind, layout, padding, DeepGEMM version, row multiple): the slicings by (rows, context,
# budget); bounded for a long-lived dashboard (the long-context grid holds about 10,000)
_LONE = PerSettings(limit=100_000)


def lone_slices(b, kind: str, request: PrefillRequest, compressed: bool,
                slice_request: Callable[[], list[Slice]]) -> LoneSlices:
    """``slice_request()``'s slices of ``request`` planned alone, computed once per request
    shape and budget (``b``, a ``Budgeting``); ``b``'s budget interval is narrowed as if the
    slicing had asked it again."""
    slicings = _LONE.of((kind, compressed, b.padded, b.rules.version, b.row_multiple))
    key = (request.query_len, request.context_len, b.budget)
    known = slicings.get(key)
    if known is None:
        saved = b.stable_low, b.stable_high
        b.stable_low, b.stable_high = 0, None
        try:
            slices = tuple(slice_request())
            known = LoneSlices(slices, b.stable_low, b.stable_high)
        finally:
            b.stable_low, b.stable_high = saved
        _LONE.add(slicings, key, known)
    b.narrow(known.low, known.high)
    return known


class ChunkBuilder:
    """Records every chunk, with the absolute row offsets of the batch."""

    def __init__(self, batch: StepBatch, b):
        self.batch, self.b = batch, b
        self.row_offset = [0]
        for r in batch.requests:
            self.row_offset.append(self.row_offset[-1] + r.query_len)
        self.chunks: list[Chunk] = []

    def add(self, r0, r1, q0, q1, cols, gather, over, compressed=False, kv_tokens=None,
            kv_start=0, alloc_rows=None, times=1):
        """A chunk of requests [r0, r1), rows [q0, q1) of theirs; ``times``: and the same
        chunk of each of the ``times - 1`` equal groups of requests that follow."""
        reqs = self.batch.requests[r0:r1]
        n = sum(r.seq_len for r in reqs) if kv_tokens is None else kv_tokens
        over = over or n > self.b.workspace
        rows = q1 - q0 if alloc_rows is None else alloc_rows
        size = r1 - r0
        for k in range(r0, r0 + times * size, size):
            self.chunks.append(
                Chunk(
                    requests=(k, k + size),
                    rows=(q0, q1),
                    token_start=self.row_offset[k] + q0,
                    token_end=self.row_offset[k] + q1,
                    kv_tokens=n,
                    logits_cols=cols,
                    logits_bytes=self.b.allocated(rows, cols, compressed),
                    gather=gather,
                    over_budget=over,
                    compressed=compressed,
                    kv_start=kv_start,
                    alloc_rows=alloc_rows,
                )
            )

    def add_alone(self, i: int, lone: LoneSlices, times: int = 1) -> None:
        """Request i sliced alone, and the ``times - 1`` identical requests after it."""
        for k in range(i, i + times):
            for s in lone.slices:
                self.add(k, k + 1, s.q0, s.q1, s.cols, s.gather, s.over, s.compressed, s.kv_tokens)

    def add_rows(self, r0: int, r1: int, rows: int, per: int, cols: int, kv_tokens: int) -> None:
        """The rows [0, rows) of requests [r0, r1) in slices of ``per`` rows, each ``cols`` wide;
        the first gathers the K, the others reuse it."""
        for q0 in range(0, rows, per):
            self.add(r0, r1, q0, min(q0 + per, rows), cols, gather=q0 == 0, over=False, kv_tokens=kv_tokens)

    def result(self) -> list[Chunk]:
        return self.chunks


class ShapeBuilder:
    """Records a plan's chunk count, whether a chunk breaks a limit, and its chunks'
    distinct shapes (the memory model's shape key), in the order they first appear."""

    def __init__(self, batch: StepBatch, b):
        self.batch, self.b = batch, b
        self.shapes: dict[tuple, None] = {}
        self.num_chunks = 0
        self.over_budget = False

    def add(self, r0, r1, q0, q1, cols, gather, over, compressed=False, kv_tokens=None,
            kv_start=0, alloc_rows=None, times=1):
        if kv_start:
            raise ValueError("a column-split chunk's memory depends on its neighbours: "
                             "plan it with a ChunkBuilder")
        n = sum(self.batch.seq_lens[r0:r1]) if kv_tokens is None else kv_tokens
        shape = (q1 - q0, cols, compressed, alloc_rows, n, gather)
        self.shapes[shape] = None
        self.num_chunks += times
        self.over_budget = self.over_budget or over or n > self.b.workspace
        return shape

    def add_rows(self, r0: int, r1: int, rows: int, per: int, cols: int, kv_tokens: int) -> None:
        """``ChunkBuilder.add_rows``: the first slice, the full slices after it at once, the rest."""
        first = min(per, rows)
        self.add(r0, r1, 0, first, cols, True, False, kv_tokens=kv_tokens)
        full = (rows - first) // per
        if full:
            self.add(r0, r1, first, first + per, cols, False, False, kv_tokens=kv_tokens, times=full)
        if first + full * per < rows:
            self.add(r0, r1, first + full * per, rows, cols, False, False, kv_tokens=kv_tokens)

    def add_alone(self, i: int, lone: LoneSlices, times: int = 1) -> None:
        self.shapes.update(lone.shapes)
        self.num_chunks += len(lone.slices) * times
        self.over_budget = self.over_budget or lone.over or lone.kv_tokens > self.b.workspace

    def result(self) -> "ShapeBuilder":
        return self


class NeighbourShapeBuilder(ShapeBuilder):
    """A ``ShapeBuilder`` that also records each chunk's shape next to the shape of the chunk
    before it (None for the first): where an engine keeps a chunk's logits alive while the
    next chunk's are allocated, a chunk's bytes depend on its neighbour (``memory.shapes_peak``)."""

    def __init__(self, batch: StepBatch, b):
        super().__init__(batch, b)
        self.pairs: dict[tuple, None] = {}  # (previous shape or None, shape), in order of appearance
        self.last: tuple | None = None

    def add(self, r0, r1, q0, q1, cols, gather, over, compressed=False, kv_tokens=None,
            kv_start=0, alloc_rows=None, times=1):
        shape = super().add(r0, r1, q0, q1, cols, gather, over, compressed, kv_tokens, kv_start, alloc_rows, times)
        self.pairs[(self.last, shape)] = None
        if times > 1:
            self.pairs[(shape, shape)] = None
        self.last = shape
        return shape

    def add_alone(self, i: int, lone: LoneSlices, times: int = 1) -> None:
        super().add_alone(i, lone, times)
        first, last = lone.sequence[0], lone.sequence[-1]
        self.pairs[(self.last, first)] = None
        self.pairs.update(lone.pairs)
        if times > 1:
            self.pairs[(last, first)] = None
        self.last = last

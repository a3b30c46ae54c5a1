"""Builders that record a plan's chunk count and distinct chunk shapes instead of each chunk.

A frontier asks nothing else of a step: the memory model's transient peak depends on a
chunk's shape alone (``ChunkShape``), or, where an engine keeps the previous chunk's logits
alive while the next chunk's are allocated, on its shape and its neighbour's
(``NeighbourShapeBuilder`` records the pairs).  They take the same calls from the same
strategy code as ``plan.ChunkBuilder``.

A request cut alone is cut the same way wherever it appears (its lengths and the budget
decide, not its neighbours): ``CutShapes`` keeps each cut, with the budget interval over which
it holds, across steps, workloads and budgets.
"""
from __future__ import annotations

from typing import NamedTuple

from ..plan import Piece, RowSlices, Slicing, equal_slices
from ..workload import StepBatch
from .caches import PerSettings


class ChunkShape(NamedTuple):
    """What a chunk's bytes depend on (``memory.chunk_memory``), as the key of a distinct shape."""

    rows: int
    cols: int
    compressed: bool
    alloc_rows: int | None
    kv_tokens: int
    gather: bool
    alloc_bytes: int | None = None


class ShapeRun(NamedTuple):
    """A growing run of a cut (``Slicing.growing``: each slice the next rows, as wide as its last
    row's window) as one key: ``count`` chunks of ``rows`` rows, the j-th (j = 1..count)
    ``(start + j * rows) // ratio`` columns wide, the widest ``last_cols``.  A long prompt's
    cut is a few runs of hundreds of slices, each slice a shape of its own; the peak reads a
    run's widest chunk where the bytes cannot fall as the width grows (``memory.ChunkBytes.run_largest``), and
    only otherwise each of them.  Eight fields: never equal to a ``ChunkShape``."""

    rows: int
    compressed: bool
    kv_tokens: int
    gather: bool
    start: int
    ratio: int
    count: int
    last_cols: int

    def shapes(self) -> list[ChunkShape]:
        rows, compressed, kv_tokens, gather, start, ratio, count, _ = self
        return [ChunkShape(rows, (start + j * rows) // ratio, compressed, None, kv_tokens, gather)
                for j in range(1, count + 1)]


def expand(shapes) -> list[ChunkShape]:
    """Every chunk shape of a builder's shapes, each run's in order (``ShapeRun.shapes``)."""
    out = []
    for key in shapes:
        out.extend(key.shapes() if type(key) is ShapeRun else (key,))
    return out


class CutShapes:
    """A request's slices as shapes (a growing run as one ``ShapeRun``), and the budget interval
    over which the cut holds."""

    __slots__ = ("count", "low", "high", "first", "last", "shapes", "over", "kv_tokens", "_cut", "_pairs")

    def __init__(self, runs, low: int, high: int | None, every_chunk_gathers: bool, request=None):
        """``runs``: the slices as (slice, how many from it on, None) (``Slicing.runs`` of one
        step): alike, or, given the ``request`` of a growing cut (``Slicing.growing``), each the
        next rows, as wide as its last row's window."""
        self.low, self.high = low, high
        # one pass, records made by tuple's own constructor: a million-token prompt's cuts make
        # millions of slices over a grid
        count, over, kv_most, last = 0, False, 0, None
        shapes = {}  # distinct shapes (and runs), in order
        for (q0, q1, cols, gather, slice_over, compressed, kv_tokens), alike, _ in runs:
            shape = tuple.__new__(ChunkShape, (q1 - q0, cols, compressed, None, kv_tokens,
                                               gather or every_chunk_gathers, None))
            shapes[shape] = None
            if last is None:
                self.first = shape
            last = shape
            if alike > 1 and request is not None:  # each the next rows, wider than the one before
                rows, start = q1 - q0, request.context_len + q1
                widest = (start + (alike - 1) * rows) // request.ratio
                last = tuple.__new__(ChunkShape, (rows, widest, compressed, None, kv_tokens, every_chunk_gathers, None))
                if alike == 2:
                    shapes[last] = None
                else:
                    shapes[tuple.__new__(ShapeRun, (rows, compressed, kv_tokens, every_chunk_gathers, start,
                                                    request.ratio, alike - 1, widest))] = None
            count += alike
            over = over or slice_over
            if kv_tokens > kv_most:
                kv_most = kv_tokens
        self.count, self.last, self.shapes = count, last, shapes
        self.over, self.kv_tokens = over, kv_most
        self._cut = (runs, every_chunk_gathers, request)  # for the pairs, made only when asked
        self._pairs = None

    @property
    def pairs(self) -> dict:
        """Each distinct pair of neighbouring shapes (the shape before, the shape), in order: made
        when asked (an engine's chunk loop that keeps two chunks' logits alive asks)."""
        if self._pairs is None:
            runs, every_chunk_gathers, request = self._cut
            pairs, last = {}, None
            for (q0, q1, cols, gather, slice_over, compressed, kv_tokens), alike, _ in runs:
                shape = ChunkShape(q1 - q0, cols, compressed, None, kv_tokens, gather or every_chunk_gathers)
                if last is not None:
                    pairs[(last, shape)] = None
                if alike > 1 and request is None:  # alike slices
                    pairs[(shape, shape)] = None
                last = shape
                if alike > 1 and request is not None:  # each wider than the one before
                    grown = ShapeRun(q1 - q0, compressed, kv_tokens, every_chunk_gathers, request.context_len + q1,
                                     request.ratio, alike - 1, 0).shapes()
                    for shape in grown:
                        pairs[(last, shape)] = None
                        last = shape
            self._pairs = pairs
        return self._pairs


# per (cut, layout, padding, DeepGEMM version, row multiple, K per chunk): the cuts by (rows,
# context, budget); bounded for a long-lived dashboard (the long-context grid holds about 10,000)
_CUTS = PerSettings(limit=100_000)


def cut_shapes(b, slicing: Slicing, every_chunk_gathers: bool) -> CutShapes:
    """``slicing``'s cut of its request, made once per request shape and budget (``b``, a
    ``Budgeting``); ``b``'s budget interval is narrowed as if the cut had asked it again."""
    kind, request, compressed, cut, runs, growing = slicing
    cuts = _CUTS.of((kind, compressed, b.padded, b.rules.version, b.row_multiple, every_chunk_gathers))
    key = (request.query_len, request.context_len, request.ratio, b.budget)
    known = cuts.get(key)
    if known is None:
        saved = b.stable_low, b.stable_high
        b.stable_low, b.stable_high = 0, None
        try:
            alike = runs() if runs is not None else [(s, 1, None) for s in cut()]
            known = CutShapes(alike, b.stable_low, b.stable_high, every_chunk_gathers,
                               request if growing else None)
        finally:
            b.stable_low, b.stable_high = saved
        _CUTS.add(cuts, key, known)
    b.narrow(known.low, known.high)
    return known


class ShapeBuilder:
    """Records a plan's chunk count, whether a chunk breaks a limit, and its chunks' distinct
    shapes, in the order they first appear."""

    def __init__(self, batch: StepBatch, b):
        self.batch, self.b = batch, b
        self.every_chunk_gathers = b.settings.workspace_lifetime == "chunk"  # a K buffer per chunk
        self.shapes: dict[ChunkShape, None] = {}
        self.num_chunks = 0
        self.over_budget = False

    def add(self, piece: Piece, times: int = 1, among=True) -> ChunkShape:
        if not among:
            return None
        r0, r1, q0, q1, cols, gather, over, compressed, kv_tokens, kv_start, alloc_rows, alloc_bytes = piece
        if kv_start:
            raise ValueError("a column-split chunk's memory depends on its neighbours: "
                             "plan it with a ChunkBuilder")
        n = sum(self.batch.seq_lens[r0:r1]) if kv_tokens is None else kv_tokens
        # the record made by tuple's own constructor: a grid adds hundreds of thousands
        shape = tuple.__new__(ChunkShape, (q1 - q0, cols, compressed, alloc_rows, n,
                                           gather or self.every_chunk_gathers, alloc_bytes))
        self.shapes[shape] = None
        self.num_chunks += times
        self.over_budget = self.over_budget or over or n > self.b.workspace
        return shape

    def add_rows(self, run: RowSlices, times: int = 1, among=True) -> None:
        """``ChunkBuilder.add_rows``: the first slice, the full slices after it at once, the rest;
        for each of the ``times`` equal groups of requests."""
        if not among:
            return
        r0, r1, rows, per, cols, q0, kv, over, compressed, alloc_bytes = run
        kv = cols if kv is None else kv
        size = (lambda n: None) if alloc_bytes is None else alloc_bytes
        first, full, last = equal_slices(rows, per)
        for _ in range(times):
            self.add(Piece(r0, r1, q0, q0 + first, cols, True, over, compressed, kv_tokens=kv,
                           alloc_bytes=size(first)))
            if full:
                self.add(Piece(r0, r1, q0 + first, q0 + first + per, cols, False, over, compressed, kv_tokens=kv,
                               alloc_bytes=size(per)), times=full)
            if last > 0:
                self.add(Piece(r0, r1, q0 + first + full * per, q0 + rows, cols, False, over, compressed,
                               kv_tokens=kv, alloc_bytes=size(last)))

    def add_alone(self, i: int, slicing: Slicing, times: int = 1, among=True) -> CutShapes | None:
        if not among:
            return None
        cut = cut_shapes(self.b, slicing, self.every_chunk_gathers)
        self.shapes.update(cut.shapes)
        self.num_chunks += cut.count * times
        self.over_budget = self.over_budget or cut.over or cut.kv_tokens > self.b.workspace
        return cut


class NeighbourShapeBuilder(ShapeBuilder):
    """A ``ShapeBuilder`` that also records each chunk's shape next to the shape of the chunk
    before it (None for the first)."""

    def __init__(self, batch: StepBatch, b):
        super().__init__(batch, b)
        self.pairs: dict[tuple, None] = {}  # (previous shape or None, shape), in order of appearance
        self.last: ChunkShape | None = None

    def add(self, piece: Piece, times: int = 1, among=True) -> ChunkShape:
        shape = super().add(piece, times, among)
        if shape is None:
            return None
        self.pairs[(self.last, shape)] = None
        if times > 1:
            self.pairs[(shape, shape)] = None
        self.last = shape
        return shape

    def add_alone(self, i: int, slicing: Slicing, times: int = 1, among=True) -> CutShapes | None:
        cut = super().add_alone(i, slicing, times, among)
        if cut is None:
            return None
        first, last = cut.first, cut.last
        self.pairs[(self.last, first)] = None
        self.pairs.update(cut.pairs)
        if times > 1:
            self.pairs[(last, first)] = None
        self.last = last
        return cut

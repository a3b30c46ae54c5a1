"""Where a strategy puts the chunks it decides on.

A strategy decides; a builder records.  ``ChunkBuilder`` records every chunk (the plan
the executor, the memory model and the JSON read).  The frontier's builders record only what
it asks of a step: ``fast.ShapeBuilder`` the chunk count and the chunks' distinct shapes,
``memory.StepsMemory`` the count and the largest chunk's bytes of arrays of steps at once.
All take the same calls from the same strategy code, so they cannot drift.

A builder takes three calls: ``add`` (one chunk, and the same chunk of equal groups of
requests after it), ``add_alone`` (a request that alone breaks a limit, cut into row
slices) and ``add_rows`` (a run of equal row slices of the same requests).  Each takes
``among``, the steps it applies to (a bool planning one step, a mask planning arrays of them).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from ..elementwise import minimum
from ..workload import PrefillRequest, StepBatch
from .chunks import Chunk


class Piece(NamedTuple):
    """One chunk as a strategy decides it: requests [r0, r1), rows [q0, q1) of theirs."""

    r0: int
    r1: int
    q0: int
    q1: int
    cols: int  # width of its logits
    gather: bool  # False: it reuses the K the previous chunk gathered
    over: bool  # no split meets the budget
    compressed: bool = False
    kv_tokens: int | None = None  # K it gathers (default: its requests' seq_lens)
    kv_start: int = 0  # first workspace column scored (column-split chunks)
    alloc_rows: int | None = None  # rows its logits are padded up to (fixed-shape)
    alloc_bytes: int | None = None  # bytes its logits allocation takes where not rows x cols (QSA's paths)


class Slice(NamedTuple):
    """One row slice of a request planned alone, relative to the request."""

    q0: int
    q1: int
    cols: int
    gather: bool
    over: bool  # no split meets the budget (the workspace is checked when it is placed)
    compressed: bool
    kv_tokens: int


class Slicing(NamedTuple):
    """How a strategy cuts one request that alone breaks a limit: ``cut()`` gives its slices.
    ``kind`` names the cut: a request is cut the same way wherever it appears (its lengths and
    the budget decide, not its neighbours), which the frontier's builders use to cut it once."""

    kind: str
    request: PrefillRequest
    compressed: bool
    cut: Callable[[], list[Slice]]
    # the same slices as runs, (a slice, how many alike from it on, each as many rows, where): a
    # long prompt's cut is a few runs, however many slices (None: ``cut`` only); ``where``: None
    # for one step, else the positions of the steps whose lengths the run's arrays hold
    runs: Callable[[], list[tuple]] | None = None
    # the runs' slices after the first each take the next rows and are as wide as their last
    # row's window (``packing.grown_slices``: a causal cut), instead of all alike
    growing: bool = False


class RowSlices(NamedTuple):
    """The rows [q0, q0 + rows) of requests [r0, r1) in slices of ``per`` rows, each ``cols`` wide
    against ``kv`` gathered K tokens (None: ``cols``); ``over``: no split meets the budget;
    ``compressed``: logits in DeepGEMM's max_seqlen_k layout (width aligned to 256);
    ``alloc_bytes``: a slice's logits allocation from its rows, where it is not rows x cols
    (QSA's paths).  Lengths are numbers, or arrays of them for arrays of steps."""

    r0: int
    r1: int
    rows: int
    per: int
    cols: int
    q0: int = 0
    kv: int | None = None
    over: bool = False
    compressed: bool = False
    alloc_bytes: Callable | None = None


def equal_slices(rows, per):
    """``rows`` rows in slices of ``per``: (the first slice's rows, how many full slices follow it,
    the rows of the last, shorter one or 0).  Numbers or arrays of them."""
    first = minimum(per, rows)
    full = (rows - first) // per
    return first, full, rows - first - full * per


class ChunkBuilder:
    """Records every chunk, with the absolute row offsets of the batch."""

    def __init__(self, batch: StepBatch, b):
        self.batch, self.b = batch, b
        self.row_offset = [0]
        for r in batch.requests:
            self.row_offset.append(self.row_offset[-1] + r.query_len)
        # an engine that allocates a K buffer per chunk gathers for every chunk
        self.every_chunk_gathers = b.settings.workspace_lifetime == "chunk"
        self.chunks: list[Chunk] = []

    def add(self, piece: Piece, times: int = 1, among=True) -> None:
        """The chunk, and the same chunk of each of the ``times - 1`` equal groups of requests
        that follow its own."""
        if not among:
            return
        r0, r1, q0, q1, cols, gather, over, compressed, kv, kv_start, alloc_rows, alloc_bytes = piece
        n = sum(self.batch.seq_lens[r0:r1]) if kv is None else kv
        rows = q1 - q0 if alloc_rows is None else alloc_rows
        nbytes = self.b.allocated(rows, cols, compressed) if alloc_bytes is None else alloc_bytes
        gather, over = gather or self.every_chunk_gathers, over or n > self.b.workspace
        size, offset, append = r1 - r0, self.row_offset, self.chunks.append
        for k in range(r0, r0 + times * size, size):
            # a record made with one dict update (a dataclass's __init__ sets each field): a long
            # run plans a hundred thousand steps
            chunk = object.__new__(Chunk)
            chunk.__dict__.update(requests=(k, k + size), rows=(q0, q1), token_start=offset[k] + q0,
                                  token_end=offset[k] + q1, kv_tokens=n, logits_cols=cols, logits_bytes=nbytes,
                                  gather=gather, over_budget=over, compressed=compressed, kv_start=kv_start,
                                  alloc_rows=alloc_rows, alloc_bytes=alloc_bytes)
            append(chunk)

    def add_alone(self, i: int, slicing: Slicing, times: int = 1, among=True) -> None:
        """Request i cut into row slices, and the ``times - 1`` identical requests after it."""
        if not among:
            return
        slices = slicing.cut()
        for k in range(i, i + times):
            for s in slices:
                self.add(Piece(k, k + 1, s.q0, s.q1, s.cols, s.gather, s.over, s.compressed, s.kv_tokens))

    def add_rows(self, run: "RowSlices", times: int = 1, among=True) -> None:
        """A run of row slices (``RowSlices``): the first gathers the K, the others reuse it; then
        the same for each of the ``times - 1`` equal groups of requests after its own."""
        if not among:
            return
        r0, r1, rows, per, cols, q0, kv, over, compressed, alloc_bytes = run
        kv = cols if kv is None else kv
        size = r1 - r0
        for k in range(r0, r0 + times * size, size):
            for q in range(0, rows, per):
                end = min(q + per, rows)
                self.add(tuple.__new__(Piece, (k, k + size, q0 + q, q0 + end, cols, q == 0, over, compressed, kv, 0,
                                               None, None if alloc_bytes is None else alloc_bytes(end - q))))

    def result(self) -> list[Chunk]:
        return self.chunks

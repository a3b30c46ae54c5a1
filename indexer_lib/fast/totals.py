"""A chunk shape's transient bytes in a few integer operations.

``memory.chunk_memory`` builds a chunk record, a ``ChunkMemory`` and walks the temporaries'
methods for every chunk; a frontier whose prompts reach a million tokens meets millions of
distinct shapes (each step's context is new), and that bookkeeping was most of its time.
``ShapeTotals`` computes the same sum for the deepgemm temporaries (or none) from the shape's
fields, with the model's constants at hand; ``test_plan_shapes`` holds it to ``chunk_memory``.
"""
from __future__ import annotations

from ..memory.model import INT32_BYTES, DeepgemmTemporaries, Temporaries
from ..memory.topk_bytes import topk_counter, topk_holds_every_row
from ..plan import Plan
from .shapes import ChunkShape, ShapeRun


class ShapeTotals:
    """``pair_total((before, shape))``: ``chunk_memory(plan, chunk of shape, logits of before, False,
    temporaries).total`` (``before`` None: nothing held), for ``DeepgemmTemporaries`` or the
    base ``Temporaries`` (none counted)."""

    def __init__(self, plan: Plan, temporaries: Temporaries):
        if type(temporaries) not in (DeepgemmTemporaries, Temporaries):
            raise ValueError(f"{type(temporaries).__name__}: ShapeTotals counts the deepgemm temporaries or none")
        settings = plan.settings
        model = settings.preset
        self.deepgemm = type(temporaries) is DeepgemmTemporaries
        self.topk_bytes = topk_counter(temporaries.topk)  # the window top-k's temporaries
        self.topk_grows = topk_holds_every_row(temporaries.topk)  # where they only grow with the width
        self.heads, self.head_dim = model.index_heads, model.head_dim
        self.logits = settings.counters[1]  # what DeepGEMM allocates, padding included
        # a K buffer allocated per gathering chunk (vLLM before 0.13.0)
        self.kv_per_token = model.k_bytes_per_token if settings.workspace_lifetime == "chunk" else 0

    def padded_inputs(self, rows: int, alloc_rows: int | None) -> int:
        """``memory.padded_inputs_bytes``: a fixed-shape chunk's inputs padded up to its rows."""
        if alloc_rows is None or alloc_rows <= rows:
            return 0
        h = self.heads
        return alloc_rows * h * self.head_dim + 4 * alloc_rows * h + 2 * INT32_BYTES * alloc_rows

    def logits_of(self, rows: int, cols: int, compressed: bool, alloc_rows: int | None, alloc_bytes: int | None) -> int:
        """``memory.logits_bytes``: the chunk's logits allocation (QSA's paths give theirs)."""
        if alloc_bytes is not None:
            return alloc_bytes
        return self.logits(rows if alloc_rows is None else alloc_rows, cols, compressed)

    def shape_total(self, shape: ChunkShape) -> int:
        """``pair_total((None, shape))``: nothing held (a plan that frees each chunk's logits first)."""
        rows, cols, compressed, alloc_rows, kv_tokens, gather, alloc_bytes = shape
        logits = self.logits_of(rows, cols, compressed, alloc_rows, alloc_bytes)
        metadata = INT32_BYTES * (2 * rows + (kv_tokens if gather else 0))
        kv_buffer = kv_tokens * self.kv_per_token if gather else 0
        if not self.deepgemm:
            return logits + metadata + kv_buffer
        return logits + metadata + kv_buffer + max(self.topk_bytes(rows, cols), self.padded_inputs(rows, alloc_rows))

    def total(self, key: ChunkShape | ShapeRun) -> int:
        """``shape_total`` of a shape; of a causal run (``ShapeRun``), its largest chunk's."""
        if type(key) is not ShapeRun:
            return self.shape_total(key)
        rows, compressed, kv_tokens, gather, start, ratio, count, widest = key
        # a run's chunks differ only in width: where no term can fall as the width grows (the
        # logits' padded stride never does; the top-k's block holds every row at the widest), the
        # widest chunk is the largest; else each is counted
        if not self.deepgemm or self.topk_grows(rows, widest):
            return self.shape_total(ChunkShape(rows, widest, compressed, None, kv_tokens, gather))
        return max(map(self.shape_total, key.shapes()))

    def pair_total(self, pair: tuple) -> int:
        before, (rows, cols, compressed, alloc_rows, kv_tokens, gather, alloc_bytes) = pair
        logits = self.logits_of(rows, cols, compressed, alloc_rows, alloc_bytes)
        metadata = INT32_BYTES * (2 * rows + (kv_tokens if gather else 0))
        kv_buffer = kv_tokens * self.kv_per_token if gather else 0
        tmp = held = held_with = 0
        if self.deepgemm:
            padded = self.padded_inputs(rows, alloc_rows)
            tmp = max(self.topk_bytes(rows, cols), padded)
            held_with = padded
        if before is not None:
            b_rows, b_cols, b_compressed, b_alloc = before[:4]
            held = self.logits_of(b_rows, b_cols, b_compressed, b_alloc, before[6])
        if not held:
            held_with = 0
        return logits + metadata + kv_buffer + max(tmp, held + held_with)

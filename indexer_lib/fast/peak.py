"""A plan's peak from its chunks' distinct shapes (``fast.planner``), each shape's bytes counted
once per set of settings and kept: what ``memory_report`` gives the whole plan, where a chunk's
bytes depend on its shape alone (or on its shape and its neighbour's)."""
from __future__ import annotations

from ..memory import ChunkBytes, buffer_bytes, chunk_memory, logits_bytes, temporaries_of
from ..plan import Chunk, Plan
from .caches import PerSettings
from .planner import PlanShapes
from .records import made_fast
from .shapes import ChunkShape, ShapeRun

# temporaries that depend on a chunk's shape alone (the reference executor's read its windows)
SHAPE_TEMPORARIES = ("deepgemm", None)
# per plan settings, the transient bytes per shape (or pair): a frontier meets tens of thousands
_TOTALS = PerSettings(limit=1 << 18)


def shapes_peak(shaped: PlanShapes, topk_rows: int | None = None) -> tuple[int, int]:
    """(transient peak, peak) of a plan from its distinct shapes (``plan_shapes``)."""
    plan = shaped.plan
    rows = plan.batch.num_rows if topk_rows is None else topk_rows
    return ShapesPeak(plan)(shaped.shapes, shaped.pairs, plan.workspace_tokens, rows)


class ShapesPeak:
    """``shapes_peak`` for the many plans of one set of settings (a frontier's): ``plan`` is any
    plan with them (its batch, budget and chunks are not read)."""

    def __init__(self, plan: Plan):
        if plan.settings.temporaries not in SHAPE_TEMPORARIES:
            raise ValueError(f"temporaries {plan.settings.temporaries!r}: shapes_peak counts one of "
                             f"{', '.join(str(t) for t in SHAPE_TEMPORARIES)} (the others read each "
                             "chunk's windows)")
        self.plan = plan
        self.topk = plan.settings.preset.topk
        self.temporaries = temporaries_of(plan, plan.settings.temporaries, self.topk)
        self.totals = _TOTALS.of((plan.settings, plan.logits_alive))
        self.bytes = ChunkBytes(plan.settings, plan.settings.temporaries == "deepgemm", self.topk)

    def __call__(self, shapes: tuple, pairs: tuple | None, workspace_tokens: int, topk_rows: int) -> tuple[int, int]:
        """(transient peak, peak) of a plan of these settings with these distinct shapes (and pairs
        of neighbours), its workspace and the rows of its top-k buffer."""
        if self.plan.logits_alive == 1:
            keys, total_of = shapes, self._shape_total
        elif pairs is not None:
            keys, total_of = pairs, self._pair_total
        else:
            raise ValueError(f"logits_alive {self.plan.logits_alive}: a held chunk's bytes depend on its "
                             "neighbour (plan_shapes gives the pairs of neighbours)")
        totals, largest = self.totals, 0
        for key in keys:
            total = totals.get(key)
            if total is None:
                total = _TOTALS.add(totals, key, total_of(key))
            if total > largest:
                largest = total
        workspace, topk_out, call = buffer_bytes(self.plan.settings, workspace_tokens, topk_rows, self.topk)
        transient = call + largest
        return transient, workspace + topk_out + transient

    def _shape_total(self, key) -> int:
        """A shape's transient bytes with nothing held; a growing run's (``ShapeRun``) largest chunk's."""
        if type(key) is ShapeRun:
            rows, compressed, kv_tokens, gather, start, ratio, count, _ = key
            return self.bytes.run_largest(rows, start, count, ratio, compressed, gather, kv_tokens)
        rows, cols, compressed, alloc_rows, kv_tokens, gather, alloc_bytes = key
        return self.bytes.total(rows, cols, compressed, gather, kv_tokens, 0, alloc_rows, alloc_bytes)

    def _pair_total(self, pair: tuple) -> int:
        """A shape's transient bytes after a chunk of the shape before it (None: nothing held)."""
        before, (rows, cols, compressed, alloc_rows, kv_tokens, gather, alloc_bytes) = pair
        held = 0 if before is None else self.bytes.logits(before[0], before[1], before[2], before[3], before[6])
        return self.bytes.total(rows, cols, compressed, gather, kv_tokens, held, alloc_rows, alloc_bytes)

    def memory_total(self, pair: tuple) -> int:
        """Transient bytes of a chunk of one shape after a chunk of another (None: the plan's first
        chunk), by the memory model's per-chunk count (``chunk_memory``): what ``ChunkBytes`` is held to."""
        before, shape = pair
        held = 0 if before is None else logits_bytes(_chunk(before), self.plan)
        return chunk_memory(self.plan, _chunk(shape), held, False, self.temporaries).total


def _chunk(shape: ChunkShape) -> Chunk:
    """A chunk of this shape, for the memory model's per-chunk counts."""
    rows, cols, compressed, alloc_rows, kv_tokens, gather, alloc_bytes = shape
    return made_fast(Chunk, requests=(0, 1), rows=(0, rows), token_start=0, token_end=rows, kv_tokens=kv_tokens,
                     logits_cols=cols, logits_bytes=0, gather=gather, over_budget=False, compressed=compressed,
                     kv_start=0, alloc_rows=alloc_rows, alloc_bytes=alloc_bytes)

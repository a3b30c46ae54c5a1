"""Two what-if prefill logits buffers over a release's own plan, so that a long prefill asks the
caching allocator for one block size instead of a new, larger one every chunk:

- ``fixed-width`` (vllm-project/vllm#58068, open, in no release): every launch's logits take one
  width, the widest a request's window can reach at ``max_model_len`` (in the compressed layout's
  entries), and at most ``budget // (width x 4)`` rows, so each block fits in the one
  ``[rows, width]`` block the first long chunk asked for.  Assumed: the PR's description, as read,
  says the width is fixed so that long prefills reuse allocator blocks; its diff was not readable.
- ``pooled`` (sgl-project/sglang#37660, merged; SGLang's AMD FP4 indexer alone, from 0.5.20 among
  the installed releases, ``kernels/ops/attention/dsv4/fp4_indexer_hip.py:62-67, 217-257`` at
  0.5.23): one persistent
  buffer of the budget's bytes serves every prefill launch's logits as a view; rows are cut to
  ``budget_elements // width`` (its ``logits_rows_per_chunk``), and a launch past the buffer
  (one row wider than it) allocates its own.  On any other path it is the project's what-if.

``apply`` rewrites a plan's chunks (plain data) and leaves the release's split as it is; the
memory model and the allocator read the rewritten plan as any other.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..dtypes import FP32_BYTES
from .chunks import Chunk, Plan

KINDS = ("fixed-width", "pooled")


@dataclass(frozen=True)
class LogitsBuffer:
    """``kind`` (``KINDS``), ``budget``: the bytes one launch's logits may take (fixed-width) or
    the pool's bytes (pooled), ``width``: the fixed width in columns (fixed-width only)."""

    kind: str
    budget: int
    width: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"logits buffer {self.kind!r}: must be one of {', '.join(KINDS)}")
        if self.budget < 1 or (self.kind == "fixed-width") != (self.width is not None):
            raise ValueError(f"logits buffer {self.kind}: a budget > 0, and a width for fixed-width alone")

    def rows_for(self, cols: int) -> int:
        """Rows of one launch at ``cols`` columns: the budget's elements over the width, at least one."""
        return max(1, self.budget // (FP32_BYTES * cols))

    def _pool_rows(self, allocated, cols: int, compressed: bool) -> int:
        """The most rows whose logits, as the kernel pads them, fit in the pool (at least one)."""
        per = self.rows_for(cols)
        while per > 1 and allocated(per, cols, compressed) > self.budget:
            per -= 1
        return per

    def apply(self, plan: Plan) -> Plan:
        """The plan with each chunk cut into launches of at most ``rows_for`` rows, each at the
        fixed width (fixed-width) or served from the pool (pooled: no allocation of its own)."""
        if plan.kind_plans or any(c.alloc_bytes is not None or c.alloc_rows is not None for c in plan.chunks):
            raise ValueError(f"logits buffer {self.kind}: {plan.engine or plan.strategy}'s path allocates its "
                             "logits its own way (a workspace per call, or padded rows)")
        allocated = plan.settings.counters[1]
        chunks: list[Chunk] = []
        for c in plan.chunks:
            if self.width is not None and c.logits_cols > self.width:
                raise ValueError(f"logits buffer fixed-width: a chunk {c.logits_cols:,} columns wide is past the "
                                 f"fixed width {self.width:,}")
            cols = c.logits_cols if self.width is None else self.width
            per = self.rows_for(cols) if self.width is not None else self._pool_rows(allocated, cols, c.compressed)
            for q0 in range(c.rows[0], c.rows[1], per):
                q1 = min(q0 + per, c.rows[1])
                nbytes = allocated(q1 - q0, cols, c.compressed)
                pooled = self.width is None and nbytes <= self.budget
                start = c.token_start + q0 - c.rows[0]
                chunks.append(replace(c, rows=(q0, q1), token_start=start, token_end=start + q1 - q0,
                                      logits_cols=cols, logits_bytes=nbytes, gather=c.gather and q0 == c.rows[0],
                                      over_budget=c.over_budget or FP32_BYTES * cols > self.budget,
                                      alloc_bytes=0 if pooled else None))
        # the launches are cut at this budget alone: no other budget is known to give the same plan
        stable = plan.budget_stable if plan.budget_bytes is None else (plan.budget_bytes, plan.budget_bytes + 1)
        return replace(plan, chunks=tuple(chunks), budget_stable=stable)

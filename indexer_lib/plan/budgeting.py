"""``Budgeting``: how a planner counts a logits allocation against the budget.

A planner asks ``within(rows, cols)`` before it grows a chunk and ``max_rows(cols)`` before it
slices a request.  Each answer also narrows the budget interval over which every answer would
come out the same, so the plan is the same for any budget b with ``stable_low <= b <
stable_high`` (``Plan.budget_stable``: a sweep plans a step once for all the budgets inside).
"""
from __future__ import annotations

import functools

from .settings import PlanSettings


@functools.lru_cache(maxsize=1 << 18)  # a causal cut asks it for every slice of a grid's long prompts
def widest_within(count, budget: int, rows: int, compressed: bool) -> int:
    """The most columns a logits allocation of ``rows`` rows may take with ``count(rows, cols,
    compressed)`` at most ``budget`` (-1: not even none).  A count never falls as the width grows
    and is at least rows x cols x 4 bytes (padding only adds): bisected under that bound."""
    lo, hi = -1, budget // (4 * rows)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(rows, mid, compressed) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


class Budgeting:
    def __init__(self, settings: PlanSettings, budget: int | None, workspace: int):
        self.settings = settings
        self.model, self.rules, self.padded = settings.preset, settings.rules, settings.padded
        self.budget, self.workspace = budget, workspace
        heads = self.model.index_heads
        self.row_multiple = self.rules.row_multiple(heads)
        # a build with only the compressed layout (DeepGEMM 2.8) allocates every chunk
        # [rows, max_seqlen_k of its requests], never [rows, N]
        self.compressed_only = not self.rules.full_width
        # what the budget is held against, and what DeepGEMM really allocates
        self.counted, self.allocated = settings.counters
        self.stable_low = 0  # most bytes counted and accepted
        self.stable_high: int | None = None  # fewest bytes counted and refused

    def narrow(self, low: int, high: int | None) -> None:
        """The interval as if the questions that gave [low, high) were asked again."""
        if low > self.stable_low:
            self.stable_low = low
        if high is not None and (self.stable_high is None or high < self.stable_high):
            self.stable_high = high

    def within(self, rows: int, cols: int, compressed: bool = False) -> bool:
        budget = self.budget
        if budget is None:
            return True
        nbytes = self.counted(rows, cols, compressed)
        if nbytes <= budget:
            if nbytes > self.stable_low:
                self.stable_low = nbytes
            return True
        if self.stable_high is None or nbytes < self.stable_high:
            self.stable_high = nbytes
        return False

    def widest(self, rows: int, compressed: bool = False) -> int:
        """The most columns ``rows`` rows of logits may take within the budget (-1: not even none):
        an allocation fits exactly when its width is at most this.  Asks no question: the budget
        interval is left as it is."""
        return widest_within(self.counted, self.budget, rows, compressed)

    def max_rows(self, cols: int, compressed: bool = False) -> int:
        """Most rows of width ``cols`` within the budget (0 when not even one fits)."""
        if self.padded:
            per_row = self.rules.row_stride(cols, compressed) * 4
            step = self.row_multiple
        else:
            # vLLM: E = budget // 4 elements, max(1, E // N) rows per slice
            per_row, step = 4 * max(cols, 1), 1
        rows = self.budget // per_row // step * step
        self.narrow(rows * per_row, (rows + step) * per_row)
        return rows

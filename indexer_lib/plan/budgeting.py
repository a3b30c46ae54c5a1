"""``Budgeting``: how a planner counts a logits allocation against the budget.

A planner asks ``within(rows, cols)`` before it grows a chunk and ``max_rows(cols)`` before it
slices a request.  Planning one step, each answer also narrows the budget interval over which
every answer would come out the same, so the plan is the same for any budget b with
``stable_low <= b < stable_high`` (``Plan.budget_stable``: a sweep plans a step once for all the
budgets inside).  Planning arrays of steps at once (``tracks`` false), the answers are arrays and
no interval is kept.  ``among`` (a mask) names the steps a question is asked for: a step that
does not ask leaves its interval as it is.
"""
from __future__ import annotations

from ..dtypes import FP32_BYTES
from ..elementwise import maximum
from .settings import PlanSettings


class Budgeting:
    def __init__(self, settings: PlanSettings, budget: int | None, workspace, tracks: bool = True):
        self.settings = settings
        self.model, self.rules, self.padded = settings.preset, settings.rules, settings.padded
        self.budget, self.workspace = budget, workspace
        self.tracks = tracks
        heads = self.model.index_heads
        self.row_multiple = self.rules.row_multiple(heads)
        # a build with only the compressed layout (DeepGEMM 2.8) allocates every chunk
        # [rows, max_seqlen_k of its requests], never [rows, N]
        self.compressed_only = not self.rules.full_width
        # what the budget is held against, and what DeepGEMM really allocates
        self.counted, self.allocated = settings.counters
        self.stable_low = 0  # most bytes counted and accepted
        self.stable_high: int | None = None  # fewest bytes counted and refused

    def narrow(self, low: int, high: int | None, among=True) -> None:
        """The interval as if the questions that gave [low, high) were asked again."""
        if not (self.tracks and among):
            return
        if low > self.stable_low:
            self.stable_low = low
        if high is not None and (self.stable_high is None or high < self.stable_high):
            self.stable_high = high

    def within(self, rows, cols, compressed: bool = False, among=True):
        budget = self.budget
        if budget is None:
            return True
        nbytes = self.counted(rows, cols, compressed)
        if self.tracks and among:
            if nbytes <= budget:
                if nbytes > self.stable_low:
                    self.stable_low = nbytes
                return True
            if self.stable_high is None or nbytes < self.stable_high:
                self.stable_high = nbytes
            return False
        return nbytes <= budget

    def widest(self, rows, compressed: bool = False):
        """The most columns ``rows`` rows of logits may take within the budget (-1: not even none):
        an allocation fits exactly when its width is at most this.  Asks no question: the budget
        interval is left as it is."""
        return self.counted.widest(rows, self.budget, compressed)

    def max_rows(self, cols, compressed: bool = False, among=True):
        """Most rows of width ``cols`` within the budget, the way a planner sizes its row slices
        (0 when not even one fits): at DeepGEMM's padded row stride in whole row multiples, or,
        unpadded, vLLM's E // N with E = budget // 4 elements."""
        if self.padded:
            per_row = self.rules.row_stride(cols, compressed) * FP32_BYTES
            step = self.row_multiple
        else:
            per_row, step = FP32_BYTES * maximum(cols, 1), 1
        rows = self.budget // maximum(per_row, 1) // step * step  # a row of no width: arrays' masked steps
        self.narrow(rows * per_row, (rows + step) * per_row, among)
        return rows

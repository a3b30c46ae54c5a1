"""Each distinct step's outcome at each budget, planned once per budget interval and kept.

The same step recurs across the workloads of a grid and a dashboard's moves, and a plan holds
for every budget inside its interval (``Plan.budget_stable``): a step is planned once per
interval, by shapes where its chunks' bytes depend on their shapes alone (``fast.planner``,
``fast.peak``), else in full.  Kept per strategy, settings and top-k rows, bounded.
"""
from __future__ import annotations

from typing import NamedTuple

from ..memory import make_plan, memory_report
from ..plan import PlanSettings, Strategy, get_strategy
from ..workload import StepBatch
from .caches import PerSettings
from .peak import SHAPE_TEMPORARIES, ShapesPeak
from .planner import ShapePlanner


class StepOutcome(NamedTuple):
    """A step's plan at a budget, as the frontier reads it."""

    budget_stable: tuple[int, int | None]  # the budgets it holds for
    chunks: int
    transient: int  # transient peak bytes
    peak: int  # persistent + transient
    over_budget: bool


def in_interval(budget: int | None, interval: tuple[int, int | None]) -> bool:
    low, high = interval
    if budget is None:
        return high is None
    return low <= budget and (high is None or budget < high)


# (strategy, settings, top-k rows) -> {(query lens, seq lens): [StepOutcome, one per interval]}
_OUTCOMES = PerSettings(limit=200_000)


class StepOutcomes:
    """``at_budgets(batch, budgets)``: the step's outcome at each budget."""

    def __init__(self, strategy: str | Strategy, settings: PlanSettings, topk_rows: int | None,
                 template: StepBatch):
        self.strategy, self.settings, self.topk_rows = get_strategy(strategy), settings, topk_rows
        self.kept = _OUTCOMES.of((self.strategy, settings, topk_rows))
        if self.strategy.by_shapes and settings.temporaries in SHAPE_TEMPORARIES:
            self.planner = ShapePlanner(self.strategy, settings)
            self.peak_of = ShapesPeak(self.planner.record(template))
            self.plan_step = self._by_shapes
        else:
            self.plan_step = self._whole

    def _by_shapes(self, batch: StepBatch, budget: int | None) -> StepOutcome:
        b, found = self.planner.split_step(batch, budget)
        if self.topk_rows is not None:
            rows = self.topk_rows
        else:  # the rows the indexer sees (V4.1's c1 kinds: each request's last rows)
            rows = (self.planner.settings.view(batch) if self.planner.viewed else batch).num_rows
        pairs = found.pairs if self.planner.logits_alive > 1 else None
        transient, peak = self.peak_of(found.shapes, pairs, b.workspace, rows)
        return tuple.__new__(StepOutcome, ((b.stable_low, b.stable_high), found.num_chunks, transient, peak,
                                           found.over_budget))

    def _whole(self, batch: StepBatch, budget: int | None) -> StepOutcome:
        plan = make_plan(batch, self.strategy, budget, self.settings)
        report = memory_report(plan, topk_rows=self.topk_rows)
        return StepOutcome(plan.budget_stable, plan.num_chunks, report.peak_transient, report.peak,
                           plan.over_budget)

    def at_budgets(self, batch: StepBatch, budgets: list[int | None]) -> list[StepOutcome]:
        lengths = (batch.query_lens, batch.seq_lens)
        known = self.kept.get(lengths)
        if known is None:
            known = _OUTCOMES.add(self.kept, lengths, [])
        row, outcome = [], None
        for budget in budgets:
            if outcome is None or not in_interval(budget, outcome.budget_stable):
                for outcome in known:
                    if in_interval(budget, outcome.budget_stable):
                        break
                else:
                    outcome = self.plan_step(batch, budget)
                    known.append(outcome)
            row.append(outcome)
        return row

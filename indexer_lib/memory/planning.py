"""``make_plan`` and ``plan_at``: a step's plan for any model, the ones callers use.

A model whose layer kinds see a step differently (DeepSeek-V4.1) is planned kind by kind
(``plan.split_step``), and its plan is the kind whose plan has the highest transient peak by the
memory model (what a step adds to the memory it holds, as the frontier ranks steps), with every
kind's plan beside it (``Plan.kind_plans``).  Every other model's plan is ``split_step``'s.
"""
from __future__ import annotations

from ..plan import Plan, PlanSettings, Strategy, get_strategy, split_step
from ..plan.make import DEFAULT_SETTINGS
from ..workload import StepBatch
from .model import memory_report


def _transient_peak(plan: Plan) -> int:
    return memory_report(plan).peak_transient


def make_plan(batch: StepBatch, strategy: str | Strategy, budget_bytes: int | None,
              settings: PlanSettings = DEFAULT_SETTINGS) -> Plan:
    """Split ``batch`` into chunks with a strategy under these settings (``plan.split_step``); a
    model whose kinds see a step differently takes the plan of the kind with the highest
    transient peak."""
    return split_step(batch, strategy, budget_bytes, settings, _transient_peak)


def plan_at(batch: StepBatch, strategy: str | Strategy, budget_mb: float | None,
            settings: PlanSettings = DEFAULT_SETTINGS) -> Plan:
    """A strategy's plan at a budget in MiB (none where the strategy reads none)."""
    s = get_strategy(strategy)
    return make_plan(batch, s, s.budget_bytes(budget_mb, None, settings), settings)

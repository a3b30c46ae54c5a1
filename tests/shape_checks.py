"""A check the release-path tests share: the frontier's shape planner gives a step the chunks,
budget interval and peak that the full planner and the memory model give it."""
from __future__ import annotations

from indexer_lib.fast import plan_shapes, shapes_peak
from indexer_lib.memory import make_plan, memory_report


def shapes_agree(batch, budget, settings, topk_rows: int = 8192) -> int:
    """Assert the shape planner agrees with ``make_plan`` and ``memory_report`` on one step; the
    plan's chunk count."""
    plan = make_plan(batch, "engine", budget, settings)
    report = memory_report(plan, topk_rows=topk_rows, temporaries="deepgemm")
    shaped = plan_shapes(batch, "engine", budget, settings)
    assert shaped.num_chunks == plan.num_chunks and shaped.plan.budget_stable == plan.budget_stable
    assert shapes_peak(shaped, topk_rows=topk_rows) == (report.peak_transient, report.peak)
    return plan.num_chunks

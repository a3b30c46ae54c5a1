"""DeepSeek-V4-Flash's frontier reaches a million tokens, where every step's context is new and
the frontier leans on its shortcuts (``indexer_lib.fast``: shapes, their bytes in closed form,
cuts read as runs).  On a small V4-Flash grid its rows are held here to the plain path: every
step of the plain simulator planned in full (``make_plan``) and counted by the memory model
(``memory_report``), the worst step taken by hand."""
from __future__ import annotations

from indexer_lib.memory import make_plan, memory_report
from indexer_lib.presets import free_bytes_from_gib
from indexer_lib.sweep.grid import Grid
from indexer_lib.sweep.rows import budget_at, model_rows
from indexer_lib.workload import simulate_each_step

GRID = Grid.of(model="deepseek-v4-flash", concurrency=(1, 3), isl=(20000, 131072), budget_mb=(64, 2048),
            strategy=("n-only", "vllm", "per-request", "causal"))


def plain_rows(grid: Grid) -> dict:
    """(concurrency, isl, strategy, budget_mb, free_gib) -> what the frontier reports of the worst
    step, from every step planned in full."""
    out = {}
    for task in grid.tasks("model"):
        steps = [s.batch for s in simulate_each_step(task.workload, task.scheduler) if s.batch is not None]
        settings = grid.settings(task.engine)
        for mb in task.budgets_mb:
            budget = budget_at(grid, task, mb, task.frees_gib[0])
            worst = None
            chunks, over = [], False
            for batch in steps:
                plan = make_plan(batch, task.strategy, budget, settings)
                report = memory_report(plan, topk_rows=task.scheduler.max_num_batched_tokens)
                chunks.append(plan.num_chunks)
                over = over or plan.over_budget
                if worst is None or report.peak_transient > worst[1].peak_transient:
                    worst = (batch, report, plan)
            batch, report, plan = worst
            for free in task.frees_gib:
                out[(task.workload.concurrency, task.workload.isl, task.strategy, mb, free)] = dict(
                    worst_step=batch.step, worst_rows=batch.num_rows, worst_chunks=plan.num_chunks,
                    peak_bytes=report.peak, peak_transient_bytes=report.peak_transient,
                    max_chunks=max(chunks), total_chunks=sum(chunks), over_budget=over,
                    oom=report.peak_transient > free_bytes_from_gib(free))
    return out


def test_v4_flash_rows_are_the_plain_paths():
    plain = plain_rows(GRID)
    rows = list(model_rows(GRID))
    assert len(rows) == len(plain) > 0
    for row in rows:
        key = (row["concurrency"], row["isl"], row["strategy"], row["budget_mb"], row["free_gib"])
        assert {k: row[k] for k in plain[key]} == plain[key], key

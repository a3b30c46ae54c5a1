"""Stage ``timing``: per strategy and budget, CUDA events around the executor,
median of repeats after warm-up; the chunk count next to the time (the per-chunk
overhead)."""
from __future__ import annotations

import statistics
import time

import torch

from ...run.executor import execute
from ...run.inputs import make_inputs
from .common import free_cached, is_cuda, plan_for, run_point
from .config import STRATEGIES


def _time_once(ctx, plan, inputs) -> float:
    if is_cuda(ctx.device):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        execute(plan, inputs, ctx.backend, ctx.device)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    execute(plan, inputs, ctx.backend, ctx.device)
    return (time.perf_counter() - t0) * 1e3


def stage_timing(ctx) -> list[dict]:
    rows = []
    for step in ctx.cfg.timing_steps:
        ctx.clock.check()
        inputs = make_inputs(step.batch, step.model, seed=ctx.seed, device=ctx.device)
        points = [("n-only", None)] + [(s, b) for b in ctx.cfg.timing_budgets_mib for s in STRATEGIES[1:]]
        for strategy, budget in points:
            ctx.clock.check()
            row = {"step": step.name, "model": step.model, "strategy": strategy, "budget_mib": budget,
                   "timer": "cuda events" if is_cuda(ctx.device) else "perf_counter"}

            def measure(row):
                plan = plan_for(step, strategy, budget, ctx.backend)
                row["chunks"] = plan.num_chunks
                for _ in range(ctx.cfg.warmup):
                    execute(plan, inputs, ctx.backend, ctx.device)
                times = [_time_once(ctx, plan, inputs) for _ in range(ctx.cfg.repeats)]
                row.update({"median_ms": round(statistics.median(times), 4), "min_ms": round(min(times), 4),
                            "max_ms": round(max(times), 4), "repeats": len(times), "status": "ok"})

            run_point(ctx, rows, row, measure)
        del inputs
        free_cached(ctx.device)
    return rows

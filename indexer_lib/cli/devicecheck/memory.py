"""Stage ``memory``: representative steps x every strategy: the measured peak
(``max_memory_allocated`` after ``reset_peak_memory_stats``) next to the memory
model's prediction."""
from __future__ import annotations

import torch

from ...run.executor import execute
from ...run.inputs import make_inputs
from .common import free_cached, is_cuda, plan_for, predicted, reads_budget, run_point
from .config import STRATEGIES


def _measure(ctx, plan, inputs):
    """(peak bytes above the baseline, result) of one executor run."""
    if not is_cuda(ctx.device):
        return None, execute(plan, inputs, ctx.backend, ctx.device)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = execute(plan, inputs, ctx.backend, ctx.device)
    torch.cuda.synchronize()
    # the executor resets the peak per chunk and records each chunk's max_memory_allocated
    # (its persistent workspace and top-k buffer included); the last reset covers the end
    peaks = [c.cuda_max_allocated for c in result.chunks if c.cuda_max_allocated is not None]
    peaks.append(torch.cuda.max_memory_allocated())
    return max(peaks) - base, result


def stage_memory(ctx) -> list[dict]:
    rows = []
    for step in ctx.cfg.memory_steps:
        ctx.clock.check()
        inputs = make_inputs(step.batch, step.model, seed=ctx.seed, device=ctx.device)
        for strategy in STRATEGIES:
            ctx.clock.check()
            row = {"step": step.name, "model": step.model, "strategy": strategy,
                   "budget_mib": ctx.cfg.memory_budget_mib if reads_budget(strategy) else None}

            def measure(row):
                plan = plan_for(step, strategy, ctx.cfg.memory_budget_mib, ctx.backend)
                row.update({"chunks": plan.num_chunks, **predicted(plan, ctx.backend)})
                execute(plan, inputs, ctx.backend, ctx.device)  # warm-up: JIT and first-use buffers
                peak, _ = _measure(ctx, plan, inputs)
                row["measured_peak"] = peak
                if peak is not None:
                    row["measured_over_predicted"] = round(peak / row["predicted_peak"], 4)
                row["status"] = "ok" if peak is not None else "ok (no CUDA: predicted only)"

            run_point(ctx, rows, row, measure)
        del inputs
        free_cached(ctx.device)
    return rows

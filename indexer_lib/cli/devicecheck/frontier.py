"""Stage ``frontier``: a small OOM frontier under emulated free memory (a ballast
tensor leaves X GiB free; ``torch.OutOfMemoryError`` caught per point) next to
the predicted one."""
from __future__ import annotations

import torch

from ...run.executor import execute
from ...run.inputs import make_inputs
from ...presets import GIB
from .common import StageTimeout, free_cached, is_cuda, is_oom, plan_for, predicted, reads_budget, status_of


def stage_frontier(ctx) -> list[dict]:
    rows = []
    warmed = set()
    for step in ctx.cfg.frontier_steps:
        ctx.clock.check()
        inputs = make_inputs(step.batch, step.model, seed=ctx.seed, device=ctx.device)
        for free_gib in ctx.cfg.frontier_free_gib:
            for strategy in ("n-only", "vllm", "causal"):
                ctx.clock.check()
                row = {"step": step.name, "model": step.model, "strategy": strategy, "free_gib": free_gib,
                       "budget_mib": ctx.cfg.frontier_budget_mib if reads_budget(strategy) else None}
                ballast = None
                try:
                    plan = plan_for(step, strategy, ctx.cfg.frontier_budget_mib, ctx.backend)
                    pred = predicted(plan, ctx.backend)
                    transient = pred["predicted_transient"]
                    row["predicted_fits"] = transient <= free_gib * GIB
                    row["predicted_transient"] = transient
                    row["chunks"] = plan.num_chunks
                    if not is_cuda(ctx.device):
                        row["measured"] = None
                        row["status"] = "ok (no CUDA: predicted only)"
                        rows.append(row)
                        continue
                    if (step.name, strategy) not in warmed:  # JIT and first use, outside the ballast
                        execute(plan, inputs, ctx.backend, ctx.device)
                        warmed.add((step.name, strategy))
                    free_cached(ctx.device)
                    free_now, _ = torch.cuda.mem_get_info()
                    # the engine reserved its persistent buffers before "free" was read: the
                    # executor allocates them inside the call, so they are left free on top
                    persistent = pred["predicted_persistent"]
                    leave = int(free_gib * GIB) + persistent
                    row["left_free"] = leave
                    if free_now > leave:
                        ballast = torch.empty(free_now - leave, dtype=torch.uint8, device=ctx.device)
                    row["free_after_ballast"] = torch.cuda.mem_get_info()[0]
                    try:
                        execute(plan, inputs, ctx.backend, ctx.device)
                        torch.cuda.synchronize()
                        row["measured"] = "fits"
                    except Exception as e:
                        if not is_oom(e):
                            raise
                        row["measured"] = "OOM"
                        row["oom_type"] = type(e).__name__
                    row["status"] = "ok"
                    row["agrees"] = (row["measured"] == "fits") == row["predicted_fits"]
                except StageTimeout:
                    raise
                except Exception as e:
                    row["status"] = status_of(e)
                finally:
                    del ballast
                    free_cached(ctx.device)
                rows.append(row)
        del inputs
        free_cached(ctx.device)
    return rows

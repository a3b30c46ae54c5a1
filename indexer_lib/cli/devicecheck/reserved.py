"""Stage ``reserved``: ``memory_reserved`` and the segment count across the steps
of a long prompt prefilled in slices, for vllm, causal and fixed-shape, next to
the caching-allocator model's prediction (``study.reserved``)."""
from __future__ import annotations

import torch

from ...memory import make_plan, memory_report
from ...run.executor import execute
from ...run.inputs import make_inputs
from ...presets import MIB
from ...study.reserved import long_prompt_steps, reserved_curve
from .common import free_cached, is_cuda
from .config import TOPK


RESERVED_STRATEGIES = ("vllm", "causal", "fixed-shape")


def stage_reserved(ctx) -> list[dict]:
    """A long prompt prefilled slice by slice (one engine step per slice), once per
    strategy (vllm, causal, fixed-shape at one width for the whole prompt): after each
    slice the measured ``memory_reserved`` (minus the reading before the strategy's
    first slice) next to the caching-allocator model's prediction for the same
    allocations (``reserved.reserved_curve``, inputs included).  One row per slice,
    columns per strategy; the first strategy's (vllm) readings also under the original names."""
    total, piece = ctx.cfg.reserved_prompt, ctx.cfg.reserved_slice
    model = "deepseek-v3.2"
    budget = max(1, int(ctx.cfg.reserved_budget_mib * MIB))
    steps = long_prompt_steps(total, piece)
    cuda = is_cuda(ctx.device)

    def plan_of(batch, strategy):
        # fixed-shape: one logits shape over the whole prompt
        return make_plan(batch, ctx.backend.strategy(strategy).for_steps(steps), budget,
                         ctx.backend.plan_settings(model))

    def planned(batch, strategy):
        plan = plan_of(batch, strategy.name)
        return plan, memory_report(plan, temporaries=ctx.backend, topk=TOPK)

    rows = [{"slice": i, "context_len": b.requests[0].context_len, "query_len": b.num_rows}
            for i, b in enumerate(steps)]
    for strategy in RESERVED_STRATEGIES:
        col = strategy.replace("-", "_")
        predicted = reserved_curve(strategy, steps, include_inputs=True, planned=planned)
        free_cached(ctx.device)
        base = torch.cuda.memory_reserved() if cuda else None
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        for i, (batch, pred) in enumerate(zip(steps, predicted)):
            ctx.clock.check()
            row = rows[i]
            inputs = make_inputs(batch, model, seed=ctx.seed + i, device=ctx.device)
            plan = plan_of(batch, strategy)
            execute(plan, inputs, ctx.backend, ctx.device)
            row.update({f"chunks_{col}": plan.num_chunks,
                        f"logits_bytes_max_{col}": max(c.logits_bytes for c in plan.chunks),
                        f"predicted_reserved_{col}": pred.reserved,
                        f"predicted_peak_allocated_{col}": pred.peak_allocated,
                        f"predicted_segments_{col}": pred.segments})
            if cuda:
                torch.cuda.synchronize()
                st = torch.cuda.memory_stats()
                reserved = torch.cuda.memory_reserved()
                row.update({f"measured_reserved_{col}": reserved - base,
                            f"measured_max_allocated_{col}": torch.cuda.max_memory_allocated(),
                            f"measured_segments_{col}": st.get("segment.all.current"),
                            f"measured_over_predicted_{col}": round((reserved - base) / pred.reserved, 4)})
                if strategy == RESERVED_STRATEGIES[0]:  # its readings under the original names too
                    row.update({"chunks": plan.num_chunks, "reserved": reserved,
                                "max_reserved": torch.cuda.max_memory_reserved(),
                                "allocated": torch.cuda.memory_allocated(),
                                "max_allocated": torch.cuda.max_memory_allocated(),
                                "segments": st.get("segment.all.current")})
                row["status"] = "ok"
            else:
                row["status"] = "ok (no CUDA: measured readings need a GPU; predicted only)"
            del inputs
        free_cached(ctx.device)
    return rows

"""What a budget costs users: the indexer's added time to first token and per output token,
through the simulated schedule (modelled; docs/design.md#time-model).

Per engine step with prefill rows, the step's added indexer time is the modelled time of its
plan at the budget (over the model's indexer layers) less the same step in one chunk per
workspace (``n-only``).  A request's added time to first token sums the added times of the
steps from its first prefill step to the step that completes its prompt (queueing before its
first step is not counted); every output token of a step pays that step's added time, and
the added time per output token is the mean over all output tokens.  Only the indexer is
modelled: the rest of the model's step is the same at every budget and left out.  Each figure
comes with its band (``_low_ms``, ``_high_ms``): the same sums with every kernel at the low and
the high end of the published checks' spread, the budget's step and its baseline alike.
"""
from __future__ import annotations

import numpy as np

from ..plan import PlanSettings
from ..memory import make_plan
from ..plan.strategies import get_strategy
from ..workload import ClosedLoopWorkload, SchedulerConfig
from ..workload.simulator import simulate
from .model import TimeModel

BASELINE = "n-only"


def _step_us(batch, strategy: str, budget_bytes: int | None, settings: PlanSettings,
             tm: TimeModel) -> np.ndarray:
    """The step's indexer time over the model's layers: (modelled, low, high) microseconds."""
    t = tm.plan_time(make_plan(batch, strategy, budget_bytes, settings))
    low, high = t.bounds_us()
    return np.array([t.step_us, low * t.indexer_layers, high * t.indexer_layers])


def added_time(workload: ClosedLoopWorkload, config: SchedulerConfig, strategy: str,
               budgets_mb: list[float], settings: PlanSettings, time_model: TimeModel | None = None) -> list[dict]:
    """Per budget: p50 and p90 of the added time to first token over the workload's requests, the
    mean added time per output token (each with its band), and the indexer's whole time per step
    at that budget."""
    tm = (time_model or TimeModel.published()).for_gpu(settings.gpu)
    steps = list(simulate(workload, config))
    strategy_obj = get_strategy(strategy)
    base_cache: dict = {}
    first, last = _prompt_steps(steps, workload.prompt_lens)
    decodes = np.array([s.num_decode for s in steps], dtype=float)
    rows = []
    for mb in budgets_mb:
        budget = strategy_obj.budget_bytes(mb, None, settings)
        cache: dict = {}
        added = np.zeros((len(steps), 3))  # (modelled, low, high) per step
        at_budget = []  # the indexer's time of every prefill step at this budget
        for i, s in enumerate(steps):
            if s.batch is None:
                continue
            key = (s.batch.query_lens, s.batch.seq_lens)
            if key not in base_cache:
                base_cache[key] = _step_us(s.batch, BASELINE, None, settings, tm)
            if key not in cache:
                cache[key] = _step_us(s.batch, strategy, budget, settings, tm)
            added[i] = cache[key] - base_cache[key]
            at_budget.append(cache[key][0])
        cumulative = np.concatenate([np.zeros((1, 3)), np.cumsum(added, axis=0)])
        ttft = np.array([cumulative[last[r] + 1] - cumulative[first[r]] for r in first]).reshape(-1, 3)
        per_token = (decodes @ added) / decodes.sum() if decodes.sum() else np.zeros(3)
        row = {"strategy": strategy, "budget_mb": mb, "requests": len(ttft)}
        for name, values in (("added_ttft_p50", np.percentile(ttft, 50, axis=0)),
                             ("added_ttft_p90", np.percentile(ttft, 90, axis=0)),
                             ("added_per_output_token", per_token)):
            row.update({f"{name}_ms": float(values[0]) * 1e-3, f"{name}_low_ms": float(values[1]) * 1e-3,
                        f"{name}_high_ms": float(values[2]) * 1e-3})
        rows.append({**row, "indexer_ms_per_prefill_step": float(np.mean(at_budget)) * 1e-3,
                     "time_source": "modelled", "time_model": tm.source})
    return rows


def _prompt_steps(steps, prompt_lens) -> tuple[dict[int, int], dict[int, int]]:
    """Per request, the index of the step of its first prompt chunk and of its last."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, s in enumerate(steps):
        for rid, row in zip(s.request_ids, s.batch.requests if s.batch else ()):
            if row.context_len < prompt_lens[rid]:  # a prompt chunk (not a decode with drafts)
                first.setdefault(rid, i)
                last[rid] = i
    return first, last

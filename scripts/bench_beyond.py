#!/usr/bin/env python
"""Benchmark of issue 9 (every number modelled, CPU only):

1. ``auto`` over a grid of >= 10,000 evaluated points (strategy x budget x workload x
   free GiB), measured in one run: each workload's schedule is simulated once and
   each strategy x budget is evaluated once per workload (``auto.evaluate_candidates``
   with ``PlanSettings(model, deepgemm_version="2.6", temporaries="deepgemm")``);
   every free-memory level then only filters (``auto.choose``).
2. Chunk counts of every strategy for one 256K-context request (8,192 query rows on a
   262,144-token sequence) at 64 MiB, and a 1-row-per-chunk extreme (a budget below
   one row block of that width) where only kv-split meets the budget.

    .venv/bin/python scripts/bench_beyond.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexer_lib.study.auto import DEFAULT_BUDGETS_MB, choose, evaluate_candidates  # noqa: E402
from indexer_lib.search.worst_step import Schedule, prefill_batches  # noqa: E402
from indexer_lib.memory import make_plan, memory_report  # noqa: E402
from indexer_lib.plan import BASELINE, PlanSettings, strategy_names  # noqa: E402
from indexer_lib.presets import MIB, get_model  # noqa: E402
from indexer_lib.timemodel.model import TimeModel  # noqa: E402
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, StepBatch  # noqa: E402

MODEL = "glm-5"
STRATEGIES = strategy_names("field", "beyond")  # the project's six
BUDGETED = tuple(s for s in STRATEGIES if s != BASELINE)
# as the old evaluate_candidates(..., deepgemm_version="2.6") ran: no engine, the H200 path's temporaries
SETTINGS = PlanSettings(MODEL, deepgemm_version="2.6", temporaries="deepgemm")
CONCURRENCY = (1, 4, 16, 32, 64)
ISL = (2048, 8192, 10240, 16384, 32768)
FREE_GIB = tuple(round(0.25 * i, 2) for i in range(1, 11))  # 0.25 ... 2.5 GiB


def bench_auto() -> None:
    tm = TimeModel.published()
    sched = SchedulerConfig(long_prefill_token_threshold=256, block_size=get_model(MODEL).kv_block)
    workloads = [ClosedLoopWorkload(c, i, 64) for c in CONCURRENCY for i in ISL]
    points = len(BUDGETED) * len(DEFAULT_BUDGETS_MB) * len(workloads) * len(FREE_GIB)
    t0 = time.perf_counter()
    schedules = [Schedule(prefill_batches(w, sched)) for w in workloads]
    t1 = time.perf_counter()
    recommended, no_fit, by_strategy = 0, 0, {}
    plans = 0
    for schedule in schedules:
        cands = evaluate_candidates([schedule], SETTINGS, BUDGETED, DEFAULT_BUDGETS_MB, tm)
        plans += len(cands) * len(schedule.unique)
        for free in FREE_GIB:
            try:
                rec = choose(cands, free, tm.source)
            except ValueError:
                no_fit += 1
                continue
            recommended += 1
            by_strategy[rec.best.strategy] = by_strategy.get(rec.best.strategy, 0) + 1
    t2 = time.perf_counter()
    print(f"auto grid: {len(BUDGETED)} strategies x {len(DEFAULT_BUDGETS_MB)} budgets x "
          f"{len(workloads)} workloads x {len(FREE_GIB)} free-GiB levels = {points} points (modelled)")
    print(f"  schedules simulated once: {len(schedules)} in {t1 - t0:.2f} s "
          f"({sum(len(s.batches) for s in schedules)} steps, {sum(len(s.unique) for s in schedules)} distinct)")
    print(f"  plans made and costed: {plans}; one run: {t2 - t0:.2f} s "
          f"({points / (t2 - t0):.0f} points/s)")
    print(f"  recommendations: {recommended}; no candidate fits: {no_fit}; chosen: "
          + ", ".join(f"{s} {n}" for s, n in sorted(by_strategy.items())))


def bench_chunks() -> None:
    batch = StepBatch.from_lengths([8192], [262_144])
    heads = get_model(MODEL).index_heads
    print(f"chunk counts, one 256K-context request ({MODEL}, H = {heads}): 8,192 query rows "
          f"on a 262,144-token sequence (modelled)")
    # 64 MiB; then 1 MiB, below one row block of 262,144 columns (4 rows x 262,400 x 4 B = 4.0 MiB)
    for mb in (64, 1):
        print(f"  budget {mb} MiB:")
        for s in STRATEGIES:
            t0 = time.perf_counter()
            plan = make_plan(batch, s, None if s == BASELINE else mb * MIB, PlanSettings(MODEL))
            seconds = time.perf_counter() - t0
            over = sum(c.over_budget for c in plan.chunks)
            worst = max(c.logits_bytes for c in plan.chunks)
            peak = memory_report(plan, temporaries="deepgemm").peak_transient
            print(f"    {s:<12} {plan.num_chunks:>6} chunks, {over:>5} over budget, largest logits "
                  f"{worst / MIB:9.2f} MiB, transient peak {peak / MIB:9.2f} MiB "
                  f"(planned in {seconds * 1e3:.0f} ms)")


if __name__ == "__main__":
    bench_auto()
    bench_chunks()

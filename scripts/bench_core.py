"""Benchmark of the core (issue 2), measured in one run on this machine.

Prints: time to plan a 64-request step per strategy, time for the default
frontier grid, and chunk counts of causal vs vllm for a 64K prompt and for the
worst step at concurrency 64 x ISL 10240 (both at 512 MiB).

    .venv/bin/python scripts/bench_core.py
"""
from __future__ import annotations

import os
import statistics
import time

from indexer_lib.sweep.executors import Local
from indexer_lib.search.worst_step import prefill_batches
from indexer_lib.sweep.grid import Grid
from indexer_lib.sweep.rows import model_rows
from indexer_lib.plan import BASELINE, strategy_names
from indexer_lib.memory import make_plan
from indexer_lib.presets import MIB
from indexer_lib.workload import ClosedLoopWorkload, PrefillRequest, SchedulerConfig, StepBatch


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    print(f"machine: {os.cpu_count()} CPUs")
    # a 64-request step: 64 partial prefills of 128 new rows on 9,984 cached tokens
    step = StepBatch(tuple(PrefillRequest(9984, 128) for _ in range(64)))
    print(f"\nplan one 64-request step (M={step.num_rows}, N={step.num_kv_tokens}), 512 MiB:")
    for strategy in strategy_names("field", "beyond"):
        budget = None if strategy == BASELINE else 512 * MIB
        t = median_seconds(lambda: make_plan(step, strategy, budget), 50)
        chunks = make_plan(step, strategy, budget).num_chunks
        print(f"  {strategy:>12}: {t * 1e6:8.1f} us  ({chunks} chunks)")

    grid = Grid.of()
    print(f"\ndefault frontier grid: {len(grid.concurrency)} concurrencies x {len(grid.isl)} ISLs "
          f"x {len(grid.budget_mb)} budgets x {len(grid.strategy)} strategies, full schedules "
          f"(OSL {', '.join(map(str, grid.osl))}), temporaries of the {grid.temporaries} path (goal < 10 s):")
    results = {}
    for workers in (1, None):
        start = time.perf_counter()
        results[workers] = list(model_rows(grid, Local(workers)))
        elapsed = time.perf_counter() - start
        label = "1 process" if workers == 1 else f"{os.cpu_count()} processes (CLI default)"
        print(f"  {label:>28}: {len(results[workers])} rows in {elapsed:.2f} s")
    assert results[1] == results[None], "parallel rows differ from the serial ones"

    prompt = StepBatch.from_lengths([65_536], [65_536])
    config = SchedulerConfig(max_num_batched_tokens=8192, long_prefill_token_threshold=256)
    batches = prefill_batches(ClosedLoopWorkload(64, 10_240, 1), config)
    worst = max(batches, key=lambda b: b.num_rows * b.num_kv_tokens)
    print("\nchunks at 512 MiB (padded, DeepGEMM 2.6):")
    for name, batch in [("one 64K prompt", prompt),
                        (f"worst step C=64 x ISL 10240 (M={worst.num_rows}, "
                         f"N={worst.num_kv_tokens})", worst)]:
        v = make_plan(batch, "vllm", 512 * MIB).num_chunks
        c = make_plan(batch, "causal", 512 * MIB).num_chunks
        print(f"  {name}: vllm {v}, causal {c} ({c / v:.2f}x)")


if __name__ == "__main__":
    main()

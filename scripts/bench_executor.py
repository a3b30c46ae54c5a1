"""Executor benchmark, measured in one run (CPU):

1. the reference backend's time per chunk for a mid-size step (DeepSeek-V3.2, H = 64);
2. the tracer's time for the full-scale cases, every strategy;
3. traced vs modelled peak bytes per case and strategy.

    .venv/bin/python scripts/bench_executor.py
"""
from __future__ import annotations

import platform
import time

import torch

from indexer_lib.search.worst_step import prefill_batches
from indexer_lib.run.inputs import make_inputs
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.plan import BASELINE, strategy_names
from indexer_lib.run.executor import execute
from indexer_lib.presets import MIB, get_model
from indexer_lib.timemodel.model import chunk_useful_elements
from indexer_lib.run.tracer import trace
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, StepBatch

STRATEGIES = strategy_names("field", "beyond")  # the project's six


def bench_cpu_chunks() -> None:
    batch = StepBatch.from_lengths([256, 128, 256], [4096, 2048, 3072])
    plan = make_plan(batch, "vllm", 4 * MIB)
    model = get_model(plan.model)
    inputs = make_inputs(batch, plan.model, seed=0)
    execute(make_plan(StepBatch.from_lengths([8], [64]), "vllm", MIB), make_inputs(
        StepBatch.from_lengths([8], [64])))  # warm-up
    result = execute(plan, inputs)
    print(f"1. reference backend on the CPU ({torch.get_num_threads()} threads), {plan.model}, "
          f"step M={batch.num_rows} N={batch.num_kv_tokens}, vllm 4 MiB: {plan.num_chunks} chunks, "
          f"{result.seconds:.2f} s")
    print(f"{'chunk':>5} {'rows':>5} {'width':>6} {'gather':>6} {'useful logits':>13} {'ms':>8} "
          f"{'GFLOP/s':>8}")
    for chunk, run in zip(plan.chunks, result.chunks):
        useful = chunk_useful_elements(chunk, plan.batch)  # logits the rows read: sum of ke - ks
        flops = 2 * model.index_heads * model.head_dim * useful
        print(f"{run.index:>5} {run.rows:>5} {run.width:>6} {'yes' if run.gather else 'no':>6} "
              f"{useful:>13} {run.seconds * 1e3:>8.1f} {flops / run.seconds / 1e9:>8.1f}")


def full_scale_cases() -> dict[str, StepBatch]:
    steps = prefill_batches(ClosedLoopWorkload(64, 10240), SchedulerConfig(long_prefill_token_threshold=256))
    return {
        "64k-prompt": StepBatch.from_lengths([65_536], [65_536]),
        "c64-isl10240-worst": max(steps, key=lambda b: b.num_rows * b.num_kv_tokens),
        "256k-context": StepBatch.from_lengths([8192], [262_144]),
    }


def bench_tracer() -> None:
    print("\n2./3. tracer (meta device) vs memory model, DeepSeek-V3.2, DeepGEMM 2.6 padding, "
          "512 MiB budget (n-only: none), top-k buffer max(8192, M) rows")
    print(f"{'case':>19} {'M':>6} {'N':>7} {'strategy':>12} {'chunks':>6} {'traced bytes':>14} "
          f"{'model bytes':>14} {'diff':>6} {'worst chunk diff':>16} {'trace s':>8}")
    total = 0.0
    for name, batch in full_scale_cases().items():
        for strategy in STRATEGIES:
            plan = make_plan(batch, strategy, None if strategy == BASELINE else 512 * MIB)
            rows = max(8192, batch.num_rows)
            traced = trace(plan, topk_rows=rows)
            total += traced.seconds
            model = memory_report(plan, topk_rows=rows)
            worst = max(abs(t - c.total) for t, c in zip(traced.chunk_transient, model.chunks))
            diff = (traced.peak_bytes - model.peak) / model.peak
            print(f"{name:>19} {batch.num_rows:>6} {batch.num_kv_tokens:>7} {strategy:>12} "
                  f"{plan.num_chunks:>6} {traced.peak_bytes:>14} {model.peak:>14} {diff:>6.2%} "
                  f"{worst:>16} {traced.seconds:>8.2f}")
    print(f"tracer total: {total:.2f} s for {3 * len(STRATEGIES)} traced plans")


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    bench_cpu_chunks()
    bench_tracer()

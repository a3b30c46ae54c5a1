"""The tracer follows the executor's allocations; the memory model agrees with it.

Full-scale cases (marked ``fullscale``, run in CI: the meta device costs no
memory): one 64K prompt, the worst step of concurrency 64 x ISL 10240 (vLLM
scheduler, 8,192 tokens per step, 256-token threshold) and a 256K-context step,
for every strategy.
"""
from __future__ import annotations

import time
from functools import lru_cache

import pytest
import torch

from indexer_lib.search.worst_step import prefill_batches
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.plan import PlanSettings, strategy_names
from indexer_lib.presets import MIB
from indexer_lib.run.tracer import AllocationTracker, trace, trace_peak_bytes
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, StepBatch


@lru_cache(maxsize=None)
def full_scale_batches() -> dict[str, StepBatch]:
    steps = prefill_batches(ClosedLoopWorkload(64, 10240),
                            SchedulerConfig(long_prefill_token_threshold=256))
    worst = max(steps, key=lambda b: b.num_rows * b.num_kv_tokens)  # largest unbudgeted logits
    return {
        "64k-prompt": StepBatch.from_lengths([65_536], [65_536]),
        "c64-isl10240-worst": worst,
        "256k-context": StepBatch.from_lengths([8192], [262_144]),
    }


def full_scale_plan(case: str, strategy: str):
    budget = None if strategy == "n-only" else 512 * MIB
    return make_plan(full_scale_batches()[case], strategy, budget)


@pytest.mark.fullscale
@pytest.mark.parametrize("strategy", strategy_names("field", "beyond"))
@pytest.mark.parametrize("case", ["64k-prompt", "c64-isl10240-worst", "256k-context"])
def test_model_agrees_with_the_tracer_at_full_scale(case, strategy):
    plan = full_scale_plan(case, strategy)
    topk_rows = max(8192, plan.batch.num_rows)  # vLLM's buffer: max_num_batched_tokens rows
    start = time.perf_counter()
    traced = trace(plan, topk_rows=topk_rows)
    seconds = time.perf_counter() - start
    model = memory_report(plan, topk_rows=topk_rows)
    assert abs(traced.peak_bytes - model.peak) <= 0.01 * model.peak, (traced.peak_bytes, model.peak)
    assert traced.persistent_bytes == model.persistent
    for i, (got, want) in enumerate(zip(traced.chunk_transient, model.chunks)):
        assert abs(got - want.total) <= 0.01 * want.total, (i, got, want)
    print(f"{case} {strategy}: traced in {seconds:.1f} s")


def test_the_worst_c64_step_is_the_reported_oom_shape():
    worst = full_scale_batches()["c64-isl10240-worst"]
    assert worst.num_rows == 8192 and worst.num_kv_tokens >= 327_000


@pytest.mark.parametrize("strategy", strategy_names("field", "beyond"))
def test_model_agrees_with_a_real_cpu_run(strategy):
    # the same executor computing for real: every allocation followed on the CPU
    batch = StepBatch.from_lengths([60, 2, 140], [400, 2, 1400])
    budget = None if strategy == "n-only" else 200_000
    plan = make_plan(batch, strategy, budget, PlanSettings("glm-5"))
    traced = trace(plan, device="cpu", topk=64)
    model = memory_report(plan, topk=64, workspace_tokens=traced.execution.workspace_tokens)
    assert traced.peak_bytes == model.peak
    assert traced.chunk_transient == [c.total for c in model.chunks]


def test_trace_peak_bytes_is_the_whole_call():
    batch = StepBatch.from_lengths([300], [300])
    plan = make_plan(batch, "vllm", 64 * MIB)
    assert trace_peak_bytes(plan, topk_rows=8192) == memory_report(plan, topk_rows=8192).peak


def test_tracker_counts_a_storage_once_and_frees_it_with_its_last_view():
    tracker = AllocationTracker("meta")
    with tracker:
        a = torch.empty(1000, device="meta")  # 4,000 bytes
        view = a[10:20]
        b = a + 1  # a new 4,000 bytes
        del a
        assert tracker.current == 8000  # the view keeps a's storage alive
        del view
        assert tracker.current == 4000
        c = torch.empty(10, device="meta").to(torch.float64)  # the float32 temporary dies at once
        assert tracker.current == 4080
        del b, c
    assert tracker.current == 0 and tracker.peak == 8000 and tracker.allocations == 4


def test_tracker_ignores_tensors_made_before_it_and_other_devices():
    before = torch.empty(1000, device="meta")
    tracker = AllocationTracker("meta")
    with tracker:
        v = before.view(torch.int32)[5:]  # views of an untracked storage
        torch.empty(100)  # CPU
        assert tracker.current == 0
        del v
    assert tracker.peak == 0

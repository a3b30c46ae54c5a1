"""Where the logits budget comes from: a fixed MiB, SGLang's cached fraction of
free memory, or the bytes really free at each step.

A policy turns (step, memory free now) into a budget; ``run_policy`` plans every
step of a schedule with it and checks the plan against the memory really free.
All numbers are modelled (memory model), never measured.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..engines import EngineBudget
from ..memory import make_plan, memory_report
from ..plan import PlanSettings
from ..presets import budget_bytes_from_mb
from ..workload import StepBatch, check_int


@dataclass
class FixedPolicy:
    """vLLM: VLLM_SPARSE_INDEXER_MAX_LOGITS_MB, the same every step."""

    budget_mb: float = 512
    name: str = "fixed"

    def budget(self, batch: StepBatch, free_bytes: int, strategy: str, settings: PlanSettings) -> int | None:
        return budget_bytes_from_mb(self.budget_mb)


@dataclass
class SglangPolicy:
    """SGLang DSA's own budget (``engines.EngineBudget`` of ``engine``): f x free memory,
    capped by f x (1 - mem_fraction_static) x total and 0.3 x total, measured at the first
    call with at least 8,000,000 logits elements and kept for the run; a smaller call is
    not chunked."""

    total_bytes: int
    fraction: float = 0.2  # SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION
    mem_fraction_static: float | None = None
    name: str = "sglang-cached"
    engine: str = "sglang==0.5.23"

    def __post_init__(self):
        self.process = EngineBudget(self.engine, self.fraction, self.total_bytes, self.mem_fraction_static)

    def budget(self, batch: StepBatch, free_bytes: int, strategy: str, settings: PlanSettings) -> int | None:
        return self.process.for_call(batch.num_rows, batch.num_kv_tokens, free_bytes)


@dataclass
class FreshPolicy:
    """Ours: the largest budget whose plan's transient peak (padded logits,
    metadata and executor temporaries, as the memory model counts them) fits
    in the memory free at this step."""

    name: str = "fresh"

    def budget(self, batch: StepBatch, free_bytes: int, strategy: str, settings: PlanSettings) -> int | None:
        budget = max(1, free_bytes)
        # every round lowers the budget by what the last plan overshot; transients
        # other than logits shrink with the chunks, so this converges in a few rounds
        for _ in range(64):
            plan = make_plan(batch, strategy, budget, settings)
            over = memory_report(plan).peak_transient - free_bytes
            if over <= 0 or budget == 1:
                return budget
            budget = max(1, budget - over)
        return budget


@dataclass(frozen=True)
class PolicyStep:
    step: int
    free_bytes: int  # memory free at this step (stated)
    budget_bytes: int | None  # what the policy authorised (None: no chunking)
    num_chunks: int
    peak_transient_bytes: int  # what the plan needs at its largest chunk
    fits: bool


def run_policy(batches: list[StepBatch], free_bytes: list[int], policy, strategy: str = "vllm",
               settings: PlanSettings = PlanSettings()) -> list[PolicyStep]:
    """Plan each step with the policy's budget; check it against that step's free memory."""
    if len(batches) != len(free_bytes):
        raise ValueError(f"{len(batches)} steps and {len(free_bytes)} free-memory readings: "
                         "give one reading per step")
    out = []
    for batch, free in zip(batches, free_bytes):
        check_int("free_bytes", free, 0)
        budget = policy.budget(batch, free, strategy, settings)
        if budget is None:
            plan = make_plan(batch, "n-only", None, settings)
        else:
            plan = make_plan(batch, strategy, budget, settings)
        peak = memory_report(plan).peak_transient
        out.append(PolicyStep(batch.step, free, budget, plan.num_chunks, peak, peak <= free))
    return out


def shrinking_free_memory(num_steps: int, start_bytes: int, end_bytes: int) -> list[int]:
    """Free memory falling linearly from start to end over the steps (a reported fall between two
    readings; the engines' KV pool is allocated up front, so not the KV cache filling)."""
    check_int("num_steps", num_steps, 1)
    if num_steps == 1:
        return [start_bytes]
    return [round(start_bytes + (end_bytes - start_bytes) * i / (num_steps - 1))
            for i in range(num_steps)]

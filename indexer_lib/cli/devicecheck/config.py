"""What the device check runs: the stages, the steps per stage and their sizes
(``h200_config``: fills the chip within the call's time; ``dry_run_config``: tiny
shapes for the reference backend on the CPU)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...workload import StepBatch

STAGES = ("probe", "correctness", "memory", "timing", "frontier", "reserved")
STRATEGIES = ("n-only", "vllm", "per-request", "causal")
TOPK = 2048


@dataclass(frozen=True)
class Step:
    name: str
    model: str
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]

    @property
    def batch(self) -> StepBatch:
        return StepBatch.from_lengths(list(self.query_lens), list(self.seq_lens))


def _packed(name, model, n, ctx, q):
    return Step(name, model, (q,) * n, (ctx + q,) * n)


@dataclass(frozen=True)
class Config:
    dry_run: bool
    device: str
    correctness: tuple[Step, ...]
    memory_steps: tuple[Step, ...]
    memory_budget_mib: float
    timing_steps: tuple[Step, ...]
    timing_budgets_mib: tuple[float, ...]
    warmup: int
    repeats: int
    frontier_free_gib: tuple[float, ...]
    frontier_steps: tuple[Step, ...]
    frontier_budget_mib: float
    reserved_prompt: int
    reserved_slice: int
    reserved_budget_mib: float
    stage_seconds: dict = field(default_factory=dict)
    total_seconds: float = 390  # all stages together; each also has its own limit


def h200_config() -> Config:
    """Sizes that fill the chip but end well inside the 8-minute call."""
    ds, glm = "deepseek-v3.2", "glm-5"
    return Config(
        dry_run=False,
        device="cuda",
        correctness=(
            Step("one-prompt-4k", ds, (4096,), (4096,)),
            Step("chunked-prompt-2k-of-8k", ds, (2048,), (8192,)),
            Step("packed-3", ds, (200, 300, 100), (1200, 300, 2100)),
            Step("glm-one-prompt-4k", glm, (4096,), (4096,)),
            Step("glm-packed-partials", glm, (256,) * 8, (2560,) * 8),
        ),
        memory_steps=(
            Step("one-prompt-16k", ds, (16384,), (16384,)),
            _packed("partials-32x(2304+256)", ds, 32, 2304, 256),
            _packed("shared-prefix-8x(16k+512)", glm, 8, 16384, 512),
        ),
        memory_budget_mib=512,
        timing_steps=(
            Step("one-prompt-16k", ds, (16384,), (16384,)),
            _packed("partials-32x(2304+256)", ds, 32, 2304, 256),
        ),
        timing_budgets_mib=(128, 256, 512, 1024, 2048),
        warmup=1,
        repeats=5,
        # around the model's transitions: vllm/causal near 0.5, n-only of c32-isl4k and the
        # 32K prompt at 4.14 and 4.16 GiB transient (so 4.25 tests the last tenth of a GiB)
        frontier_free_gib=(0.5, 2.0, 4.25),
        frontier_steps=(
            _packed("c8-isl4k", ds, 8, 3840, 256),
            _packed("c32-isl4k", ds, 32, 3840, 256),
            _packed("c32-isl10k", ds, 32, 9984, 256),
            Step("one-prompt-32k", ds, (32768,), (32768,)),
        ),
        frontier_budget_mib=512,
        reserved_prompt=65536,
        reserved_slice=8192,
        reserved_budget_mib=512,
        stage_seconds={"probe": 120, "correctness": 70, "memory": 60, "timing": 60,
                       "frontier": 45, "reserved": 50},
        total_seconds=390,
    )


def dry_run_config() -> Config:
    """Tiny shapes for the reference backend on the CPU (seconds, not minutes)."""
    ds, glm = "deepseek-v3.2", "glm-5"
    return Config(
        dry_run=True,
        device="cpu",
        correctness=(
            Step("one-prompt-64", ds, (64,), (64,)),
            Step("packed-3", glm, (8, 16, 4), (40, 16, 20)),
        ),
        memory_steps=(Step("one-prompt-96", ds, (96,), (96,)), _packed("partials-4x(24+8)", glm, 4, 24, 8)),
        memory_budget_mib=0.01,
        timing_steps=(Step("one-prompt-96", ds, (96,), (96,)),),
        timing_budgets_mib=(0.01, 0.05),
        warmup=1,
        repeats=2,
        frontier_free_gib=(0.0001,),
        frontier_steps=(_packed("c2-isl32", ds, 2, 24, 8),),
        frontier_budget_mib=0.01,
        reserved_prompt=128,
        reserved_slice=32,
        reserved_budget_mib=0.01,
        stage_seconds={s: 60 for s in STAGES},
        total_seconds=300,
    )

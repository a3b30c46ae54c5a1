"""What every stage uses: the time limit, the run context, planning a step with the
backend's options, the memory model's prediction, and how a failing point is kept."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ...memory import make_plan, memory_report
from ...plan import NO_BUDGET, get_strategy
from ...presets import MIB
from .config import TOPK, Config, Step


class StageTimeout(Exception):
    pass


class Clock:
    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def check(self) -> None:
        if self.left() <= 0:
            raise StageTimeout("stage time limit reached")


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def reads_budget(strategy: str) -> bool:
    return get_strategy(strategy).budget_source(None) != NO_BUDGET


def plan_for(step: Step, strategy: str, budget_mib: float | None, backend):
    budget = max(1, int(budget_mib * MIB)) if reads_budget(strategy) else None
    return make_plan(step.batch, backend.strategy(strategy), budget, backend.plan_settings(step.model))


def predicted(plan, backend) -> dict:
    """The memory model's bytes for a plan, with this backend's temporaries."""
    report = memory_report(plan, temporaries=backend, topk=TOPK)
    return {"predicted_peak": report.peak, "predicted_transient": report.peak_transient,
            "predicted_persistent": report.persistent}


def is_oom(e: BaseException) -> bool:
    """torch's OutOfMemoryError, or an allocation failure that crossed another binding
    (DeepGEMM allocates its logits in C++: through tvm-ffi the error may arrive as
    a plain RuntimeError whose text says so)."""
    if isinstance(e, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(e).lower()
    return "out of memory" in text or "cudaerrormemoryallocation" in text


def status_of(e: BaseException) -> str:
    first = str(e).splitlines()[0][:160] if str(e) else ""
    return f"OOM: {first}" if is_oom(e) else f"error: {type(e).__name__}: {first}"


def run_point(ctx, rows: list, row: dict, measure) -> None:
    """Fill ``row`` with ``measure(row)`` and keep it; a failing point is recorded in its
    status and the stage goes on (only the stage's time limit stops it)."""
    try:
        measure(row)
    except StageTimeout:
        raise
    except Exception as e:
        row["status"] = status_of(e)
    rows.append(row)
    free_cached(ctx.device)


def free_cached(device) -> None:
    if is_cuda(device):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


@dataclass
class Context:
    cfg: Config
    backend: object
    device: str
    seed: int
    clock: Clock = None

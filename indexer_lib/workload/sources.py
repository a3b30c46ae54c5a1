"""Where a workload's steps come from: the built-in simulator or vLLM's own scheduler.

The two sources are registered by name; vLLM's is imported only when asked for,
so the simulator never depends on it (and vLLM need not be installed).
"""
from __future__ import annotations

from typing import Iterator

from ..checks import BadValue

from .ranks import rank_workload
from .simulator import ClosedLoopWorkload, ScheduledStep, SchedulerConfig, check_schedule_size, simulate


WORKLOAD_SOURCES = ("simulator", "vllm")


def check_source(source: str) -> str:
    if source not in WORKLOAD_SOURCES:
        raise BadValue("workload_source", f"workload source {source!r}: must be one of {', '.join(WORKLOAD_SOURCES)}")
    return source


def scheduled_steps(workload: ClosedLoopWorkload, config: SchedulerConfig = SchedulerConfig(),
                    source: str = "simulator") -> Iterator[ScheduledStep]:
    """The engine steps of a workload, from the built-in simulator (fast, the
    default) or from vLLM's own scheduler (``source="vllm"``, needs vLLM:
    ``bash scripts/install_vllm.sh``)."""
    check_schedule_size(workload, config)  # before a step is simulated
    if check_source(source) == "vllm":
        from .vllm_scheduler import schedule

        return schedule(rank_workload(workload, config.dp), config)
    return simulate(workload, config)

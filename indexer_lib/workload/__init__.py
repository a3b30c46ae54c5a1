"""Layer 1, the workload: prefill requests, step batches, and the engine's scheduler.

- ``batch``: ``PrefillRequest`` and ``StepBatch``, what the indexer sees per engine step;
- ``step_arrays``: ``StepArrays``, many steps of as many requests as numpy arrays, read by the
  same names;
- ``simulator``: a closed-loop simulator of vLLM V1's chunked-prefill scheduler;
- ``lengths``: prompt lengths of mixed workloads (vLLM bench's random range ratio, mixes);
- ``vllm_scheduler``: vLLM's own scheduler driven on the CPU (optional, needs vLLM);
- ``sources``: the two sources by name (``scheduled_steps(..., source=...)``);
- ``compare``: the simulator next to vLLM's scheduler, step by step.
"""
from .batch import PrefillRequest, StepBatch, check_int
from .simulator import (MAX_BATCHED_TOKENS, MAX_CONCURRENCY, MAX_OSL, MAX_SCHEDULE_STEPS, ClosedLoopWorkload, ScheduledStep, SchedulerConfig,
                        check_kv_capacity, check_schedule_size, kv_blocks_needed, simulate,
                        simulate_each_step)
from .sources import WORKLOAD_SOURCES, check_source, scheduled_steps
from .step_arrays import RequestArrays, StepArrays

__all__ = [
    "PrefillRequest", "StepBatch", "check_int",
    "MAX_BATCHED_TOKENS", "MAX_CONCURRENCY", "MAX_OSL", "MAX_SCHEDULE_STEPS", "check_schedule_size", "ClosedLoopWorkload", "ScheduledStep", "SchedulerConfig", "check_kv_capacity", "kv_blocks_needed",
    "simulate", "simulate_each_step",
    "WORKLOAD_SOURCES", "check_source", "scheduled_steps", "RequestArrays", "StepArrays",
]

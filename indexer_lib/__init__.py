"""indexer-lab: budgeted chunking of the DSA indexer's prefill logits.

Data flows one way: workload -> plan -> memory model / executor -> results -> figures.
"""
from .plan import STRATEGIES, Chunk, Plan, make_plan
from .workload import ClosedLoopWorkload, PrefillRequest, SchedulerConfig, StepBatch, simulate

__all__ = [
    "STRATEGIES", "Chunk", "Plan", "make_plan",
    "ClosedLoopWorkload", "PrefillRequest", "SchedulerConfig", "StepBatch", "simulate",
]

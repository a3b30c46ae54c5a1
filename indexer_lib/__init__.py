"""indexer-lab: budgeted chunking of the DSA indexer's prefill logits.

Data flows one way, one subpackage per layer (docs/design.md#architecture):
``workload`` -> ``engines`` -> ``plan`` -> ``memory`` -> ``timemodel`` -> ``fast`` -> ``run`` -> ``search``
-> ``sweep`` -> ``study`` -> ``notebook`` -> ``cli``, with ``presets``, ``padding``, ``dtypes``,
``elementwise`` and ``refdata`` below them all.  Each layer imports only
from the layers below it.
"""
from .plan import STRATEGIES, Chunk, Plan, PlanSettings, get_strategy
from .memory import make_plan
from .workload import ClosedLoopWorkload, PrefillRequest, SchedulerConfig, StepBatch, simulate

__all__ = [
    "STRATEGIES", "Chunk", "Plan", "PlanSettings", "get_strategy", "make_plan",
    "ClosedLoopWorkload", "PrefillRequest", "SchedulerConfig", "StepBatch", "simulate",
]

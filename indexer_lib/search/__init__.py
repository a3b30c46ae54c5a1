"""Layer 8, the worst step of a schedule: the scheduler's steps planned by a strategy at each budget, the
one with the largest transient peak taken (``worst_step``: ``Schedule``, ``worst_steps``).  A
grid's points are these searches (``indexer_lib.sweep``)."""
from .worst_step import Schedule, WorstStep, evaluate_steps_together, prefill_batches, worst_step, worst_steps

__all__ = ["Schedule", "WorstStep", "evaluate_steps_together", "prefill_batches", "worst_step", "worst_steps"]

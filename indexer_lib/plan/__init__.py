"""Layer 3, the plan: how one step batch is split into chunks, as plain data.

- ``chunks``: ``Chunk`` and ``Plan`` records, the runs of rows per request;
- ``strategies``: the strategies (``n-only``, ``vllm``, ``per-request``, ``causal``,
  ``kv-split``, ``fixed-shape``, and ``engine``: an engine release's own chunker), the
  budget counting, and ``make_plan`` (on an engine release's DeepGEMM and workspace
  with ``engine=``), and ``plan_shapes`` (the same plan as chunk count and shapes;
  ``ShapePlanner`` for many steps and budgets with one set of settings);
- ``builders``: where a strategy records its chunks (each one, or their shapes).
"""
from .chunks import Chunk, Plan, Run, chunk_runs, merged_chunks
from .strategies import (ALL_STRATEGIES, BEYOND_STRATEGIES, ENGINE_STRATEGIES, FIELD_STRATEGIES, KV_SPLIT_ALIGN,
                         SHAPE_STRATEGIES, STRATEGIES, Budgeting, PlanShapes, ShapePlanner, StepShapes,
                         asked_deepgemm, check_layout,
                         check_strategy, make_plan, plan_at, plan_shapes, runs_on, strategy_budget_bytes)

__all__ = [
    "Chunk", "Plan", "Run", "chunk_runs", "merged_chunks",
    "ALL_STRATEGIES", "BEYOND_STRATEGIES", "ENGINE_STRATEGIES", "FIELD_STRATEGIES", "KV_SPLIT_ALIGN", "SHAPE_STRATEGIES",
    "STRATEGIES", "Budgeting", "PlanShapes", "ShapePlanner", "StepShapes", "asked_deepgemm", "check_layout",
    "check_strategy", "make_plan", "plan_at", "plan_shapes", "runs_on", "strategy_budget_bytes",
]

"""Layer 3, the plan: how one step batch is split into chunks, as plain data.

- ``settings``: ``PlanSettings``, what a plan runs under (model, engine release, DeepGEMM
  what-if, padding, workspace, temporaries), checked once and hashable;
- ``strategies``: the strategies as objects in one registry (``get_strategy``,
  ``strategy_names``), each with its options and one ``split`` signature;
- ``budgeting``: how a planner counts an allocation against the budget;
- ``packing``: greedy packing and the cuts of a request that alone breaks a limit;
- ``paths``: each engine release's own path, one object each, chosen by ``release_path``;
- ``builders``: where a strategy records its chunks;
- ``chunks``: ``Chunk`` and ``Plan`` records, the runs of rows per request;
- ``make``: ``split_step`` (``memory.make_plan`` ranks a multi-kind model's kinds).
"""
from .budgeting import Budgeting
from .builders import ChunkBuilder, Piece, RowSlices, Slice, Slicing, equal_slices
from .chunks import Chunk, Plan, Run, chunk_runs, merged_chunks
from .make import split_step, step_budgeting
from .packing import KV_SPLIT_ALIGN
from .paths import release_path
from .settings import TEMPORARIES, PlanSettings
from .strategies import (BASELINE, GIVEN_BUDGET, MEASURED_BUDGET, NO_BUDGET, STRATEGIES, Strategy, get_strategy,
                         strategy_names)

__all__ = [
    "Budgeting", "ChunkBuilder", "Piece", "RowSlices", "Slice", "Slicing", "equal_slices", "release_path", "Chunk", "Plan", "Run", "chunk_runs",
    "merged_chunks", "split_step", "step_budgeting", "KV_SPLIT_ALIGN", "TEMPORARIES", "PlanSettings",
    "BASELINE", "GIVEN_BUDGET", "MEASURED_BUDGET", "NO_BUDGET", "STRATEGIES", "Strategy", "get_strategy", "strategy_names",
]

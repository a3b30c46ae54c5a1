"""The same step in DeepGEMM's two logits layouts (modelled): the full ``[M, N]`` of every release
before vLLM 0.33.0, where a chunk is as wide as all its requests' K together, and the compressed
``[M, max_seqlen_k]`` of vLLM 0.33.0, as wide as its longest request (docs/design.md#the-memory-model).
One call, no budget: what the step's logits take before any chunker splits them."""
from __future__ import annotations

from ..engines import get_engine
from ..plan import PlanSettings
from ..memory import make_plan
from ..workload import StepBatch

FULL, COMPRESSED = "vllm==0.32.0", "vllm==0.33.0"


def layout_table(steps: dict[str, StepBatch], model: str, engines=(FULL, COMPRESSED)):
    """Per step and release: its layout and the one logits call's shape and bytes."""
    import pandas as pd

    rows = []
    for name, batch in steps.items():
        for engine in engines:
            plan = make_plan(batch, "n-only", None, PlanSettings(model, engine))
            chunk = max(plan.chunks, key=lambda c: c.logits_bytes)
            rows.append({"step": name, "engine": engine, "layout": get_engine(engine).layout,
                         "rows": chunk.num_rows, "columns": chunk.logits_cols, "chunks": plan.num_chunks,
                         "largest logits GiB": round(plan.largest_logits_bytes / 2**30, 3), "mode": "model"})
    return pd.DataFrame(rows)

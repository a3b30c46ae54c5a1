"""Reserved vs allocated bytes over the steps of a long prompt (modelled).

A caching allocator (PyTorch's, ``memory.allocator.CachingAllocatorModel``) keeps every
segment it ever asked the driver for: a logits allocation of a new, larger size
adds a segment, while a size it has seen is served from the cached block.  This
module turns each step's plan into the executor's allocation events and replays
them, step after step, through the allocator model -- no GPU, no torch needed:

- ``source="model"`` (default): events from the memory model's per-chunk bytes
  (``memory.events.plan_events``), in the executor's order: the K workspace and the
  top-k buffer, then per chunk its metadata, K buffer, running values, logits and the
  backend's temporaries, each freed before the next chunk (the previous chunk's logits
  once the next exist, where the path keeps two alive); the step's inputs (q, weights,
  K cache) first when ``include_inputs`` (what the device script allocates);
- ``source="trace"``: the tracer's own malloc/free stream of the reference
  executor on the meta device (every tensor it allocates).

Every number here is modelled; ``cli.devicecheck`` stage ``reserved`` measures the
same curves on an H200 (``torch.cuda.memory_reserved``) next to this prediction.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..memory.allocator import AllocatorOutOfMemory, CachingAllocatorModel, replay
from ..memory.events import plan_events
from ..memory import memory_report, plan_at
from ..plan import Plan, PlanSettings, Strategy, get_strategy
from ..workload import PrefillRequest, StepBatch, check_int

STRATEGIES = ("vllm", "causal", "fixed-shape")


def long_prompt_steps(prompt_len: int = 65_536, step_tokens: int = 8192) -> list[StepBatch]:
    """One prompt prefilled ``step_tokens`` at a time: step i has the earlier tokens as context."""
    check_int("prompt_len", prompt_len, 1)
    check_int("step_tokens", step_tokens, 1)
    steps = []
    for i, done in enumerate(range(0, prompt_len, step_tokens)):
        q = min(step_tokens, prompt_len - done)
        steps.append(StepBatch((PrefillRequest(context_len=done, query_len=q),), step=i))
    return steps


def traced_events(plan: Plan, key: str, topk_rows: int | None = None,
                  topk: int | None = None) -> list[tuple]:
    """The reference executor's own allocation stream on the meta device."""
    from ..run.tracer import trace

    result = trace(plan, topk_rows=topk_rows, topk=topk, record_events=True)
    events, live = [], {}
    for e in result.events:
        if e[0] == "malloc":
            live[e[1]] = True
            events.append(("malloc", f"{key}/{e[1]}", e[2]))
        else:
            live.pop(e[1], None)
            events.append(("free", f"{key}/{e[1]}"))
    events += [("free", f"{key}/{k}") for k in live]  # the persistent buffers, at the call's end
    return events


@dataclass(frozen=True)
class StepReserved:
    strategy: str
    step: int
    context_len: int
    query_len: int
    chunks: int
    logits_shapes: int  # distinct logits allocation sizes in the step
    max_logits_bytes: int
    peak_allocated: int  # most bytes live at once during the step (allocator's rounding included)
    reserved: int  # bytes the allocator holds from the driver after the step
    segments: int  # segments it holds after the step
    new_segments: int  # segments the step added
    source: str  # "model" or "trace" (both modelled)
    retries: int = 0  # times so far the allocator gave its cached segments back to fit a new one
    oom: bool = False  # the step could not be served even then (the curve ends here)
    held_from_boot: int = 0  # the K workspace and top-k output a server holds from boot (in reserved)


DEFAULT_SETTINGS = PlanSettings("glm-5", temporaries="deepgemm")


def reserved_curve(strategy: str | Strategy, steps: list[StepBatch], budget_mb: float = 512,
                   settings: PlanSettings = DEFAULT_SETTINGS, source: str = "model",
                   include_inputs: bool = False, planned=None, limit_bytes: int | None = None) -> list[StepReserved]:
    """Replay every step's allocations through one allocator; one row per step.

    ``strategy``: a name or an object (fixed-shape's width, unless given, is the last step's
    sequence length, so one shape serves the whole prefill).  ``settings.temporaries``: whose
    temporaries the model counts (``deepgemm``: the H200 path; ``reference``; None).
    ``planned(batch, strategy)``: a caller's own (plan, memory report) of a step (the device
    script's, with its backend), instead of the settings'.  ``limit_bytes``: the memory free when
    a step runs beyond the buffers held from boot (the K workspace and the top-k output, which the
    driver gives on top of it, as the ledger counts them); past it the allocator gives its cached
    segments back and retries, as PyTorch does, and a step it still cannot serve ends the curve
    with ``oom``.
    """
    if source not in ("model", "trace"):
        raise ValueError(f"source {source!r}: must be 'model' or 'trace'")
    strategy = get_strategy(strategy).for_steps(steps)
    alloc = CachingAllocatorModel(limit=limit_bytes)
    handles: dict[str, int] = {}
    rows = []
    for i, batch in enumerate(steps):
        if planned is not None:
            plan, report = planned(batch, strategy)
        else:
            plan = plan_at(batch, strategy, budget_mb, settings)
            report = memory_report(plan)  # the top-k buffer of the step's own rows
        if source == "model":
            events = plan_events(plan, report, f"s{i}", include_inputs)
        else:
            events = traced_events(plan, f"s{i}")
        if limit_bytes is not None:
            # the free memory is what a step has beyond the buffers a server holds from boot (the
            # K workspace, the top-k output), as the ledger and every verdict count it
            alloc.limit = limit_bytes + report.persistent
        segments_before = _segments(alloc)
        try:
            # allocated bytes only peak right after a malloc: the curve's maximum is the peak
            peak, oom = max([alloc.allocated] + [a for a, _ in replay(events, alloc, handles)]), False
        except AllocatorOutOfMemory as e:
            peak, oom = e.allocated + e.nbytes, True
        sizes = {c.logits_bytes for c in plan.chunks}
        rows.append(StepReserved(strategy.name, batch.step, batch.requests[0].context_len,
                                 batch.num_rows, plan.num_chunks, len(sizes), max(sizes), peak,
                                 alloc.reserved, _segments(alloc), _segments(alloc) - segments_before,
                                 source, alloc.retries, oom, report.persistent))
        if oom:
            break
    return rows


def _segments(alloc: CachingAllocatorModel) -> int:
    return sum(s is not None for s in alloc.segments)


def reserved_table(prompt_len: int = 65_536, step_tokens: int = 8192, budget_mb: float = 512,
                   settings: PlanSettings = DEFAULT_SETTINGS, strategies=STRATEGIES, free_gib: float | None = None):
    """``reserved_curve`` of each strategy over one long prompt, as one tidy DataFrame
    (``free_gib``: the memory free when the prompt starts, which the allocator may fill)."""
    import pandas as pd

    from ..presets import free_bytes_from_gib

    steps = long_prompt_steps(prompt_len, step_tokens)
    limit = None if free_gib is None else free_bytes_from_gib(free_gib)
    rows = []
    for s in strategies:
        for r in reserved_curve(s, steps, budget_mb, settings, limit_bytes=limit):
            row = asdict(r)
            row.update(mode="model", prompt_len=prompt_len, step_tokens=step_tokens,
                       budget_mb=budget_mb, model=settings.model, engine=settings.engine or "",
                       free_gib=free_gib)
            rows.append(row)
    return pd.DataFrame(rows)

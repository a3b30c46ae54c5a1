"""The executor's allocations for one step, as ``("malloc", key, bytes)`` / ``("free", key)``
events from the memory model's bytes, in the executor's order: what the caching-allocator model
(``memory.allocator``) replays for the reserved-memory curves and the ledger's allocator line.
At their peak the events hold exactly the step's transient peak (``MemoryReport.peak_transient``)."""
from __future__ import annotations

import functools
from typing import NamedTuple

from ..dtypes import FP32_BYTES, INT32_BYTES
from ..plan import Plan, merged_chunks
from ..presets import get_model
from .model import MemoryReport


def plan_events(plan: Plan, report: MemoryReport, key: str, inputs: bool = False,
                persistent: bool = True) -> list[tuple]:
    """The executor's allocations for one step, from the memory model's bytes (``persistent``:
    with the K workspace and the top-k buffer, allocated and freed with the step; without, the
    caller holds them, as a server does from boot: ``persistent_events``)."""
    events: list[tuple] = []
    append = events.append
    emit_events(plan, report, key, lambda block, nbytes: append(("malloc", block, nbytes)),
                lambda block: append(("free", block)), inputs, persistent)
    return events


def emit_events(plan: Plan, report: MemoryReport, key: str, put_malloc, put_free, inputs: bool = False,
                persistent: bool = True) -> None:
    """``plan_events``, each event handed on as it is made: ``put_malloc(block, bytes)``,
    ``put_free(block)`` (a reader that needs no list of them: ``memory.cached_fit.DemandCount``)."""
    live: dict[str, None] = {}  # the blocks allocated and not freed, in allocation order
    prefix = key + "/"  # a block's key: the step's key, then its name

    def malloc(block: str, nbytes: int) -> None:
        if nbytes > 0:
            put_malloc(block, nbytes)
            live[block] = None

    def free(block: str) -> None:
        if live.pop(block, False) is None:
            put_free(block)

    if inputs:
        m = get_model(plan.model)
        rows, tokens = plan.batch.num_rows, plan.batch.num_kv_tokens
        for name, nbytes in (("q", rows * m.index_heads * m.head_dim),
                             ("weights", FP32_BYTES * rows * m.index_heads),
                             ("k_cache", tokens * m.head_dim), ("k_scale", FP32_BYTES * tokens)):
            malloc(prefix + name, nbytes)
    if persistent:
        for _, block, nbytes in persistent_events(plan, report, key):
            put_malloc(block, nbytes)
            live[block] = None
    malloc(prefix + "call", report.call)  # an engine's per-call K and top-k, held through the call
    chunks = plan.chunks
    merged = merged_chunks(chunks)
    rows_keys = [(c.token_start, c.token_end) for c in chunks] if any(merged) else None
    last_i = len(chunks) - 1
    running = prefix + "running"
    before = _blocks(prefix, -1)  # the previous chunk's blocks
    for i, (c, mem) in enumerate(zip(chunks, report.chunks)):
        n = _blocks(prefix, i)
        if merged[i]:
            first = i == 0 or rows_keys[i - 1] != rows_keys[i]
            last = i == last_i or rows_keys[i + 1] != rows_keys[i]
            if first:
                malloc(running, mem.running // 2)
        index_bytes = INT32_BYTES * c.num_rows
        malloc(n.ks, index_bytes)
        malloc(n.ke, index_bytes)
        malloc(n.slots, mem.metadata - 2 * index_bytes)
        if merged[i]:
            malloc(n.candidates, mem.running // 2)
        malloc(n.kv, mem.kv_buffer)
        # the kernel's own logits first (DeepGEMM's bf16), then the engine's copy of them
        malloc(n.staged, mem.staged)
        malloc(n.logits, mem.logits)
        if mem.held or mem.staged:  # what lives through this chunk's logits call
            malloc(n.with_held, mem.held_with)
            free(n.with_held)
            free(n.staged)
            free(before.logits)  # the previous chunk's, where it is held
        malloc(n.temporaries, mem.temporaries)
        free(n.temporaries)
        # freed once the next chunk's logits exist
        keep = i != last_i and report.chunks[i + 1].held
        for block in (n.kv, n.candidates, n.slots, n.ke, n.ks):
            if block in live:  # the blocks this chunk allocated (the others were never asked for)
                del live[block]
                put_free(block)
        if not keep:
            free(n.logits)
        if merged[i] and last:
            free(running)
        before = n
    for block in list(live):
        free(block)


class _Blocks(NamedTuple):
    """The keys of one chunk's blocks."""

    ks: str
    ke: str
    slots: str
    candidates: str
    kv: str
    staged: str
    logits: str
    with_held: str
    temporaries: str


@functools.lru_cache(maxsize=4096)  # every step of a run names its chunks' blocks alike: named once
def _blocks(prefix: str, i: int) -> _Blocks:
    """Chunk ``i``'s block keys in a step whose keys start with ``prefix``."""
    return _Blocks(*(f"{prefix}{i}/{name}" for name in _Blocks._fields))


def persistent_events(plan: Plan, report: MemoryReport, key: str) -> list[tuple]:
    """The K workspace (values, then scales) and the top-k buffer, as the executor allocates them."""
    d = get_model(plan.model).head_dim
    tokens = report.workspace // (d + FP32_BYTES)
    sizes = (("workspace_k", tokens * d), ("workspace_scale", tokens * FP32_BYTES), ("topk", report.topk_buffer))
    return [("malloc", f"{key}/{name}", nbytes) for name, nbytes in sizes if nbytes > 0]




def live_peak(events) -> int:
    """The most bytes the events hold at once, as asked (before the allocator rounds them); a block
    not freed by the end is refused (a step's events free everything they allocate)."""
    live = peak = 0
    sizes: dict[str, int] = {}
    for event in events:
        if event[0] == "malloc":
            sizes[event[1]] = event[2]
            live += event[2]
            peak = max(peak, live)
        else:
            live -= sizes.pop(event[1])
    if sizes:
        raise ValueError(f"events: {len(sizes)} block(s) never freed, the first {next(iter(sizes))!r}")
    return peak

"""The executor's allocations for one step, as ``("malloc", key, bytes)`` / ``("free", key)``
events from the memory model's bytes, in the executor's order: what the caching-allocator model
(``memory.allocator``) replays for the reserved-memory curves and the ledger's allocator line.
At their peak the events hold exactly the step's transient peak (``MemoryReport.peak_transient``)."""
from __future__ import annotations

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
    live: dict[str, None] = {}  # the blocks allocated and not freed, in allocation order

    def malloc(name: str, nbytes: int) -> None:
        if nbytes > 0:
            events.append(("malloc", f"{key}/{name}", nbytes))
            live[f"{key}/{name}"] = None

    def free(name: str) -> None:
        if live.pop(f"{key}/{name}", False) is None:
            events.append(("free", f"{key}/{name}"))

    if inputs:
        m = get_model(plan.model)
        rows, tokens = plan.batch.num_rows, plan.batch.num_kv_tokens
        for name, nbytes in (("q", rows * m.index_heads * m.head_dim),
                             ("weights", FP32_BYTES * rows * m.index_heads),
                             ("k_cache", tokens * m.head_dim), ("k_scale", FP32_BYTES * tokens)):
            malloc(name, nbytes)
    if persistent:
        events += persistent_events(plan, report, key)
        live.update((e[1], None) for e in events if e[0] == "malloc")
    malloc("call", report.call)  # an engine's per-call K and top-k, held through the call
    merged = merged_chunks(plan.chunks)
    for i, (c, mem) in enumerate(zip(plan.chunks, report.chunks)):
        rows_key = (c.token_start, c.token_end)
        first = merged[i] and (i == 0 or (plan.chunks[i - 1].token_start,
                                          plan.chunks[i - 1].token_end) != rows_key)
        last = merged[i] and (i + 1 == len(plan.chunks) or (plan.chunks[i + 1].token_start,
                                                             plan.chunks[i + 1].token_end) != rows_key)
        if first:
            malloc("running", mem.running // 2)
        malloc(f"{i}/ks", INT32_BYTES * c.num_rows)
        malloc(f"{i}/ke", INT32_BYTES * c.num_rows)
        malloc(f"{i}/slots", mem.metadata - 2 * INT32_BYTES * c.num_rows)
        if merged[i]:
            malloc(f"{i}/candidates", mem.running // 2)
        malloc(f"{i}/kv", mem.kv_buffer)
        malloc(f"{i}/logits", mem.logits)
        if mem.held:  # the previous chunk's logits live through this chunk's logits call
            malloc(f"{i}/with_held", mem.held_with)
            free(f"{i}/with_held")
            free(f"{i - 1}/logits")
        malloc(f"{i}/temporaries", mem.temporaries)
        free(f"{i}/temporaries")
        last_chunk = i + 1 == len(plan.chunks)
        keep = not last_chunk and report.chunks[i + 1].held  # freed once the next chunk's logits exist
        for name in ("kv", "candidates", "slots", "ke", "ks"):
            free(f"{i}/{name}")
        if not keep:
            free(f"{i}/logits")
        if last:
            free("running")
    for name in list(live):
        free(name.split("/", 1)[1])
    return events


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

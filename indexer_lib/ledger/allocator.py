"""The caching allocator over a whole run (the ledger's ``allocator`` line).

The boot buffers are allocated first and held; then every step's allocations (its prefill chunks
as the executor makes them, ``memory.events.plan_events``, then its decode logits) go through one
``memory.allocator.CachingAllocatorModel`` whose driver can give the boot buffers plus the memory
free when a step runs.  The line is the most the allocator held beyond the boot buffers; where a
request cannot be served even after the allocator gave its cached segments back, the line is what
it then needed, which exceeds the free memory, and says whether the total would have fitted (the
segments it kept were the wrong sizes).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..memory.cached_fit import served_from_cache
from ..memory.allocator import AllocatorOutOfMemory, CachingAllocatorModel, replay, round_size, segment_size
from .lines import LedgerLine

SOURCE = ("memory/allocator.py: PyTorch's CUDACachingAllocator rules (c10/cuda/CUDACachingAllocator.cpp), "
          "with what each step allocates in the executor's order")


@dataclass(frozen=True)
class AllocatorRun:
    high_water: int  # most bytes held from the driver beyond the boot buffers
    step: int | None  # the engine step where that was reached (or where it failed)
    failed: bool
    fragmented: bool  # failed although allocated + the request fitted the free memory
    segments: int
    retries: int

    def line(self, expandable: bool) -> LedgerLine:
        where = f"step {self.step}" if self.step is not None else "boot"
        conf = "expandable_segments on" if expandable else "expandable_segments off (PyTorch's default)"
        if self.failed:
            why = ("the segment it asks the driver for does not fit what is left, although the bytes allocated "
                   "would (segments rounded up, or kept at the wrong sizes)" if self.fragmented
                   else "more than the free memory allocated at once")
            detail = f"fails at {where}: {why}; {conf}"
        else:
            detail = f"high water at {where}, {self.segments} segments held; {conf}"
        return LedgerLine("allocator", "caching allocator across the run", self.high_water, SOURCE, detail)


def run_allocator(boot_events: list[tuple], steps, free_bytes: int | None, expandable: bool = False,
                  retry: bool = True) -> AllocatorRun:
    """Replay ``boot_events`` then each ``(engine step, events)`` of ``steps`` (a step's keys its
    own: every block a step allocates is freed by its end); the driver gives the boot buffers plus
    ``free_bytes`` (None: no limit).  A step may carry its events' ``memory.cached_fit.Demand`` as a
    third item: where the allocator's cached blocks serve it, replaying it would leave every number
    here as it is, and it is not replayed.  ``retry``: a segment past the limit
    first makes the allocator give its cached segments back (PyTorch's free-and-retry); without
    it (unified memory, where the driver fails first) the run fails there."""
    alloc = CachingAllocatorModel(**({"expandable_segments": True} if expandable else {}))
    handles: dict[str, int] = {}
    replay(boot_events, alloc, handles)
    held = alloc.reserved
    if free_bytes is not None:
        alloc.limit = held + free_bytes
    high, high_step = 0, None
    malloc, free = alloc.malloc, alloc.free
    for step, events, *known in steps:
        if known and known[0] is not None and served_from_cache(alloc, known[0]):
            continue
        handles = {}
        for event in events:
            if event[0] == "free":
                free(handles.pop(event[1]))
                continue
            if not retry:  # what a failure without the retry reports
                allocated, reserved, retries = alloc.allocated, alloc.reserved, alloc.retries
            try:
                handles[event[1]] = malloc(event[2])
            except AllocatorOutOfMemory as e:
                failure, retries = e, alloc.retries
            else:
                if retry or alloc.retries == retries:
                    continue
                # without the retry, it fails where the allocator first gave cached segments back
                failure = AllocatorOutOfMemory(event[2], allocated, reserved, alloc.limit)
            # what it needed from the driver then, beyond the boot buffers
            need = failure.reserved + segment_size(round_size(failure.nbytes)) - held
            return AllocatorRun(max(high, need), step, True, failure.fragmented, _segments(alloc), retries)
        if alloc.peak_reserved - held > high:
            high, high_step = alloc.peak_reserved - held, step
    return AllocatorRun(high, high_step, False, False, _segments(alloc), alloc.retries)


def _segments(alloc: CachingAllocatorModel) -> int:
    return sum(s is not None for s in alloc.segments)

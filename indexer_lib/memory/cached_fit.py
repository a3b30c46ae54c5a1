"""Whether a step's allocations are all served from the caching allocator's cached blocks, so
that replaying them would leave the allocator as it was.

A step's events (``("malloc", key, bytes)`` / ``("free", key)``, ``memory.events``) that free
every block they allocate take nothing new from the driver where, in each pool, best fit finds a
block at every request.  Two ways this is sure, pool by pool:
- the pool holds at least as many free blocks of the step's largest request (rounded) as the
  step holds blocks of the pool at once: each live block was cut from one free block at most,
  and a freed block merges back with what is left of it, so at every request one of those free
  blocks is still whole;
- one free block holds every request of the step in the pool (rounded) and, besides, the
  fewest bytes the allocator keeps as a free block when it cuts a request from a larger one
  (``least_kept``, should_split): a request cut from the block's free end leaves at least that
  much there, which stays a free block, and that end shrinks only by the requests cut from it,
  so it always holds the next request.
No segment is then added or given back, and once every block is freed again the free blocks
merge back into the layout they had (the allocator never keeps two free neighbours apart), so
the allocator ends as it began, its reserved bytes and their peak included; only its handle
counter and its peak of allocated bytes are not moved.  Without a ``max_split_size`` only: that
rule lets best fit refuse a block that fits.

``demand`` reads what the test needs of events once (a run's steps repeat their events);
``served_from_cache`` is the test, against the allocator's state when the step starts.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple

from .allocator import SMALL_SIZE, CachingAllocatorModel, round_size


class PoolDemand(NamedTuple):
    most_live: int  # blocks of the pool live at once, the one being asked for included
    largest: int  # the largest request, rounded as the allocator rounds it
    total: int  # every request, rounded

    def then(self, other: PoolDemand) -> PoolDemand:
        """This pool's demand followed by ``other``'s."""
        return PoolDemand(max(self.most_live, other.most_live), max(self.largest, other.largest),
                          self.total + other.total)


class Demand(NamedTuple):
    small: PoolDemand
    large: PoolDemand

    def then(self, other: Demand) -> Demand:
        """The demand of these events followed by ``other``'s (each frees what it allocates)."""
        return Demand(self.small.then(other.small), self.large.then(other.large))


NOTHING = Demand(PoolDemand(0, 0, 0), PoolDemand(0, 0, 0))  # events that allocate nothing


def demand(events) -> Demand | None:
    """What ``served_from_cache`` reads of ``events``; None for events the test does not cover (a
    block left allocated at the end, a key allocated twice, a free of a key not allocated)."""
    count = DemandCount()
    malloc, free = count.malloc, count.free
    for event in events:
        if event[0] == "malloc":
            malloc(event[1], event[2])
        else:
            free(event[1])
    return count.demand()


class DemandCount:
    """``demand`` read one event at a time, as a producer makes them (``memory.events.emit_events``):
    ``malloc(key, bytes)``, ``free(key)``, then ``demand()``."""

    __slots__ = ("live", "pools", "covered")

    def __init__(self):
        self.live: dict = {}  # key -> its pool (True: small, False: large)
        # per pool (index 0: large, 1: small): [blocks live now, most live at once, largest, total]
        self.pools = ([0, 0, 0, 0], [0, 0, 0, 0])
        self.covered = True  # False once an event the test does not cover was read

    def malloc(self, key, nbytes: int) -> None:
        live = self.live
        if key in live:
            self.covered = False
            return
        size = round_size(nbytes)
        small = live[key] = size <= SMALL_SIZE
        pool = self.pools[small]
        now = pool[0] = pool[0] + 1
        if now > pool[1]:
            pool[1] = now
        if size > pool[2]:
            pool[2] = size
        pool[3] += size

    def free(self, key) -> None:
        small = self.live.pop(key, None)
        if small is None:
            self.covered = False
            return
        self.pools[small][0] -= 1

    def demand(self) -> Demand | None:
        if not self.covered or self.live:
            return None
        large, small = self.pools
        return Demand(PoolDemand(*small[1:]), PoolDemand(*large[1:]))


def served_from_cache(model: CachingAllocatorModel, need: Demand) -> bool:
    """Whether replaying events of demand ``need`` on ``model`` now takes every block from its cached
    free blocks and leaves it as it was (see the module's docstring)."""
    if model.max_split_size is not None:
        return False
    for small, pool in ((True, need.small), (False, need.large)):
        if not pool.most_live:
            continue
        sizes = model.cached_sizes(small)
        if not sizes:
            return False
        whole = len(sizes) - bisect_left(sizes, pool.largest)  # free blocks the largest request fits
        if whole < pool.most_live and sizes[-1] - pool.total < model.least_kept(small):
            return False
    return True

"""A model of PyTorch's CUDA caching allocator (default settings), to predict
``memory_reserved`` for a sequence of allocations and frees.

It follows c10/cuda/CUDACachingAllocator.cpp of pytorch/pytorch at commit
001074d25084fdb87a799823e395a50f5ec044d3 (``allocator_constants`` holds its sizes, each with
the lines it was read from; ``file:N`` below is a line of that file):
- request sizes round up to multiples of 512 bytes;
- small requests (<= 1 MiB) come from 2 MiB segments, large ones from their
  own pool: a new large segment is 20 MiB for requests under 10 MiB, else the
  request rounded up to 2 MiB;
- a request takes the smallest cached free block of its pool that fits (ties:
  the lowest address), split when the remainder is worth keeping (small pool:
  >= 512 bytes; large pool: > 1 MiB);
- freed blocks merge with free neighbours of the same segment;
- nothing goes back to the driver until ``empty_cache`` (segments wholly free), or until a
  new segment does not fit the memory the driver can still give (``limit``): then, as
  ``DeviceCachingAllocator::malloc`` does, it frees
  enough oversize cached blocks (``release_available_cached_blocks``: only with a
  ``max_split_size``), then every wholly free cached segment (``release_cached_blocks``), and
  retries; only when the segment still does not fit does it raise the OOM.
``expandable_segments=True`` models PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True instead of
new segments: one segment per pool grown by pages (``expandable``).  Streams are not modelled.
"""
from __future__ import annotations

from . import expandable
from .allocator_constants import (KB, LARGE_BUFFER, MB, MIN_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE,  # noqa: F401
                                  SMALL_BUFFER, SMALL_SIZE)
from .segments import Block, FreeBlocks, Segment, merge_free, split


def round_size(size: int) -> int:
    """round_size (CUDACachingAllocator.cpp:2026-2037), without roundup_power2_divisions."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    return -(-size // MIN_BLOCK) * MIN_BLOCK


def segment_size(size: int) -> int:
    """Bytes the allocator asks cudaMalloc for when no cached block fits (get_allocation_size,
    CUDACachingAllocator.cpp:2488-2496)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class AllocatorOutOfMemory(MemoryError):
    """A request the allocator cannot serve even after giving its cached segments back.

    ``fragmented``: the live blocks and the request together fit the limit, so the memory is
    there but not in one piece (pieces of segments that live blocks keep).  ``event``: set by
    ``replay`` to the index of the event that raised."""

    def __init__(self, nbytes: int, allocated: int, reserved: int, limit: int):
        self.nbytes, self.allocated, self.reserved, self.limit = nbytes, allocated, reserved, limit
        self.event: int | None = None
        super().__init__(f"tried to allocate {nbytes} bytes with {allocated} allocated and {reserved} reserved "
                         f"of {limit} the driver can give (after freeing every cached segment)")

    @property
    def fragmented(self) -> bool:
        return self.allocated + self.nbytes <= self.limit


class CachingAllocatorModel:
    """Replay allocations and frees; read ``allocated`` and ``reserved`` bytes.

    ``limit``: the bytes the driver can give this allocator in all (None: unlimited); a new
    segment past it first makes the allocator give its cached segments back (``retries``
    counts how often), then raises ``AllocatorOutOfMemory``.
    ``expandable_segments``: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; each pool then
    grows one segment page by page instead of adding segments (see ``expandable``)."""

    def __init__(self, max_split_size: int | None = None, limit: int | None = None,
                 expandable_segments: bool = False):
        if expandable_segments and max_split_size is not None:
            # PyTorch cannot release an expandable block as an oversize one (release_block, :2818)
            raise ValueError("max_split_size together with expandable_segments is not modelled")
        self.segments: list[Segment | None] = []
        self.live: dict[int, Block] = {}
        self.next_handle = 0
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.max_split_size = max_split_size  # None: PyTorch's default, no limit
        self.limit = limit
        self.retries = 0  # times the cached segments were given back to fit a new one
        self.expandable_segments = expandable_segments
        # the free blocks of each pool (small: True), as PyTorch's BlockPool::blocks.  Not kept under
        # expandable segments, whose best fit looks past the smallest block (_best_fit_expandable
        # scans the segments instead).
        self._free_blocks: dict[bool, FreeBlocks] | None = (None if expandable_segments
                                                             else {True: FreeBlocks(), False: FreeBlocks()})

    def malloc(self, nbytes: int) -> int:
        """Allocate; returns a handle for ``free``."""
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        block = self._best_fit(size, small)
        if block is None:
            block = self._new_block(size, small, nbytes)
        self._split(block, size, small)
        block.free = False
        handle = self.next_handle
        self.next_handle = handle + 1
        self.live[handle] = block
        self.allocated += block.size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        return handle

    def free(self, handle: int) -> None:
        block = self.live.pop(handle)
        self.allocated -= block.size
        block.free = True
        if self._free_blocks is None:
            merge_free(block)
        else:
            pool = self._free_blocks[self.segments[block.segment].small]
            pool.add(merge_free(block, pool.remove))

    def cached_sizes(self, small: bool) -> list[int]:
        """The sizes of a pool's free blocks that best fit may hand out (mapped ones, under
        expandable segments), ascending; not to be changed."""
        if self._free_blocks is None:
            return sorted(b.size for seg in self.segments if seg is not None and seg.small == small
                          for b in seg if b.free and b.mapped)
        return self._free_blocks[small].sizes

    def empty_cache(self) -> None:
        """Return wholly free segments to the driver, and the free pages of expandable ones
        (release_cached_blocks, CUDACachingAllocator.cpp:2772-2797)."""
        for k, seg in enumerate(self.segments):
            if seg is None:
                continue
            if seg.expandable:
                self.reserved -= expandable.unmap_free_pages(seg)
                if not any(b.mapped for b in seg.blocks):
                    self.segments[k] = None
            elif seg.wholly_free:
                self._release(k)

    def _release(self, k: int) -> None:
        """Give wholly free segment ``k`` back to the driver (release_block, :2815-2848)."""
        seg = self.segments[k]
        self._free_blocks[seg.small].remove(seg.first)
        self.reserved -= seg.size
        self.segments[k] = None

    def _fits(self, seg_bytes: int) -> bool:
        return self.limit is None or self.reserved + seg_bytes <= self.limit

    def _new_block(self, size: int, small: bool, nbytes: int) -> Block:
        """A free block from new memory, as DeviceCachingAllocator::malloc gets one when no cached
        block fits (CUDACachingAllocator.cpp:1247-1255): alloc_block; failing that, with a
        max_split_size, release_available_cached_blocks and alloc_block again; failing that,
        release_cached_blocks and alloc_block again; failing that, the OOM."""
        block = self._alloc_block(size, small)
        if block is None and self.max_split_size is not None:
            self._release_oversize(max(size, self.max_split_size), small)
            block = self._alloc_block(size, small)
        if block is None:
            self.empty_cache()
            self.retries += 1
            block = self._alloc_block(size, small)
        if block is None:
            raise AllocatorOutOfMemory(nbytes, self.allocated, self.reserved, self.limit)
        return block

    def _alloc_block(self, size: int, small: bool) -> Block | None:
        """alloc_block (CUDACachingAllocator.cpp:2630-2723): a new segment holding one free block,
        or None when the driver cannot give it."""
        if self.expandable_segments:
            return self._grow_expandable(size, small)
        seg_bytes = segment_size(size)
        if not self._fits(seg_bytes):
            return None
        block = Block(len(self.segments), 0, seg_bytes)
        self.segments.append(Segment(small, seg_bytes, block))
        self.reserved += seg_bytes
        return block  # not in the index: the request takes it

    def _grow_expandable(self, size: int, small: bool) -> Block | None:
        """alloc_block under expandable segments: map pages onto the pool's segment where
        ``expandable.find_room`` says, a new segment only when none has room."""
        for seg in self.segments:
            if seg is not None and seg.expandable and seg.small == small:
                start = expandable.find_room(seg, size)
                if start is not None:
                    return expandable.grow(seg, start, size, self._map)
        seg = expandable.new_segment(len(self.segments), small, self._address_space())
        self.segments.append(seg)
        return expandable.grow(seg, seg.first, size, self._map)

    def _map(self, nbytes: int) -> bool:
        """Back ``nbytes`` more of an expandable segment with memory, if the driver can give it."""
        if not self._fits(nbytes):
            return False
        self.reserved += nbytes
        return True

    def _address_space(self) -> int:
        # PyTorch reserves 9/8 of the GPU's memory (:2214-2217); unlimited: 256 TiB (:339-341)
        return 2**48 if self.limit is None else self.limit + self.limit // 8

    def _release_oversize(self, key: int, small: bool) -> None:
        """release_available_cached_blocks (CUDACachingAllocator.cpp:2728-2770): of the request's
        pool, the smallest wholly free oversize segment of at least ``key`` bytes, else the largest
        ones until ``key`` bytes are released."""
        free = sorted((seg.size, k) for k, seg in enumerate(self.segments)
                      if seg is not None and seg.small == small and seg.wholly_free and seg.size >= self.max_split_size)
        large = [k for size, k in free if size >= key]
        victims = large[:1] if large else []
        if not victims:
            released = 0
            for size, k in reversed(free):
                if released >= key:
                    break
                victims.append(k)
                released += size
        for k in victims:
            self._release(k)

    def _best_fit(self, size: int, small: bool) -> Block | None:
        """get_free_block (:2507-2509, :2544-2553): the first free block of the pool in (size,
        address) order that fits, taken out of the index; None if there is none or the oversize
        rules refuse it.  Those refuse every larger block too, so no other block is looked at."""
        if self._free_blocks is None:
            return self._best_fit_expandable(size, small)
        return self._free_blocks[small].take(size, None if self.max_split_size is None else self._may_use)

    def _best_fit_expandable(self, size: int, small: bool) -> Block | None:
        """get_free_block (:2507-2527): the smallest free block that fits, except that while the
        next one up in size could grow by less, that one is taken instead."""
        fits = sorted((b for seg in self.segments if seg is not None and seg.small == small
                       for b in seg if b.free and b.mapped and b.size >= size),
                      key=lambda b: (b.size, b.segment, b.offset))
        i = 0
        while i + 1 < len(fits) and expandable.growth_size(fits[i + 1]) < expandable.growth_size(fits[i]):
            i += 1
        return fits[i] if fits else None

    def _may_use(self, block: Block, size: int) -> bool:
        limit = self.max_split_size
        if limit is None:
            return True
        # oversize cached blocks serve only requests that are oversize and close in size
        # (get_free_block, CUDACachingAllocator.cpp:2544-2551)
        if size < limit and block.size >= limit:
            return False
        return not (size >= limit and block.size >= size + LARGE_BUFFER)

    def least_kept(self, small: bool) -> int:
        """The fewest bytes left over of a free block that ``_split`` keeps as a free block."""
        return MIN_BLOCK if small or self.expandable_segments else SMALL_SIZE + 1

    def _split(self, block: Block, size: int, small: bool) -> None:
        """should_split (CUDACachingAllocator.cpp:2478-2486): keep the remainder as a free block when
        it is worth it: 512 bytes in the small pool and in every pool of expandable segments; in the
        large pool otherwise more than 1 MiB, and never for a request of max_split_size or more."""
        worth = block.size - size >= self.least_kept(small)
        if not (small or self.expandable_segments):
            worth = worth and (self.max_split_size is None or size < self.max_split_size)
        if worth:
            rest = split(block, size)
            if self._free_blocks is not None:
                self._free_blocks[small].add(rest)


def replay(events, model: CachingAllocatorModel | None = None,
           handles: dict | None = None) -> list[tuple[int, int]]:
    """Replay ``("malloc", key, nbytes)`` / ``("free", key)`` events.

    Returns (allocated, reserved) after each event.  ``model`` and ``handles`` (key
    -> block) carry an allocator's state on from earlier events (default: a fresh one).
    The first malloc that cannot be served raises ``AllocatorOutOfMemory`` with ``event``, its
    index in ``events``, and ``fragmented``: whether the memory was there but not in one piece.
    """
    model = CachingAllocatorModel() if model is None else model
    handles = {} if handles is None else handles
    curve = []
    for i, event in enumerate(events):
        if event[0] == "malloc":
            try:
                handles[event[1]] = model.malloc(event[2])
            except AllocatorOutOfMemory as e:
                e.event = i
                raise
        elif event[0] == "free":
            model.free(handles.pop(event[1]))
        else:
            raise ValueError(f"unknown allocator event {event[0]!r}: must be 'malloc' or 'free'")
        curve.append((model.allocated, model.reserved))
    return curve

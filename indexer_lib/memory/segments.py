"""The blocks of an allocator segment, linked in address order, how they split and merge, and a
pool's free blocks in the order best fit reads them.

As PyTorch's Block (CUDACachingAllocator.cpp), each block links to its neighbours, so a split or a
merge touches only them, however many blocks the segment holds."""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)  # blocks are compared by identity
class Block:
    segment: int
    offset: int
    size: int
    free: bool = True
    mapped: bool = True  # False: address space of an expandable segment with no memory behind it
    prev: Block | None = field(default=None, repr=False)  # the neighbours in the segment, None at its ends
    next: Block | None = field(default=None, repr=False)


@dataclass(eq=False, slots=True)
class Segment:
    small: bool
    size: int  # bytes reserved; for an expandable segment, its address space
    first: Block  # at offset 0; a merge keeps the lower block, so it stays first
    expandable: bool = False

    def __iter__(self) -> Iterator[Block]:
        """The blocks in address order."""
        block = self.first
        while block is not None:
            yield block
            block = block.next

    @property
    def blocks(self) -> list[Block]:
        """The blocks in address order, as a list."""
        return list(self)

    @property
    def wholly_free(self) -> bool:
        """One free block: the segment can go back to the driver whole."""
        return self.first.next is None and self.first.free


def split(block: Block, size: int) -> Block:
    """Keep the first ``size`` bytes in ``block``; returns the rest, a block of the same kind (free,
    mapped) linked after it."""
    rest = Block(block.segment, block.offset + size, block.size - size, block.free, block.mapped, block, block.next)
    if block.next is not None:
        block.next.prev = rest
    block.next = rest
    block.size = size
    return rest


def merge_free(block: Block, joining: Callable[[Block], None] | None = None) -> Block:
    """Merge free ``block`` with its free neighbours, the next one first; returns the merged block.
    ``joining`` is called with each neighbour that merges, before it does (the allocator keeps an
    index of free blocks by size).

    As try_merge_blocks (CUDACachingAllocator.cpp:2412-2443) a mapped block never merges with an
    unmapped one: their memory is of different kinds."""
    after = block.next
    if after is not None and after.free and after.mapped == block.mapped:
        if joining is not None:
            joining(after)
        _absorb(block, after)
    before = block.prev
    if before is not None and before.free and before.mapped == block.mapped:
        if joining is not None:
            joining(before)
        _absorb(before, block)
        return before
    return block


def _absorb(keep: Block, gone: Block) -> None:
    """``keep`` takes its next block ``gone``'s bytes and place in the segment's links."""
    keep.size += gone.size
    keep.next = gone.next
    if gone.next is not None:
        gone.next.prev = keep


class FreeBlocks:
    """One pool's free blocks in the order BlockPool::blocks keeps them for best fit: by size, then
    by address (segment, offset).  ``sizes`` holds their sizes in the same order, to bisect."""
    __slots__ = ("sizes", "blocks")

    def __init__(self):
        self.sizes: list[int] = []
        self.blocks: list[Block] = []

    def add(self, block: Block) -> None:
        sizes, size = self.sizes, block.size
        i = bisect_left(sizes, size)
        while i < len(sizes) and sizes[i] == size and _address(self.blocks[i]) < _address(block):
            i += 1  # a tie of sizes: the lower address first
        sizes.insert(i, size)
        self.blocks.insert(i, block)

    def remove(self, block: Block) -> None:
        i = bisect_left(self.sizes, block.size)
        while self.blocks[i] is not block:  # past the blocks of the same size before it
            i += 1
        del self.sizes[i], self.blocks[i]

    def take(self, size: int, may_use: Callable[[Block, int], bool] | None = None) -> Block | None:
        """Take out the first block of at least ``size`` bytes and return it; None if there is none
        or ``may_use(block, size)`` refuses it."""
        i = bisect_left(self.sizes, size)
        if i == len(self.sizes) or may_use is not None and not may_use(self.blocks[i], size):
            return None
        del self.sizes[i]
        return self.blocks.pop(i)


def _address(block: Block) -> tuple[int, int]:
    return block.segment, block.offset

"""The blocks of an allocator segment, linked in address order, and how they split and merge.

As PyTorch's Block (CUDACachingAllocator.cpp), each block links to its neighbours, so a split or a
merge touches only them, however many blocks the segment holds."""
from __future__ import annotations

from collections.abc import Iterator
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


def merge_free(block: Block) -> Block:
    """Merge free ``block`` with its free neighbours, the next one first; returns the merged block.

    As try_merge_blocks (CUDACachingAllocator.cpp:2412-2443) a mapped block never merges with an
    unmapped one: their memory is of different kinds."""
    after = block.next
    if after is not None and after.free and after.mapped == block.mapped:
        block.size += after.size
        block.next = after.next
        if after.next is not None:
            after.next.prev = block
    before = block.prev
    if before is not None and before.free and before.mapped == block.mapped:
        before.size += block.size
        before.next = block.next
        if block.next is not None:
            block.next.prev = before
        return before
    return block

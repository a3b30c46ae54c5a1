"""The blocks of an allocator segment, in address order, and how free neighbours merge."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)  # blocks are compared by identity
class Block:
    segment: int
    offset: int
    size: int
    free: bool = True
    mapped: bool = True  # False: address space of an expandable segment with no memory behind it


@dataclass
class Segment:
    small: bool
    size: int  # bytes reserved; for an expandable segment, its address space
    blocks: list[Block] = field(default_factory=list)  # in address order
    expandable: bool = False


def merge_free(blocks: list[Block], block: Block) -> Block:
    """Merge free ``block`` with its free neighbours, the next one first; returns the merged block.

    As try_merge_blocks (CUDACachingAllocator.cpp:2412-2443) a mapped block never merges with an
    unmapped one: their memory is of different kinds."""
    i = blocks.index(block)
    if i + 1 < len(blocks) and _joins(block, blocks[i + 1]):
        block.size += blocks.pop(i + 1).size
    if i > 0 and _joins(blocks[i - 1], block):
        blocks[i - 1].size += blocks.pop(i).size
        return blocks[i - 1]
    return block


def _joins(a: Block, b: Block) -> bool:
    return a.free and b.free and a.mapped == b.mapped

"""Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): a segment whose address
space is reserved up front and backed by memory page by page, so the allocator can grow it at its
end and give back free pages anywhere in it.

As CUDACachingAllocator.cpp does it (the commit is in ``allocator_constants``; ``:N`` is a line):
- pages are 2 MiB in the small pool and 20 MiB in the large one (:357-358, :397, :2211);
- a request no free block fits takes the lowest-addressed run of free and unmapped blocks that is
  long enough: normally the free block at the end of what is mapped plus the unmapped space after
  it (find_expandable_block, :2178-2232); whole pages are mapped to cover the request
  (try_allocate_expandable_block, :2297-2328; map_block, :2234-2295; ExpandableSegment::map,
  :414-449); when the driver cannot give a page, that mapping takes nothing (:435-441);
- best fit counts a free block followed by unmapped space as that much larger, so a request takes
  another free block it fits before one it could grow (get_free_block, :2511-2527);
- releasing the cache unmaps every page wholly inside a free block, wherever it lies, and drops a
  segment left with nothing mapped (release_blocks, :2916-2940; unmap_block, :2850-2915;
  ExpandableSegment::unmap, :454-462).
The functions here change a segment's blocks; ``take(nbytes)`` is the allocator's say on whether
the driver gives ``nbytes`` more (and its count of them), and what is unmapped is returned.
"""
from __future__ import annotations

from collections.abc import Callable

from .allocator_constants import LARGE_BUFFER, SMALL_BUFFER
from .segments import Block, Segment, merge_free, split


def page_size(small: bool) -> int:
    return SMALL_BUFFER if small else LARGE_BUFFER


def new_segment(index: int, small: bool, address_space: int) -> Segment:
    """A segment of ``address_space`` bytes (in whole pages, :406) with nothing mapped."""
    page = page_size(small)
    size = -(-address_space // page) * page
    return Segment(small, size, Block(index, 0, size, mapped=False), expandable=True)


def growth_size(block: Block) -> int:
    """expandable_size (:2518-2520): a free block's size plus the unmapped space right after it."""
    after = block.next
    return block.size + (after.size if after is not None and not after.mapped else 0)


def find_room(seg: Segment, size: int) -> Block | None:
    """find_expandable_block's search: the first unmapped block, or the free block just before it,
    from which free and unmapped blocks run on for at least ``size`` bytes."""
    blocks = seg.blocks
    for i, block in enumerate(blocks):
        if block.mapped:
            continue
        start = i - 1 if i > 0 and blocks[i - 1].free else i
        room = 0
        for b in blocks[start:]:
            if room >= size or not b.free:
                break
            room += b.size
        if room >= size:
            return blocks[start]
    return None


def grow(seg: Segment, start: Block, size: int, take: Callable[[int], bool]) -> Block | None:
    """try_allocate_expandable_block: map pages from ``start`` (find_room's answer) on until one
    free block there holds ``size`` bytes; returns it, or None when the driver runs out (pages
    mapped by earlier steps of the loop stay mapped, as they do in PyTorch)."""
    block = start
    if not block.mapped:
        block = _map(seg, block, min(block.size, size), take)
    while block is not None and block.size < size:
        after = block.next  # unmapped: free neighbours are merged
        block = _map(seg, after, min(size - block.size, after.size), take)
    return block


def _map(seg: Segment, block: Block, size: int, take: Callable[[int], bool]) -> Block | None:
    """map_block: back the first ``size`` bytes of unmapped ``block``, rounded up to whole pages,
    and merge them with free neighbours."""
    page = page_size(seg.small)
    nbytes = min(-(-size // page) * page, block.size)
    if not take(nbytes):
        return None
    if nbytes < block.size:  # the rest stays unmapped
        split(block, nbytes)
    block.mapped = True
    return merge_free(block)


def unmap_free_pages(seg: Segment) -> int:
    """release_blocks for one expandable segment: unmap the pages wholly inside each free block;
    returns the bytes unmapped."""
    page = page_size(seg.small)
    unmapped = 0
    for block in [b for b in seg.blocks if b.free and b.mapped]:
        begin = -(-block.offset // page) * page
        end = (block.offset + block.size) // page * page
        if begin >= end:
            continue
        if begin > block.offset:  # the part before the first whole page stays mapped
            block = split(block, begin - block.offset)
        if end < block.offset + block.size:  # and so does the part after the last one
            split(block, end - begin)
        block.mapped = False
        merge_free(block)
        unmapped += end - begin
    return unmapped

"""A finite KV cache as vLLM's block pool keeps it: free blocks in least-recently-freed order, and
the full blocks a request computed still cached until a new allocation evicts them.

Only what decides a schedule is kept (docs/design.md#preemption): how many blocks are free (an
evictable cached block counts as free), and which of a request's own full blocks are still
cached when it resumes after a preemption.  A request's blocks go back in reverse order, its
last block first (``SingleTypeKVCacheManager.free``).  vLLM 0.30.0 on puts the cached ones at the
end of the free queue, to be evicted last, and the others at its front, to be reused first (0.33.0
``BlockPool.free_blocks``, v1/core/block_pool.py:816-847); vLLM 0.13-0.20 appends them all to
its end (0.15.1 v1/core/block_pool.py:389-403).
"""
from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    def __init__(self, num_blocks: int, uncached_first: bool = True):
        self.uncached_first = uncached_first  # freed uncached blocks to the queue's front (0.30.0 on)
        # block 0 is vLLM's null block, never handed out
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self.tag: dict[int, tuple[int, int]] = {}  # block -> (request id, block index): cached
        self.cached: dict[tuple[int, int], int] = {}

    @property
    def num_free(self) -> int:
        return len(self.free)

    def take(self, n: int) -> list[int]:
        """``n`` free blocks, the least recently freed first, evicting what they cached."""
        blocks = []
        for _ in range(n):
            block, _ = self.free.popitem(last=False)
            tag = self.tag.pop(block, None)
            if tag is not None:
                del self.cached[tag]
            blocks.append(block)
        return blocks

    def hits(self, rid: int, most: int) -> list[int]:
        """The request's leading full blocks still cached, at most ``most``."""
        found = []
        while len(found) < most and (rid, len(found)) in self.cached:
            found.append(self.cached[(rid, len(found))])
        return found

    def touch(self, blocks: list[int]) -> None:
        """Hit blocks leave the free queue (they hold a request's KV again)."""
        for block in blocks:
            self.free.pop(block, None)

    def release(self, rid: int, blocks: list[int], full: int) -> None:
        """A request's blocks back to the free queue, last first; its first ``full`` blocks stay
        cached until evicted (at the queue's end), the others are reused first (at its front), or
        join its end too (``uncached_first`` False)."""
        reuse_first = []
        for index in range(len(blocks) - 1, -1, -1):
            block = blocks[index]
            if index < full:
                self.tag[block] = (rid, index)
                self.cached[(rid, index)] = block
                self.free[block] = None
            elif not self.uncached_first:
                self.free[block] = None
            else:
                reuse_first.append(block)
        for block in reversed(reuse_first):  # the first of them ends up at the very front
            self.free[block] = None
            self.free.move_to_end(block, last=False)

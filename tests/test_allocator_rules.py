"""The allocator model held to the rules of c10/cuda/CUDACachingAllocator.cpp (lines are those of
the commit ``allocator_constants.SOURCE`` names)."""
import pytest

from indexer_lib.memory import allocator_constants as c
from indexer_lib.memory.allocator import (MB, AllocatorOutOfMemory, CachingAllocatorModel, replay, round_size,
                                          segment_size)


def test_constants_are_the_documented_values():
    assert c.MIN_BLOCK == 512  # kMinBlockSize, :118-119
    assert c.SMALL_SIZE == 1048576  # kSmallSize, :120
    assert c.SMALL_BUFFER == 2097152  # kSmallBuffer, :121-122
    assert c.LARGE_BUFFER == 20971520  # kLargeBuffer, :47-49
    assert c.MIN_LARGE_ALLOC == 10485760  # kMinLargeAlloc, :123-124
    assert c.ROUND_LARGE == 2097152  # kRoundLarge, :125
    assert "001074d25084fdb87a799823e395a50f5ec044d3" in c.SOURCE


def test_requests_round_up_to_512_bytes():
    # round_size, :2026-2037: at least kMinBlockSize, else the next multiple of it
    assert [round_size(n) for n in (0, 1, 512, 513, 1024, 1025)] == [512, 512, 512, 1024, 1024, 1536]


def test_new_segment_sizes_by_pool():
    # get_allocation_size, :2488-2496
    assert segment_size(c.SMALL_SIZE) == 2 * MB  # small pool: one 2 MiB segment
    assert segment_size(c.SMALL_SIZE + 512) == 20 * MB  # large pool, under 10 MiB: 20 MiB
    assert segment_size(10 * MB - 512) == 20 * MB
    assert segment_size(10 * MB) == 10 * MB  # from 10 MiB: rounded up to 2 MiB
    assert segment_size(11 * MB) == 12 * MB


def test_small_and_large_requests_never_share_a_segment():
    m = CachingAllocatorModel()
    m.free(m.malloc(1 * MB))  # a 2 MiB small-pool segment, now 1 MiB used then freed
    m.malloc(1 * MB + 512)  # large pool: the cached small segment is not for it
    assert m.reserved == 2 * MB + 20 * MB
    m.malloc(512 * 1024)  # and a small request goes to the small segment, not the 20 MiB one
    assert m.reserved == 22 * MB and sum(s is not None for s in m.segments) == 2


def _blocks_after(*requests):
    m = CachingAllocatorModel()
    for nbytes in requests:
        m.malloc(nbytes)
    return [(b.size, b.free) for b in m.segments[0].blocks]


def test_split_thresholds_small_pool_512_bytes_large_pool_over_1_mib():
    # should_split, :2478-2486.  Small pool: a remainder of 512 bytes is kept as a block
    assert _blocks_after(MB, MB - 512) == [(MB, False), (MB - 512, False), (512, True)]
    assert _blocks_after(9 * MB) == [(9 * MB, False), (11 * MB, True)]  # large pool: 11 MiB > 1 MiB
    assert _blocks_after(11 * MB - 512) == [(11 * MB - 512, False), (MB + 512, True)]  # a 12 MiB segment
    assert _blocks_after(11 * MB) == [(12 * MB, False)]  # exactly 1 MiB left: the block keeps it


def test_cached_segments_are_freed_and_the_request_retried_before_an_oom():
    # malloc, :1247-1255: alloc_block, then release_cached_blocks and alloc_block again
    m = CachingAllocatorModel(limit=500 * MB)
    for size in (100, 150, 200):
        m.free(m.malloc(size * MB))
    assert (m.reserved, m.retries) == (450 * MB, 0)
    m.malloc(250 * MB)  # 450 + 250 > 500: the cached segments go back first
    assert (m.reserved, m.retries) == (250 * MB, 1)


def test_a_plain_oom_is_not_fragmented():
    events = [("malloc", "a", 200 * MB), ("malloc", "b", 200 * MB)]
    with pytest.raises(AllocatorOutOfMemory) as e:
        replay(events, CachingAllocatorModel(limit=300 * MB))
    assert e.value.event == 1 and not e.value.fragmented  # 200 + 200 > 300


def test_an_oom_with_room_for_the_request_is_fragmented():
    events = [("malloc", "a", 60 * MB),  # a 60 MiB segment
              ("malloc", "k", 4 * MB),  # a 20 MiB segment, 16 MiB of it left free
              ("free", "a"),
              ("malloc", "b", 30 * MB),  # best fit: the first half of the 60 MiB segment
              ("malloc", "c", 40 * MB)]  # fits no free block (30, 16); 80 + 40 > 100 reserved
    with pytest.raises(AllocatorOutOfMemory) as e:
        replay(events, CachingAllocatorModel(limit=100 * MB))
    assert e.value.event == 4
    assert e.value.allocated == 34 * MB and e.value.reserved == 80 * MB  # nothing wholly free to give back
    assert e.value.fragmented  # 34 + 40 <= 100


def test_max_split_size_stops_splits_for_large_requests_only():
    # should_split, :2483-2484: the request's size decides, not the block's
    m = CachingAllocatorModel(max_split_size=21 * MB)
    m.malloc(20 * MB + 512 * 1024)  # under 21 MiB, in a 22 MiB segment: 1.5 MiB is split off
    assert [b.size for b in m.segments[0].blocks] == [20 * MB + 512 * 1024, 1536 * 1024]
    m.malloc(21 * MB)  # oversize: its 22 MiB segment stays one block
    assert [b.size for b in m.segments[1].blocks] == [22 * MB]


def test_oversize_blocks_serve_only_oversize_requests_close_in_size():
    # get_free_block, :2544-2551
    m = CachingAllocatorModel(max_split_size=40 * MB)
    m.free(m.malloc(100 * MB))
    m.malloc(30 * MB)  # under max_split_size: not from the cached 100 MiB block
    assert m.reserved == 130 * MB
    m.malloc(79 * MB + 512)  # oversize, but 100 >= 79.x + 20: a new segment too
    assert m.reserved == 210 * MB
    m.malloc(80 * MB + 512)  # 100 < 80.x + 20: the cached block, whole
    assert m.reserved == 210 * MB and m.allocated == 30 * MB + (80 * MB) + 100 * MB


def test_release_available_cached_blocks_looks_in_the_requests_pool():
    # :2734: a small request frees no large oversize block; release_cached_blocks does
    m = CachingAllocatorModel(max_split_size=30 * MB, limit=101 * MB)
    m.free(m.malloc(100 * MB))
    m.malloc(512 * 1024)  # a 2 MiB small segment: 102 > 101
    assert (m.reserved, m.retries) == (2 * MB, 1)


# expandable segments ---------------------------------------------------------------------------

GiB = 1024 * MB


def _pages(n: int, page: int = 20 * MB) -> int:
    return -(-n // page) * page


def test_expandable_segments_map_2_mib_pages_small_20_mib_pages_large():
    # find_expandable_block, :2211: one segment per pool, grown by pages of that size
    m = CachingAllocatorModel(expandable_segments=True)
    m.malloc(MB)
    m.malloc(MB)  # the rest of the first 2 MiB page
    assert m.reserved == 2 * MB
    m.malloc(512 * 1024)  # one more small page
    assert m.reserved == 4 * MB
    m.malloc(30 * MB)  # large pool: two 20 MiB pages
    assert m.reserved == 4 * MB + 40 * MB
    assert [s.small for s in m.segments if s is not None] == [True, False]


def test_expandable_segment_grows_its_free_tail_and_unmaps_free_pages():
    m = CachingAllocatorModel(expandable_segments=True)
    m.free(m.malloc(30 * MB))  # 40 MiB mapped, all free again
    b = m.malloc(50 * MB)  # no free block fits: the free 40 MiB grows by one page
    assert m.reserved == 60 * MB and m.live[b].offset == 0
    m.empty_cache()  # the free 10 MiB shares its page with b: nothing to unmap
    assert m.reserved == 60 * MB
    m.free(b)
    m.empty_cache()  # unmap_block / release_expandable_segment
    assert m.reserved == 0 and all(s is None for s in m.segments)


def test_expandable_best_fit_takes_a_block_that_cannot_grow_first():
    # get_free_block, :2511-2527: the free block before unmapped space counts as that much larger
    m = CachingAllocatorModel(expandable_segments=True)
    a = m.malloc(30 * MB)  # pages 0-40; 10 MiB free after it
    m.malloc(12 * MB)  # grows the tail to 30 MiB free: 12 taken, 18 free before the unmapped rest
    m.free(a)  # a 30 MiB hole at the start
    c = m.malloc(5 * MB)  # fits the 18 (smaller) and the hole: the hole, as it cannot grow
    assert m.live[c].offset == 0 and m.reserved == 60 * MB


def test_expandable_segments_need_no_max_split_size():
    with pytest.raises(ValueError, match="not modelled"):
        CachingAllocatorModel(max_split_size=40 * MB, expandable_segments=True)


def _logits_stream(sizes, keep=None):
    """Per step a logits block, freed before the next; with ``keep``, a small tensor kept per step."""
    events = []
    for i, size in enumerate(sizes):
        events.append(("malloc", f"logits{i}", size))
        if keep:
            events.append(("malloc", f"kept{i}", keep))
        events.append(("free", f"logits{i}"))
    return events


GROWING = [int(400 * MB * 1.013**i) for i in range(40)]  # 400 MiB to 662 MiB, 1.3% a step


def test_growing_logits_strand_segments_unless_expandable():
    segments = [segment_size(round_size(s)) for s in GROWING]
    assert all(a < b for a, b in zip(segments, GROWING[1:]))  # no step fits the last one's segment
    plain = CachingAllocatorModel()
    replay(_logits_stream(GROWING), plain)
    assert plain.reserved == sum(segments) > 20 * GiB  # every segment stays cached
    capped = CachingAllocatorModel(limit=3 * GiB)
    replay(_logits_stream(GROWING), capped)
    assert capped.retries > 0  # ... until the limit makes the allocator give them back
    for limit in (None, 3 * GiB):
        grown = CachingAllocatorModel(limit=limit, expandable_segments=True)
        replay(_logits_stream(GROWING), grown)
        # one segment, grown at its end: the high-water allocated in whole 20 MiB pages
        assert grown.reserved == grown.peak_reserved == _pages(grown.peak_allocated) == 680 * MB
        assert grown.retries == 0


# each logits block ends 512 KiB past a 2 MiB boundary, so its cudaMalloc segment keeps a
# 1.5 MiB tail; the step's kept 1.25 MiB tensor (large pool) best-fits there and pins the segment
PINNED = [int(400 * MB * 1.013**i) // (2 * MB) * (2 * MB) + 512 * 1024 for i in range(40)]
KEEP = 1280 * 1024


def test_kept_tensors_pin_the_logits_segments_a_fragmentation_oom():
    cached = [segment_size(s) for s in PINNED]
    step = next(i for i in range(len(PINNED)) if sum(cached[:i + 1]) > 3 * GiB)  # nothing can go back
    with pytest.raises(AllocatorOutOfMemory) as e:
        replay(_logits_stream(PINNED, KEEP), CachingAllocatorModel(limit=3 * GiB))
    assert e.value.event == 3 * step  # that step's logits malloc
    assert e.value.reserved == sum(cached[:step])
    assert e.value.allocated == step * 1536 * 1024  # each kept tensor takes its whole tail
    assert e.value.fragmented and e.value.allocated + e.value.nbytes < 1 * GiB


def test_with_expandable_segments_the_pinned_stream_fits():
    m = CachingAllocatorModel(limit=3 * GiB, expandable_segments=True)
    replay(_logits_stream(PINNED, KEEP), m)
    assert m.retries == 0
    # the first kept tensor follows the first logits block; the later ones fill that block's hole
    # (it cannot grow, the tail can), and each logits block reuses the grown tail
    assert m.reserved == _pages(PINNED[0] + KEEP + max(PINNED)) == 1080 * MB
    m.empty_cache()  # every page with no live block in it goes back, wherever it is
    page = 20 * MB
    live_pages = {p for b in m.live.values() for p in range(b.offset // page, (b.offset + b.size - 1) // page + 1)}
    assert m.reserved == len(live_pages) * 20 * MB == 80 * MB


def test_expandable_retry_unmaps_free_pages_inside_the_segment():
    with pytest.raises(AllocatorOutOfMemory) as e:
        replay(_logits_stream(PINNED, KEEP), CachingAllocatorModel(limit=1 * GiB))
    assert e.value.fragmented
    m = CachingAllocatorModel(limit=1 * GiB, expandable_segments=True)
    replay(_logits_stream(PINNED, KEEP), m)  # fits: the retries give back the free pages of the hole
    assert m.retries > 0 and m.peak_reserved <= 1 * GiB

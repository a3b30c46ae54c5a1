"""The caching-allocator model on allocation sequences traced by hand."""
import pytest

from indexer_lib.memory.allocator import MB, CachingAllocatorModel, replay, round_size, segment_size


def test_sizes_round_to_512_bytes_and_segments_by_pool():
    assert round_size(1) == 512 and round_size(513) == 1024
    assert segment_size(512) == 2 * MB  # small pool: 2 MiB segments
    assert segment_size(1 * MB) == 2 * MB
    assert segment_size(1 * MB + 512) == 20 * MB  # 1-10 MiB: a 20 MiB segment
    assert segment_size(10 * MB) == 10 * MB  # from 10 MiB: rounded up to 2 MiB
    assert segment_size(10 * MB + 1) == 12 * MB


def test_small_requests_share_one_2_mib_segment():
    m = CachingAllocatorModel()
    a = m.malloc(100)
    b = m.malloc(1000)
    assert (m.allocated, m.reserved) == (512 + 1024, 2 * MB)
    m.free(a)
    m.free(b)
    assert (m.allocated, m.reserved) == (0, 2 * MB)  # cached, not returned


def test_medium_requests_split_a_20_mib_segment():
    m = CachingAllocatorModel()
    m.malloc(5 * MB)
    m.malloc(5 * MB)
    m.malloc(5 * MB)
    assert m.reserved == 20 * MB
    m.malloc(5 * MB + 512)  # 5 MiB left, not enough: a second segment
    assert m.reserved == 40 * MB


def test_same_size_reuses_the_cached_block_a_bigger_one_adds_a_segment():
    m = CachingAllocatorModel()
    h = m.malloc(100 * MB)
    m.free(h)
    h = m.malloc(100 * MB)
    assert m.reserved == 100 * MB
    m.free(h)
    m.malloc(101 * MB)  # the cached 100 MiB block is too small
    assert m.reserved == 100 * MB + 102 * MB
    assert m.peak_reserved == 202 * MB


def test_a_smaller_request_splits_a_cached_block_and_frees_merge():
    m = CachingAllocatorModel()
    m.free(m.malloc(100 * MB))
    a = m.malloc(50 * MB)
    b = m.malloc(50 * MB)
    assert m.reserved == 100 * MB
    m.free(a)
    m.free(b)  # merges back into one 100 MiB block
    m.malloc(100 * MB)
    assert m.reserved == 100 * MB


def test_best_fit_takes_the_smallest_block_that_fits():
    m = CachingAllocatorModel()
    big, small = m.malloc(200 * MB), m.malloc(60 * MB)
    m.free(big)
    m.free(small)
    m.malloc(50 * MB)  # fits both; takes the 60 MiB block
    m.malloc(150 * MB)  # the 200 MiB block is still whole
    assert m.reserved == 260 * MB


def test_empty_cache_returns_only_wholly_free_segments():
    m = CachingAllocatorModel()
    keep = m.malloc(30 * MB)
    m.free(m.malloc(40 * MB))
    m.empty_cache()
    assert m.reserved == 30 * MB
    m.free(keep)
    m.empty_cache()
    assert m.reserved == 0


def test_growing_slices_add_a_segment_each_equal_slices_do_not():
    events = []
    for i, size in enumerate([100, 105, 110, 115]):
        events += [("malloc", i, size * MB), ("free", i)]
    # segments round up to 2 MiB: 100 + 106 + 110 + 116; freed segments never merge
    assert replay(events)[-1] == (0, 432 * MB)
    # growth by less than the 2 MiB rounding reuses the previous segment
    events = []
    for i, size in enumerate([100, 101, 102]):
        events += [("malloc", i, size * MB), ("free", i)]
    assert replay(events)[-1] == (0, (100 + 102) * MB)
    equal = []
    for i in range(4):
        equal += [("malloc", i, 100 * MB), ("free", i)]
    assert replay(equal)[-1] == (0, 100 * MB)


def test_unknown_event_is_named():
    with pytest.raises(ValueError, match="unknown allocator event 'alloc'"):
        replay([("alloc", 1, 10)])


def test_past_the_limit_pytorch_gives_its_cache_back_and_retries():
    """c10/cuda/CUDACachingAllocator.cpp malloc: a new segment that cudaMalloc cannot give makes
    the allocator release every wholly free cached segment and retry before the OOM."""
    from indexer_lib.memory.allocator import AllocatorOutOfMemory, CachingAllocatorModel

    mib = 2**20
    a = CachingAllocatorModel(limit=300 * mib)
    for size in (100, 150):  # two large segments cached, 250 MiB reserved
        a.free(a.malloc(size * mib))
    assert (a.reserved, a.retries) == (250 * mib, 0)
    kept = a.malloc(200 * mib)  # 250 + 200 > 300: both cached segments go back, then it fits
    assert (a.reserved, a.retries) == (200 * mib, 1)
    with pytest.raises(AllocatorOutOfMemory) as e:  # the live 200 MiB and 200 more cannot fit
        a.malloc(200 * mib)
    assert e.value.allocated == 200 * mib and e.value.limit == 300 * mib and a.retries == 2
    a.free(kept)
    unlimited = CachingAllocatorModel()
    for size in (100, 150, 200, 200):
        unlimited.free(unlimited.malloc(size * mib))
    assert unlimited.retries == 0 and unlimited.reserved == 450 * mib  # nothing forces the cache back


def test_the_reserved_curve_ends_at_the_step_that_cannot_fit():
    from indexer_lib.plan import PlanSettings
    from indexer_lib.study import reserved

    settings = PlanSettings("glm-5", engine="vllm==0.32.0", temporaries="deepgemm")
    roomy = reserved.reserved_table(65536, 8192, 512, settings, strategies=("vllm",), free_gib=1.5)
    assert not roomy["oom"].any() and len(roomy) == 8
    tight = reserved.reserved_table(65536, 8192, 2048, settings, strategies=("vllm",), free_gib=1.5)
    assert tight["oom"].iloc[-1] and not tight["oom"].iloc[:-1].any() and len(tight) < 8
    # the free memory is beyond the K workspace and top-k output held from boot (1.06 GiB here):
    # the live blocks alone do not fit it
    held = 40 * 202_752 * 132 + 8192 * 2048 * 4
    assert tight["peak_allocated"].iloc[-1] - held > 1.5 * 2**30
    assert tight["retries"].iloc[-1] >= 1

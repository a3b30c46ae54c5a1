"""The sizes PyTorch's CUDA caching allocator works with, as read from its source.

Source: pytorch/pytorch, c10/cuda/CUDACachingAllocator.cpp at commit
001074d25084fdb87a799823e395a50f5ec044d3 (the copy the code search holds; torch 2.13.0's
own commit, cf30153c, was not there to read).  ``:N`` below is a line of that file.
"""

KB = 1024
MB = 1024 * 1024

SOURCE = "pytorch/pytorch@001074d25084fdb87a799823e395a50f5ec044d3:c10/cuda/CUDACachingAllocator.cpp"

# kMinBlockSize, :118-119.  round_size (:2026-2037) rounds every request up to a multiple
# of it; the small pool, and every pool under expandable segments, split off a remainder
# of at least this much (should_split, :2478-2481).
MIN_BLOCK = 512

# kSmallSize, :120.  Requests up to it come from the small pool (get_pool, :2463-2467).
# In the large pool, without expandable segments, a remainder is split off only when it
# is larger than this (should_split, :2483-2484).
SMALL_SIZE = 1 * MB

# kSmallBuffer, :121-122.  A new small-pool segment (get_allocation_size, :2489-2490) and
# the page by which a small-pool expandable segment grows (find_expandable_block, :2211).
SMALL_BUFFER = 2 * MB

# kLargeBuffer, :47-49.  A new large-pool segment for requests under MIN_LARGE_ALLOC
# (get_allocation_size, :2491-2492); the page of a large-pool expandable segment (:2211);
# with a max_split_size, how much bigger than an oversize request a cached block may be
# (get_free_block, :2548-2551).
LARGE_BUFFER = 20 * MB

# kMinLargeAlloc, :123-124.  From this size on a new segment is just the request, rounded.
MIN_LARGE_ALLOC = 10 * MB

# kRoundLarge, :125.  That rounding (get_allocation_size, :2493-2494).
ROUND_LARGE = 2 * MB

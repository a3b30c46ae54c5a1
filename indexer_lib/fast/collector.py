"""The cyclic garbage collector, kept off the plans a grid or a dashboard keeps.

A dashboard keeps hundreds of thousands of plans, schedules and requests in its caches.
CPython's collector walks the older objects again every so many new ones; a full pass over
such a heap is slow, and a cold dashboard change allocates enough to trigger several.  Inside
``young_only`` the objects that were alive before it are set aside (``gc.freeze``) and no collection runs; at its end
one pass walks the objects the block made, and everything is handed back to the collector
(``gc.unfreeze``), so a cycle among the older objects is still found by a later full pass.
Planning makes almost no reference cycles: nothing piles up meanwhile.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def young_only():
    """Inside the block no cyclic collection runs; at its end one pass over the objects made inside
    it (none of the older ones), then everything is the collector's again."""
    was_on = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
            gc.collect(0)  # the objects made in the block: none was collected yet
        gc.unfreeze()

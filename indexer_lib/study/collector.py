"""The cyclic garbage collector, kept off the caches a dashboard holds.

A dashboard keeps hundreds of thousands of plans, schedules and requests in its caches.
CPython's collector walks the older objects again every so many new ones, and a full pass
over such a heap costs about 0.1 s; a cold dashboard change allocates enough to trigger
several (measured: a third of a long-context change).  Inside ``young_only`` the objects
that were alive before it are set aside (``gc.freeze``): the collector still runs, over the
objects made since, and everything is handed back to it afterwards (``gc.unfreeze``), so a
cycle among the older objects is still found by a later full pass.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def young_only():
    """Inside the block, cyclic collections walk only the objects made inside it."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()

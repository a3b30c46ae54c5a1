"""Where a grid's tasks are computed: here, in local processes, or on a Ray cluster.

An executor maps a function over items and yields the results in the items' order, whatever
runs them, so a table comes out the same.  ``Local(workers=1)`` runs in this process (the
caches stay warm across tasks); more workers fork processes; ``Ray(address)`` sends batches of
items to a Ray cluster (``sweep.cluster``).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Local:
    workers: int | None = 1  # processes; None or 0: one per CPU

    def __post_init__(self):
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 0):
            raise ValueError(f"workers {self.workers!r}: must be a whole number >= 0 (0: one per CPU)")

    def map(self, fn: Callable, items: Iterable[tuple]) -> Iterator:
        workers = self.workers or os.cpu_count() or 1
        if workers == 1:
            for item in items:
                yield fn(*item)
            return
        items = list(items)
        pool = ProcessPoolExecutor(max(1, min(workers, len(items) or 1)),
                                   mp_context=multiprocessing.get_context("fork"), initializer=_ignore_ctrl_c)
        finished = False
        try:
            for future in [pool.submit(fn, *item) for item in items]:
                yield future.result()
            finished = True
        finally:  # on Ctrl-C or an early stop the queued items are dropped, not computed first
            pool.shutdown(wait=finished, cancel_futures=True)


def _ignore_ctrl_c() -> None:
    """In a worker process: Ctrl-C reaches every process of the terminal's group, and the parent
    alone answers it (a worker would print its own traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass(frozen=True)
class Ray:
    address: str | None = None  # None: a new local instance (or RAY_ADDRESS); "auto"; "ray://HOST:PORT"
    batch: int | None = None  # items per Ray task (None: the cluster module's default)
    num_gpus: int = 0  # GPUs each Ray task asks for
    on_crash: Callable | None = None  # (item, error) -> result for an item whose worker died

    def connect(self) -> None:
        """Join (or start) the cluster: an unreachable one says so before any work."""
        from .cluster import connect

        connect(self.address)

    def map(self, fn: Callable, items: Iterable[tuple]) -> Iterator:
        from .cluster import BATCH, ordered_map

        return ordered_map(fn, items, self.address, self.batch or BATCH, num_gpus=self.num_gpus,
                           on_crash=self.on_crash)


def executor_of(name: str, workers: int | None = 1, address: str | None = None) -> Local | Ray:
    """An executor by name: "local" (with ``workers``) or "ray" (at ``address``)."""
    if name == "local":
        return Local(workers)
    if name == "ray":
        return Ray(address)
    raise ValueError(f"executor {name!r}: must be one of {', '.join(EXECUTORS)}")

"""Many steps of the same number of requests as numpy arrays, one entry a step: what a
``StepBatch`` says of one step, said of all of them at once.

A release's path and a strategy's packing are written once (``indexer_lib.elementwise``) and
read a step through these names: ``requests`` (each with ``query_len``, ``context_len``,
``seq_len`` and ``window(rows)``), ``query_lens``, ``seq_lens``, ``num_rows``,
``num_kv_tokens``, ``longest``, ``longest_tokens`` and ``kv_ratio``.  So the same code plans one
step and evaluates a million.
"""
from __future__ import annotations

import functools

import numpy as np

from ..elementwise import maximum


class RequestArrays:
    """One request of each step (arrays): ``context_len`` tokens cached, ``query_len`` new rows,
    and its K scored ``ratio`` tokens to an entry (``CompressedRequest`` for one)."""

    __slots__ = ("context_len", "query_len", "ratio", "seq_len")

    def __init__(self, context_len: np.ndarray, query_len: np.ndarray, ratio: int = 1):
        self.context_len, self.query_len, self.ratio = context_len, query_len, ratio
        self.seq_len = (context_len + query_len) // ratio  # K entries

    def window(self, rows):
        """K entries the row ``rows - 1`` scores (``PrefillRequest.window``)."""
        return (self.context_len + rows) // self.ratio

    def at(self, where) -> "RequestArrays":
        """These requests at some steps only (``where``: their positions, or a mask)."""
        return RequestArrays(self.context_len[where], self.query_len[where], self.ratio)


class StepArrays:
    """Steps of the same number of requests (``requests``: one ``RequestArrays`` per position), in
    the scheduler's order within each step."""

    repeats = None  # identical neighbours are a one-step planner's shortcut: not looked for here

    def __init__(self, requests: tuple[RequestArrays, ...], kv_ratio: int = 1):
        self.requests, self.kv_ratio = tuple(requests), kv_ratio
        self.query_lens = tuple(r.query_len for r in self.requests)
        self.seq_lens = tuple(r.seq_len for r in self.requests)
        self.num_rows = sum(self.query_lens)
        self.num_kv_tokens = sum(self.seq_lens)
        self.longest = functools.reduce(maximum, self.seq_lens)
        self.longest_tokens = functools.reduce(maximum, [r.context_len + r.query_len for r in self.requests])

    @classmethod
    def from_lengths(cls, *lengths) -> "StepArrays":
        """Steps given as (query lens, context lens) of the first request, then of the second, ..."""
        arrays = [np.asarray(x, dtype=np.int64) for x in lengths]
        return cls(tuple(RequestArrays(arrays[k + 1], arrays[k]) for k in range(0, len(arrays), 2)))

    @property
    def size(self) -> int:
        return self.num_rows.size

    def compressed(self, ratio: int) -> "StepArrays":
        """The steps as an indexer over K compressed ``ratio`` to one sees them (``StepBatch.compressed``)."""
        if ratio == 1:
            return self
        if self.kv_ratio != 1:
            raise ValueError(f"these steps are already compressed ({self.kv_ratio}x)")
        return StepArrays(tuple(RequestArrays(r.context_len, r.query_len, ratio) for r in self.requests), ratio)

    def tail(self, rows: int) -> "StepArrays":
        """The steps as layers that run on each request's last ``rows`` new rows see them
        (``StepBatch.tail``)."""
        if self.kv_ratio != 1:
            raise ValueError(f"these steps are compressed ({self.kv_ratio}x): take the tail first")
        kept = [np.minimum(r.query_len, rows) for r in self.requests]
        return StepArrays(tuple(RequestArrays(r.context_len + r.query_len - k, k) for r, k in zip(self.requests, kept)))

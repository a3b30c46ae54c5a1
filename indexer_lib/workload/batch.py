"""Prefill requests and step batches: what the indexer's prefill path sees per engine step.

Each request of a step brings ``context_len`` tokens already in the KV cache and
``query_len`` new tokens (query rows).  Decoding requests use the token budget
but go to the decode path, so they are not part of a step batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from itertools import accumulate

from ..checks import check_int


@dataclass(frozen=True)
class PrefillRequest:
    context_len: int  # tokens already cached (earlier chunks, prefix-cache hits)
    query_len: int  # new tokens this step: the request's query rows
    ratio: ClassVar[int] = 1  # tokens per K entry its indexer scores (``CompressedRequest``)

    def __post_init__(self):
        c, q = self.context_len, self.query_len
        if type(c) is int and type(q) is int and c >= 0 and q >= 1:
            return  # the simulator makes one per request per step: the common case costs one test
        check_int("context_len", c, 0)
        check_int("query_len", q, 1)

    @property
    def seq_len(self) -> int:
        return self.context_len + self.query_len

    def window(self, rows: int) -> int:
        """K entries the request's row ``rows - 1`` scores: its window's end ``ke`` (the query's
        rows [0, rows) score at most this many)."""
        return self.context_len + rows

    @classmethod
    def from_lengths(cls, query_len: int, seq_len: int) -> "PrefillRequest":
        check_int("query_len", query_len, 1)
        check_int("seq_len", seq_len, 1)
        if query_len > seq_len:
            raise ValueError(
                f"query_len {query_len} > seq_len {seq_len}: a request's new tokens "
                "cannot exceed its sequence length"
            )
        return cls(seq_len - query_len, query_len)


@dataclass(frozen=True)
class CompressedRequest(PrefillRequest):
    """A request as an indexer over K compressed ``ratio`` tokens to one entry sees it (DeepSeek-V4's
    C4, a 4-token pool): its query rows are the request's own, its K is ``seq_len // ratio``
    entries, and the row at position p scores the ``(p + 1) // ratio`` entries complete by then."""

    ratio: int = 1

    @property
    def seq_len(self) -> int:
        return (self.context_len + self.query_len) // self.ratio

    def window(self, rows: int) -> int:
        return (self.context_len + rows) // self.ratio


class _once:
    """A property computed once per object, like ``functools.cached_property`` without its lock
    (Python 3.11 takes one on every first access: costly over a grid's millions of batches)."""

    def __init__(self, fn):
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)  # found first from now on
        return value


@dataclass(frozen=True)
class StepBatch:
    """The prefill requests of one engine step, in the scheduler's order."""

    requests: tuple[PrefillRequest, ...]
    step: int = 0  # engine step index in the schedule that produced it
    # tokens per K entry the indexer scores (``compressed``): seq_lens count entries, not tokens
    kv_ratio: int = 1

    def __post_init__(self):
        requests = tuple(self.requests)
        object.__setattr__(self, "requests", requests)
        # every batch is grouped by its lengths (tuples of ints, hashed in C), and planners read them
        object.__setattr__(self, "query_lens", tuple([r.query_len for r in requests]))
        r = self.kv_ratio
        object.__setattr__(self, "seq_lens", tuple([(q.context_len + q.query_len) // r for q in requests] if r != 1
                                                   else [q.context_len + q.query_len for q in requests]))

    def compressed(self, ratio: int) -> "StepBatch":
        """The step as an indexer over K compressed ``ratio`` to one sees it: the same query rows,
        ``seq_len // ratio`` K entries per request (``CompressedRequest``)."""
        check_int("compress_ratio", ratio, 1)
        if ratio == 1:
            return self
        if self.kv_ratio != 1:
            raise ValueError(f"this step is already compressed ({self.kv_ratio}x)")
        kept = self.__dict__.get("_compressed")  # a grid plans each step many times: made once
        if kept is None or kept.kv_ratio != ratio:
            kept = self.__dict__["_compressed"] = StepBatch(
                tuple(CompressedRequest(r.context_len, r.query_len, ratio) for r in self.requests), self.step, ratio)
        return kept

    def tail(self, rows: int) -> "StepBatch":
        """The step as layers that run on each request's last ``rows`` new rows see it (DeepSeek-V4.1's
        layers past its last KV source under the engines' decoder SWA bounded replay: vLLM 0.33.0
        ``model_state.py:536-539``, SGLang 0.5.23 ``late_layer_tail_lens``): a request of ``q`` new
        tokens keeps its last ``min(rows, q)``, each still seeing its K up to its own position."""
        check_int("rows", rows, 1)
        if self.kv_ratio != 1:
            raise ValueError(f"this step is compressed ({self.kv_ratio}x): take the tail first")
        kept = self.__dict__.get("_tail")
        if kept is None or kept[0] != rows:
            if all(r.query_len <= rows for r in self.requests):
                batch = self
            else:
                batch = StepBatch(tuple(PrefillRequest(r.context_len + r.query_len - min(rows, r.query_len),
                                                       min(rows, r.query_len)) for r in self.requests), self.step)
            kept = self.__dict__["_tail"] = (rows, batch)
        return kept[1]

    # computed once per batch: planners ask for them millions of times in a sweep
    @_once
    def num_rows(self) -> int:
        return sum(self.query_lens)

    @_once
    def num_kv_tokens(self) -> int:
        return sum(self.seq_lens)

    @_once
    def totals_after(self) -> tuple[list[int], list[int], list[int]]:
        """From request k to the end: rows, KV tokens and the longest sequence (k = len: none)."""
        return (list(accumulate(reversed(self.query_lens)))[::-1] + [0],
                list(accumulate(reversed(self.seq_lens)))[::-1] + [0],
                list(accumulate(reversed(self.seq_lens), max))[::-1] + [0])

    def totals_from(self, k: int) -> tuple[int, int, int]:
        """Rows, KV tokens and the longest sequence of requests k onwards: from the whole batch's
        sums for k = 0 (most batches are packed whole), else from ``totals_after``."""
        if k == 0:
            return self.num_rows, self.num_kv_tokens, self.longest
        rows, kv, longest = self.totals_after
        return rows[k], kv[k], longest[k]

    @_once
    def longest(self) -> int:
        return max(self.seq_lens)

    @_once
    def longest_tokens(self) -> int:
        """The longest sequence in tokens, whatever K its indexer scores (``longest`` is in K entries)."""
        return max(r.context_len + r.query_len for r in self.requests)

    @_once
    def repeats(self) -> list[int]:
        """Per request: how many consecutive requests, from it on, are identical to it
        (schedulers send runs of equal chunks; planners decide a run at once)."""
        q, s = self.query_lens, self.seq_lens
        out = [1] * len(q)
        for k in range(len(q) - 2, -1, -1):
            if q[k] == q[k + 1] and s[k] == s[k + 1]:
                out[k] = out[k + 1] + 1
        return out

    @classmethod
    def from_lengths(cls, query_lens, seq_lens, step: int = 0) -> "StepBatch":
        query_lens, seq_lens = list(query_lens), list(seq_lens)
        if len(query_lens) != len(seq_lens):
            raise ValueError(
                f"{len(query_lens)} query lengths and {len(seq_lens)} sequence lengths: "
                "the lists must have the same length"
            )
        if not query_lens:
            raise ValueError("no requests: a step batch needs at least one request")
        return cls(
            tuple(PrefillRequest.from_lengths(q, s) for q, s in zip(query_lens, seq_lens)),
            step,
        )

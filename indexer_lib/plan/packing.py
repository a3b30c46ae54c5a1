"""The moves every strategy is made of: greedy packing of requests in the scheduler's order,
and the ways to cut a request that alone breaks a limit into row slices or column ranges
(docs/design.md#strategies)."""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ..elementwise import all_of, any_of, is_array, maximum, minimum, not_, where
from ..workload import StepBatch
from .budgeting import Budgeting
from .builders import Piece, RowSlices, Slice, Slicing
from .settings import PlanSettings

KV_SPLIT_ALIGN = 256  # column ranges start at multiples of 256 tokens: K-scale slices stay 16-byte aligned


class Packing(NamedTuple):
    """What a strategy's packing allows.

    ``may_join(b, r0, r1, rows, kv, longest, among)``: whether requests [r0, r1) may share a chunk
    under the budgeting ``b`` (``longest``: their longest sequence, kept as the chunk grows, so a
    compressed width costs nothing to ask; ``among``: the steps that ask); ``slice_alone(i, build,
    times, among)``: how a request that alone breaks a limit is cut, with the ``times - 1``
    identical requests after it; ``width(r0, r1, kv, longest)``: a packed chunk's logits width
    (None: all its K); ``alloc_rows``: the rows a packed chunk's logits are padded up to
    (fixed-shape); ``over``: the packed chunks break the budget whatever the split (fixed-shape:
    not one row fits).  ``monotone``: whenever [r0, r1) may join, so may any [r0, r1') with r1' <
    r1 (more rows and columns only add bytes).  ``kv_limit_ratio``: a packed chunk holds at most
    this many times the workspace's K (a release that packs compressed K against its undivided
    workspace: ``plan.paths``).
    """

    may_join: Callable
    slice_alone: Callable
    width: Callable | None = None
    compressed: bool = False
    alloc_rows: int | None = None
    over: bool = False
    monotone: bool = False
    kv_limit_ratio: int = 1


def join_always(b, r0, r1, m, n, longest, among=True) -> bool:
    """``may_join`` of a packing bounded by the workspace alone (n-only, vLLM before its budget)."""
    return True


def within_packed(settings: PlanSettings):
    """``may_join`` of a packed chunk against the budget: counted with its longest request's width
    on a compressed-only build's padded bytes, else with its K (vLLM's M x N x 4, and every full
    layout)."""
    if not settings.rules.full_width and settings.padded:
        return lambda b, r0, r1, m, n, longest, among=True: b.within(m, longest, True, among)
    return lambda b, r0, r1, m, n, longest, among=True: b.within(m, n, False, among)


def field_packing(settings: PlanSettings, may_join, monotone: bool = True) -> Packing:
    """The field's packing (n-only, vllm, per-request): all of a chunk's K, or, on a
    compressed-only build, as wide as its longest request; a request alone cut into equal rows."""
    if settings.rules.full_width:
        return Packing(may_join, slice_equal_rows, None, False, None, False, monotone)
    return Packing(may_join, slice_equal_rows, _as_wide_as_longest, True, None, False, monotone)


def _as_wide_as_longest(r0, r1, n, longest):
    return longest


def pack(batch, b: Budgeting, packing: Packing, build, among=True) -> None:
    """Greedy packing in order: each request joins the chunk being packed while the packing lets
    it, else the chunk is recorded and the request starts the next; a request that alone breaks a
    limit is sliced.  ``batch``: one step (a ``StepBatch``) or arrays of steps of as many requests
    (a ``StepArrays``), each step packed on its own; ``among``: the steps packed.

    Planning one step, what schedulers repeat is decided at once: a request that alone breaks a
    limit is sliced together with the identical requests that follow it, and a chunk of identical
    requests is repeated while the run lasts (``StepBatch.repeats``).  A monotone packing asks for
    the rest of the step in one question where a request fits alone: most steps are packed whole.
    The chunks and the budget interval are those of packing request by request (a refusal of the
    rest is never below the refusal that stops the request-by-request packing); ``test_plan``
    holds the two together.
    """
    query_lens, seq_lens = batch.query_lens, batch.seq_lens
    n_req, workspace = len(query_lens), b.workspace
    if packing.kv_limit_ratio != 1:
        workspace = workspace * packing.kv_limit_ratio
    repeats = batch.repeats  # one step: its runs of identical requests
    may_join, slice_alone = packing.may_join, packing.slice_alone
    # the chunk being packed, where ``open`` holds: requests [first, i), their rows, K and longest
    open_, first, rows, kv, longest = False, 0, 0, 0, 0
    i = 0
    while i < n_req:
        q, s = query_lens[i], seq_lens[i]
        joins = open_ & (kv + s <= workspace)
        if any_of(joins):
            joins = joins & may_join(b, first, i + 1, rows + q, kv + s, maximum(longest, s), joins)
        close = open_ & not_(joins)
        if any_of(close):
            groups = _record(batch, (first, rows, kv, longest), i, packing, build, close)
            if groups > 1:  # one step: the next groups of identical requests are recorded too
                i, open_ = first + groups * (i - first), False
                continue
        starts = not_(joins) & among
        if not any_of(starts):  # it joins the chunk everywhere
            rows, kv, longest = rows + q, kv + s, maximum(longest, s)
            i += 1
            continue
        fits = starts & (s <= workspace)
        if any_of(fits):
            fits = fits & may_join(b, i, i + 1, q, s, s, fits)
        sliced = starts & not_(fits)
        if any_of(sliced):
            times = 1 if repeats is None else repeats[i]
            slice_alone(i, build, times, sliced)
            if repeats is not None:  # one step: alone it breaks a limit, and so do its twins
                i, open_ = i + times, False
                continue
        if packing.monotone and repeats is not None and i + 1 < n_req:
            rest_rows, rest_kv, rest_longest = batch.totals_from(i)
            if rest_kv <= workspace and may_join(b, i, n_req, rest_rows, rest_kv, rest_longest):
                open_, first, rows, kv, longest, i = True, i, rest_rows, rest_kv, rest_longest, n_req
                break
        open_, first = joins | fits, where(joins, first, i)
        rows, kv, longest = where(joins, rows + q, q), where(joins, kv + s, s), where(joins, maximum(longest, s), s)
        i += 1
    if any_of(open_):
        _record(batch, (first, rows, kv, longest), n_req, packing, build, open_)


def _record(batch, group: tuple, end, packing: Packing, build, among) -> int:
    """Records the packed chunk of requests [first, end) (``group``: first, rows, K, longest), and,
    planning one step where it stopped at a request identical to its own first, the same chunk
    of each following group of identical requests; returns how many groups it recorded."""
    first, rows, kv, longest = group
    size, groups = end - first, 1
    repeats = batch.repeats
    if repeats is not None and end < len(batch.query_lens) and repeats[first] > size:
        # while g + 1 identical requests follow, the next group asks the same questions and gets
        # the same answers (a monotone packing's rest holds those g + 1: it is refused too)
        while repeats[first + groups * size] > size:
            groups += 1
    width = kv if packing.width is None else packing.width(first, end, kv, longest)
    # the record made by tuple's own constructor: packing runs for every step of a grid
    build.add(tuple.__new__(Piece, (first, end, 0, rows, width, True, packing.over, packing.compressed, kv, 0,
                                    packing.alloc_rows, None)), groups, among)
    return groups


def slice_equal_rows(i: int, build, times: int = 1, among=True, cap: int | None = None) -> None:
    """vLLM: slices of max(1, rows-within-budget) rows at the request's full width (its own
    seq_len wide in the compressed layout), at most ``cap`` columns where the release slices the
    request's K to a buffer that small."""
    b, r = build.b, build.batch.requests[i]
    compressed = b.compressed_only
    n, q = r.seq_len, r.query_len
    per = q if b.budget is None else b.max_rows(n, compressed, among)
    cols = n if cap is None else minimum(n, cap)
    build.add_rows(RowSlices(i, i + 1, q, maximum(per, 1), cols, 0, n, per < 1, compressed), times, among)


def slice_causal(i: int, build, compressed: bool, times: int = 1, among=True) -> None:
    """Each slice is as wide as its last row's ke (a KV prefix): early slices take more rows
    (``causal_runs``)."""
    b, r = build.b, build.batch.requests[i]

    def runs():
        return causal_runs(r, b, compressed, among)

    def cut() -> list[Slice]:
        return [s for first, alike, _ in runs() for s in grown_slices(first, alike, r.window)]

    build.add_alone(i, Slicing("causal", r, compressed, cut, runs, growing=True), times, among)


def causal_runs(r, b: Budgeting, compressed: bool, among=True) -> list[tuple]:
    """A request's causal cut as runs ``(slice, alike, at)``: each a slice of the most rows whose
    logits, as wide as its last row's window, fit (one row where none does), then how many slices
    from it on take as many rows and still fit (``alike``), each the next rows and as wide as its
    own last row's window (a long prompt's widths grow a few columns a slice: dozens fit in a
    run).  ``r``: one request (``at`` None), or arrays of requests (one a step): then every step
    advances one run at a time, each run's lengths given for the steps that have it, at the
    positions ``at``."""
    count, budget, at = b.counted, b.budget, None  # at hand: a grid asks them millions of times
    if is_array(r.query_len):  # the steps that still have a run, and their lengths
        at = np.flatnonzero(np.broadcast_to(among, r.query_len.shape))
        r, budget = r.at(at), budget[at] if is_array(budget) else budget
    end, window = r.query_len, r.window
    if budget is None:
        return [(Slice(0, end, window(end), True, False, compressed, r.seq_len), 1, at)]
    out = []
    q0, most = 0 * end, end
    while any_of(q0 < end):
        # the largest m <= hi whose slice [q0, q0 + m) fits; a slice is wider than the one before,
        # so it takes at most as many rows (bytes never fall with rows or width): the previous
        # slice's rows first, the usual answer
        hi = minimum(most, end - q0)
        whole = count(hi, window(q0 + hi), compressed) <= budget
        m = hi if all_of(whole) else where(whole, hi, _most_rows_fitting(count, budget, r, compressed, q0, hi))
        if b.tracks and among:
            # the interval, as asking slice by slice would leave it: m rows accepted (where one
            # row fits), m + 1 refused where fewer than the previous slice's rows fit
            if m:
                b.within(m, window(q0 + m), compressed)
            if not whole:
                b.within(m + 1, window(q0 + m + 1), compressed)
        rows = maximum(m, 1)
        q1 = q0 + rows
        # the slices after it of as many rows that still fit: the k-th is (context + q1 + k m) //
        # ratio wide, so they fit up to the widest m rows may take; where not one row fits, every
        # row left is a slice of its own, over budget
        fitting = ((count.widest(rows, budget, compressed) + 1) * r.ratio - 1 - r.context_len - q1) // rows
        good = maximum(minimum((end - q1) // rows, fitting), 0)
        alike = where(m > 0, 1 + good, end - q0)
        if b.tracks and among and m and good:
            b.within(m, window(q1 + good * m), compressed)  # the widest of the run: accepted
        out.append((Slice(q0, q1, window(q1), q0 == 0, m == 0, compressed, r.seq_len), alike, at))
        q0, most = q1 + (alike - 1) * rows, rows
        if at is not None:  # the steps whose cut goes on
            going = q0 < end
            at, r, q0, most = at[going], r.at(going), q0[going], most[going]
            budget = budget[going] if is_array(budget) else budget
            end, window = r.query_len, r.window
    return out


def _most_rows_fitting(count, budget, r, compressed: bool, q0, hi):
    """The most rows m < ``hi`` whose slice [q0, q0 + m), as wide as its last row's window, fits
    the budget (0: not one row).  The count grows with rows and width, so m lies between the rows
    that fit at the widest window and at the narrowest: bisected between them."""
    window = r.window
    lo = count.tallest(window(q0 + hi), budget, compressed, hi)
    up = minimum(hi - 1, count.tallest(window(q0 + 1), budget, compressed, hi))
    open_ = lo < up
    while any_of(open_):
        mid = (lo + up + 1) // 2
        fit = count(mid, window(q0 + mid), compressed) <= budget
        lo, up = where(open_ & fit, mid, lo), where(open_ & not_(fit), mid - 1, up)
        open_ = lo < up
    return lo


def grown_slices(first: Slice, alike: int, window) -> list[Slice]:
    """A causal run's slices: ``first``, then ``alike - 1`` slices of as many rows, each the next
    rows and ``window(its end)`` wide (``window``: the request's)."""
    m = first.q1 - first.q0
    return [first] + [first._replace(q0=first.q1 + (k - 1) * m, q1=first.q1 + k * m, cols=window(first.q1 + k * m),
                                     gather=False) for k in range(1, alike)]


def split_columns(i: int, build) -> None:
    """Row slices of the allocation's row multiple, each scored over column ranges."""
    b, r = build.b, build.batch.requests[i]
    rows = b.row_multiple if b.padded else 1
    # widest column range (a multiple of the alignment) whose logits meet the budget
    lo, hi = 0, -(-r.seq_len // KV_SPLIT_ALIGN)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if b.within(rows, mid * KV_SPLIT_ALIGN):
            lo = mid
        else:
            hi = mid - 1
    over = lo == 0
    width = max(lo, 1) * KV_SPLIT_ALIGN
    first = True
    for q0 in range(0, r.query_len, rows):
        q1 = min(q0 + rows, r.query_len)
        last_ke = r.window(q1)  # the slice's widest window
        for kv_start in range(0, last_ke, width):
            cols = min(width, last_ke - kv_start)
            # flagged only if this very block of rows and columns breaks the budget
            build.add(Piece(i, i + 1, q0, q1, cols, first, over and not b.within(q1 - q0, cols),
                            kv_tokens=r.seq_len, kv_start=kv_start))
            first = False


def useful_area(batch: StepBatch, r0: int, r1: int) -> int:
    """Logits each row really reads: sum over rows of ke - ks."""
    return sum(window_sum(r, 0, r.query_len) for r in batch.requests[r0:r1])


def window_sum(r, a: int, b: int) -> int:
    """Sum of the windows (ke - ks) of a request's rows a..b-1: row i scores ``r.window(i + 1)``
    K entries (context + i + 1 tokens, or that many // ratio compressed entries)."""
    ratio = r.ratio
    if ratio == 1:
        return (b - a) * r.context_len + (a + 1 + b) * (b - a) // 2
    return _floor_sum(r.context_len + b, ratio) - _floor_sum(r.context_len + a, ratio)


def _floor_sum(n: int, ratio: int) -> int:
    """sum of x // ratio for x in 1..n."""
    k = n // ratio  # full groups: x // ratio = j for ratio values of x each (j = 0..k-1), then k
    return ratio * k * (k - 1) // 2 + k * (n - ratio * k + 1)

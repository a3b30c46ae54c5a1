"""The moves every strategy is made of: greedy packing of requests in the scheduler's order,
and the ways to cut a request that alone breaks a limit into row slices or column ranges
(docs/design.md#strategies)."""
from __future__ import annotations

from typing import Callable, NamedTuple

from ..workload import StepBatch
from .budgeting import Budgeting
from .builders import Piece, Slice, Slicing

KV_SPLIT_ALIGN = 256  # column ranges start at multiples of 256 tokens: K-scale slices stay 16-byte aligned


class Packing(NamedTuple):
    """What a strategy's packing allows.

    ``may_join(b, r0, r1, rows, kv, longest)``: whether requests [r0, r1) may share a chunk under
    the budgeting ``b``
    (``longest``: their longest sequence, kept as the chunk grows, so a compressed width costs
    nothing to ask); ``slice_alone(i, build, times)``: how a request that alone breaks a limit
    is cut, with the ``times - 1`` identical requests after it; ``width(r0, r1, kv, longest)``:
    a packed chunk's logits width (None: all its K); ``alloc_rows``: the rows a packed chunk's
    logits are padded up to (fixed-shape); ``over``: the packed chunks break the budget
    whatever the split (fixed-shape: not one row fits).  ``monotone``: whenever [r0, r1) may
    join, so may any [r0, r1') with r1' < r1 (more rows and columns only add bytes).
    """

    may_join: Callable
    slice_alone: Callable
    width: Callable | None = None
    compressed: bool = False
    alloc_rows: int | None = None
    over: bool = False
    monotone: bool = False


def pack(batch: StepBatch, b: Budgeting, packing: Packing, build) -> None:
    """Greedy packing in order; a request that alone breaks a limit is sliced together with
    the identical requests that follow it (whether a request fits alone depends on its
    lengths only), and a group of identical requests is repeated while the run lasts
    (``StepBatch.repeats``: schedulers send runs of equal chunks).

    A monotone packing slices a request that alone breaks a limit without asking more, and
    asks for the rest of the batch in one question when the request fits: most steps are
    packed whole.  The chunks and the budget interval are those of packing request by request
    (a refusal of the rest is never below the refusal that stops the request-by-request
    packing); ``test_plan`` holds the two together.
    """
    query_lens, seq_lens = batch.query_lens, batch.seq_lens
    n_req, workspace = len(query_lens), b.workspace
    repeats = batch.repeats
    may_join, slice_alone, width_of, compressed, alloc_rows, over, monotone = packing
    i = 0
    while i < n_req:
        j, rows, kv, longest = i, 0, 0, 0
        if monotone:
            q, s = query_lens[i], seq_lens[i]
            if not (s <= workspace and may_join(b, i, i + 1, q, s, s)):
                slice_alone(i, build, repeats[i])  # alone it breaks a limit: with the rest, too
                i += repeats[i]
                continue
            j, rows, kv, longest = i + 1, q, s, s
            if j < n_req:
                rest_rows, rest_kv, rest_longest = batch.totals_from(i)
                if rest_kv <= workspace and may_join(b, i, n_req, rest_rows, rest_kv, rest_longest):
                    j, rows, kv, longest = n_req, rest_rows, rest_kv, rest_longest
        while j < n_req:
            q, s = query_lens[j], seq_lens[j]
            wider = s if s > longest else longest
            if kv + s <= workspace and may_join(b, i, j + 1, rows + q, kv + s, wider):
                rows, kv, longest, j = rows + q, kv + s, wider, j + 1
            else:
                break
        if j == i:
            slice_alone(i, build, repeats[i])
            i += repeats[i]
            continue
        width = kv if width_of is None else width_of(i, j, kv, longest)
        size, groups = j - i, 1
        if j < n_req and repeats[i] > size:
            # the group stopped at a request identical to its own: while g + 1 identical
            # requests follow, the next group asks the same questions and gets the same
            # answers (a monotone packing's rest holds those g + 1: it is refused too)
            while repeats[i + groups * size] > size:
                groups += 1
        # the record made by tuple's own constructor: packing runs for every step of a grid
        build.add(tuple.__new__(Piece, (i, j, 0, rows, width, True, over, compressed, kv, 0, alloc_rows, None)), groups)
        i += groups * size


def slice_equal_rows(i: int, build, times: int = 1) -> None:
    """vLLM: slices of max(1, rows-within-budget) rows at the request's full width (its own
    seq_len wide in the compressed layout)."""
    b, r = build.b, build.batch.requests[i]
    compressed = b.compressed_only

    def runs() -> list[tuple[Slice, int]]:
        """The first slice (it gathers), the full slices after it, the rest."""
        n, q = r.seq_len, r.query_len
        per = q if b.budget is None else b.max_rows(n, compressed)
        over = per < 1
        per = max(1, per)
        first = min(per, q)
        out = [(Slice(0, first, n, True, over, compressed, n), 1)]
        full = (q - first) // per
        if full:
            out.append((Slice(first, first + per, n, False, over, compressed, n), full))
        if first + full * per < q:
            out.append((Slice(first + full * per, q, n, False, over, compressed, n), 1))
        return out

    def cut() -> list[Slice]:
        return [s._replace(q0=s.q0 + k * (s.q1 - s.q0), q1=s.q1 + k * (s.q1 - s.q0))
                for s, alike in runs() for k in range(alike)]

    build.add_alone(i, Slicing("equal rows", r, compressed, cut, runs), times)


def slice_causal(i: int, build, compressed: bool, times: int = 1) -> None:
    """Each slice is as wide as its last row's ke (a KV prefix): early slices take more rows.

    The cut comes as runs: a slice found by search, then every slice after it that takes as
    many rows and still fits, each the next rows and as wide as its own last row's window (a
    long prompt's widths grow a few columns a slice: dozens fit in a run)."""
    b, r = build.b, build.batch.requests[i]

    def runs() -> list[tuple[Slice, int]]:
        end, window = r.query_len, r.window
        if b.budget is None:
            return [(Slice(0, end, window(end), True, False, compressed, r.seq_len), 1)]
        within, count, budget = b.within, b.counted, b.budget  # at hand: a grid asks them millions of times

        def fits(m: int, q0: int) -> bool:
            """The slice [q0, q0 + m) fits.  Asks no question: the interval stays as it is."""
            return count(m, window(q0 + m), compressed) <= budget

        out = []
        q0, most = 0, end
        while q0 < end:
            # the largest m with the slice [q0, q0 + m), as wide as its last row's window, within
            # budget; a slice is wider than the one before, so it takes at most as many rows
            # (bytes never fall with rows or width): the previous slice's rows first, the usual answer
            hi = min(most, end - q0)
            if fits(hi, q0):
                m = hi
                within(m, window(q0 + m), compressed)  # accepted: the question the interval keeps
            else:
                lo, hi = 0, hi - 1
                if q0:
                    # most often a few rows below the previous slice's: step down 1, 2, 4, ... rows
                    # until a slice fits, then bisect between it and the last that did not
                    top, gap = hi + 1, 1
                    while top - gap > 0:
                        if fits(top - gap, q0):
                            lo = top - gap
                            break
                        hi, gap = top - gap - 1, 2 * gap
                while lo < hi:  # the first slice: no earlier answer to start from, bisect
                    mid = (lo + hi + 1) // 2
                    if fits(mid, q0):
                        lo = mid
                    else:
                        hi = mid - 1
                m = lo
                # the interval, as asking slice by slice would leave it: m rows accepted (where one
                # row fits), m + 1 refused; any other answer is inside these two
                if m:
                    within(m, window(q0 + m), compressed)
                within(m + 1, window(q0 + m + 1), compressed)
            rows = max(m, 1)
            q1 = q0 + rows
            alike = 1 + (run_of(q1, m) if m else 0)
            out.append((Slice(q0, q1, window(q1), q0 == 0, m == 0, compressed, r.seq_len), alike))
            q0, most = q1 + (alike - 1) * rows, rows
        return out

    def run_of(q0: int, m: int) -> int:
        """How many slices from ``q0`` on take ``m`` rows and still fit: the k-th is
        ``(context + q0 + k m) // ratio`` wide, so they fit up to the widest ``m`` rows may take.
        The widest of them is asked, the question that sets the budget interval as asking each
        in turn would (the first that does not fit is asked by the next slice's search)."""
        room = (end_of_request - q0) // m  # slices of m rows left
        if not room:
            return 0
        good = min(room, ((b.widest(m, compressed) + 1) * r.ratio - 1 - r.context_len - q0) // m)
        if good <= 0:
            return 0
        b.within(m, r.window(q0 + good * m), compressed)  # the widest of the run: accepted
        return good

    end_of_request = r.query_len

    def cut() -> list[Slice]:
        return [s for first, alike in runs() for s in grown_slices(first, alike, r.window)]

    build.add_alone(i, Slicing("causal", r, compressed, cut, runs, growing=True), times)


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

"""Steps that hold one request, evaluated for many at once with numpy.

In a long-context schedule nearly every distinct step holds one request (a prompt's chunk
against its growing context): a million-token workload has thousands, each planned at every
budget by every strategy.  ``LoneSteps`` gives what ``StepOutcomes.at_budgets`` gives such a
step (transient and total peak, chunk count, over budget; not the budget interval) for arrays
of them at once, by the same rules as the strategies' code: the request packed whole where it
fits (``plan.packing.pack``), else cut into equal rows (``slice_equal_rows``) or causal runs
(``slice_causal``), each chunk's bytes as ``fast.totals.ShapeTotals`` counts them.
``lone_steps`` returns None for the settings it does not reproduce; those take the plain path.
``test_lone_steps`` holds it to ``StepOutcomes`` step by step.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ..memory import buffer_bytes
from ..memory.model import INT32_BYTES
from ..memory.topk_bytes import DEFAULT_BLOCK_BYTES, FP32_BYTES, INT64_BYTES, _bytes_per_row
from ..padding import COMPRESSED_ALIGN, align
from ..plan import PlanSettings, Strategy, get_strategy
from ..plan.strategies import Causal, NOnly, PerRequest, Vllm
from ..workload import PrefillRequest, StepBatch
from .planner import ShapePlanner


class LoneOutcomes(NamedTuple):
    """Per step, what ``StepOutcome`` says of it (arrays, one entry a step)."""

    transient: np.ndarray
    peak: np.ndarray
    chunks: np.ndarray
    over_budget: np.ndarray


# a step (query_len, context_len) as one sortable number: both are far below 2^31 tokens
KEY_SHIFT = 32
KEY_MASK = (1 << KEY_SHIFT) - 1


def step_keys(query_lens: np.ndarray, context_lens: np.ndarray) -> np.ndarray:
    return (query_lens << KEY_SHIFT) | context_lens


class KeptOutcomes(NamedTuple):
    """Outcomes at one budget, by step key (sorted)."""

    keys: np.ndarray
    outcomes: LoneOutcomes

    def holds(self, keys: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
        return self.keys[at] == keys

    def look_up(self, keys: np.ndarray) -> LoneOutcomes | None:
        """These steps' outcomes, or None where one of them is not kept."""
        at = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
        if not (self.keys[at] == keys).all():
            return None
        return LoneOutcomes(*(a[at] for a in self.outcomes))

    def merged(self, keys: np.ndarray, outcomes: LoneOutcomes) -> "KeptOutcomes":
        """These kept with more (keys not among them)."""
        every = np.concatenate([self.keys, keys])
        order = np.argsort(every, kind="stable")
        return KeptOutcomes(every[order], LoneOutcomes(*(np.concatenate([a, b])[order]
                                                         for a, b in zip(self.outcomes, outcomes))))


@functools.lru_cache(maxsize=256)  # asked again for every workload of a grid or a dashboard's change
def lone_steps(strategy: str | Strategy, settings: PlanSettings, topk_rows: int | None) -> "LoneSteps | None":
    """The evaluator for these settings, or None where it would not be exact."""
    strategy = get_strategy(strategy)
    if type(strategy) not in (NOnly, Vllm, PerRequest, Causal):
        return None
    settings = strategy.runs_under(settings)
    # DeepSeek-V4.1 is taken one kind at a time (``PlanSettings.kind``), on vLLM's dense path
    if (settings.temporaries not in ("deepgemm", None) or strategy.logits_alive(settings) != 1
            or settings.v41_path not in (None, "dense")
            or (settings.kind is None and settings.preset.multi_kind) or settings.preset.topk < 1):
        return None
    rules = settings.rules
    if type(strategy) is Causal:
        compressed = (not rules.full_width) if strategy.compressed is None else strategy.compressed
        if (compressed and not rules.has_compressed) or (not compressed and not rules.full_width):
            return None  # the plain path names the build's missing layout
    return LoneSteps(strategy, settings, topk_rows)


class LoneSteps:
    """``at_budget(query_lens, context_lens, budget)``: the outcomes of steps of one request each."""

    def __init__(self, strategy: Strategy, settings: PlanSettings, topk_rows: int | None):
        self.strategy, self.settings, self.topk_rows = strategy, settings, topk_rows
        model, rules = settings.preset, settings.rules
        self.ratio = model.kv_ratio
        # a V4.1 kind past the last KV source sees each request's last rows only (``StepBatch.tail``)
        self.tail = model.main_kind.replay_rows if settings.kind is not None else None
        self.padded = settings.padded
        self.rules = rules
        self.row_multiple = rules.row_multiple(model.index_heads)
        # what a budget is held against and what DeepGEMM allocates (``PaddingRules.counter``: its
        # arithmetic takes arrays as it takes numbers)
        self.counted, self.allocated = settings.counters
        self.field_compressed = not rules.full_width  # a field strategy's chunks on a compressed-only build
        if type(strategy) is Causal:
            self.causal = True
            self.compressed = self.field_compressed if strategy.compressed is None else strategy.compressed
        else:
            self.causal = False
            self.compressed = self.field_compressed
        # vllm's packed chunk is counted at its padded compressed width only on a compressed-only
        # build with padding (``_within_packed``)
        self.join_compressed = self.field_compressed and self.padded
        self.every_chunk_gathers = settings.workspace_lifetime == "chunk"
        self.kv_per_token = model.k_bytes_per_token if self.every_chunk_gathers else 0
        self.deepgemm = settings.temporaries == "deepgemm"
        self.topk = model.topk
        # the buffers of ``memory.buffer_bytes`` (it reads only a plan's settings: any step's record
        # serves), linear in the workspace tokens and the top-k rows: asked for one of each
        plan = ShapePlanner(strategy, settings).record(StepBatch((PrefillRequest(0, 1),)))
        self.per_token = buffer_bytes(plan, 1, 0, self.topk)
        self.per_row = buffer_bytes(plan, 0, 1, self.topk)
        self.kept: dict[int | None, KeptOutcomes] = {}  # budget -> the outcomes ``keep`` evaluated

    KEPT_BUDGETS = 32  # budgets whose outcomes are kept (a dashboard's budgets, a grid's)

    # -- logits bytes (arrays)

    def row_bytes(self, cols):
        """(bytes a row of ``cols`` columns is counted at, rows allocated together): ``Budgeting.max_rows``'."""
        if self.padded:
            return self.rules.row_stride(cols, self.compressed) * FP32_BYTES, self.row_multiple
        return cols * FP32_BYTES, 1

    def rows_within(self, cols, budget: int, cap):
        """Most rows of width ``cols`` counted within the budget, at most ``cap``."""
        per_row, step = self.row_bytes(cols)
        rows = budget // np.maximum(per_row, 1) // step * step
        return np.where(per_row == 0, cap, np.minimum(rows, cap))  # no width: any rows

    def widest(self, rows, budget: int):
        """``Budgeting.widest``: the most columns ``rows`` rows may take within the budget (-1: none)."""
        if not self.padded:
            return budget // (FP32_BYTES * rows)
        rules = self.rules
        most = budget // (FP32_BYTES * align(rows, self.row_multiple))  # the widest row stride, in elements
        if self.compressed:
            return most // COMPRESSED_ALIGN * COMPRESSED_ALIGN
        return np.maximum(most // rules.stride_align * rules.stride_align - rules.stride_extra, -1)

    # -- a chunk's transient bytes (``ShapeTotals.shape_total``; no padded inputs: no alloc rows)

    def topk_row_bytes(self, cols):
        """``topk_bytes._bytes_per_row`` of each width."""
        return _bytes_per_row(cols, np.minimum(self.topk, cols), np.maximum)

    def topk_bytes(self, rows, cols):
        """``topk_bytes.topk_counter``'s count."""
        per_row = self.topk_row_bytes(cols)
        block_rows = np.maximum(DEFAULT_BLOCK_BYTES // np.maximum(per_row, 1), 1)
        total = 5 * rows * INT64_BYTES + cols * INT64_BYTES + np.minimum(rows, block_rows) * per_row
        return np.where((rows <= 0) | (cols <= 0), 0, total)

    def topk_grows(self, rows, cols):
        """``topk_holds_every_row``: up to this width a chunk's bytes only grow with it."""
        return (cols <= 0) | (rows * self.topk_row_bytes(cols) <= DEFAULT_BLOCK_BYTES)

    def total(self, rows, cols, compressed: bool, gather, kv):
        gathered = np.where(gather, kv, 0)
        total = (self.allocated(rows, cols, compressed) + INT32_BYTES * (2 * rows + gathered)
                 + gathered * self.kv_per_token)
        if self.deepgemm:
            total = total + self.topk_bytes(rows, cols)
        return total

    # -- the steps

    def reads(self, budget: int | None) -> bool:
        """Whether it evaluates at this budget (else the strategy's check refuses it, on the plain path)."""
        if (budget is None) != (type(self.strategy) is NOnly):
            return False
        return budget is None or (type(budget) is int and budget >= 1)

    def at_budget(self, query_lens, context_lens, budget: int | None) -> LoneOutcomes | None:
        """The outcomes of steps of one request each, (query_len, context_len), at one budget
        (None: the strategy's check refuses the budget, on the plain path): looked up where
        ``keep`` evaluated them all, else evaluated."""
        if not self.reads(budget):
            return None
        q = np.asarray(query_lens, dtype=np.int64)
        c = np.asarray(context_lens, dtype=np.int64)
        kept = self.kept.get(budget)
        found = kept.look_up(step_keys(q, c)) if kept is not None else None
        return found if found is not None else self.evaluate(q, c, budget)

    def keep(self, query_lens, context_lens, budget: int | None) -> None:
        """Evaluates these steps at this budget, each distinct one once, and keeps the outcomes:
        the many schedules of a grid or a dashboard's change share most of their steps, and one
        numpy pass over all of them costs little more than one over a schedule's."""
        if not self.reads(budget):
            return
        keys = step_keys(np.asarray(query_lens, dtype=np.int64), np.asarray(context_lens, dtype=np.int64))
        kept = self.kept.pop(budget, None)  # re-inserted last: the oldest budget goes first
        if kept is not None:
            keys = keys[~kept.holds(keys)]
        keys = np.unique(keys)
        if keys.size:
            found = self.evaluate(keys >> KEY_SHIFT, keys & KEY_MASK, budget)
            kept = KeptOutcomes(keys, found) if kept is None else kept.merged(keys, found)
        if kept is not None:
            self.kept[budget] = kept
        while len(self.kept) > self.KEPT_BUDGETS:
            self.kept.pop(next(iter(self.kept)))

    def evaluate(self, q: np.ndarray, c: np.ndarray, budget: int | None) -> LoneOutcomes:
        """``at_budget``, computed."""
        if self.tail is not None:  # ``PlanSettings.view``: each request's last rows, at their positions
            kept = np.minimum(q, self.tail)
            q, c = kept, c + q - kept
        n = (c + q) // self.ratio  # the request's K as the indexer sees it (``PlanSettings.view``)
        workspace = np.full_like(n, self.settings.workspace) if self.settings.workspace else n
        # packed whole where its K fits the workspace and the strategy lets it join
        fits = n <= workspace
        if budget is not None:
            join = self.compressed if self.causal else self.join_compressed
            fits &= self.counted(q, n, join) <= budget
        packed = self.total(q, n, self.compressed, True, n)
        cut = self.causal_cut if self.causal else self.equal_rows
        chunks, over, largest = cut(q, c, n, budget)
        chunks = np.where(fits, 1, chunks)
        over = np.where(fits, False, over | (n > workspace))
        largest = np.where(fits, packed, largest)
        rows = q if self.topk_rows is None else np.full_like(q, self.topk_rows)
        reserved, held = self.buffers(workspace, rows)
        transient = held + largest
        return LoneOutcomes(transient, reserved + transient, chunks, over)

    def buffers(self, workspace, rows):
        """(reserved, held through the call) per step: ``memory.buffer_bytes``."""
        ws, topk_out, call = (workspace * a + rows * b for a, b in zip(self.per_token, self.per_row))
        return ws + topk_out, call

    def equal_rows(self, q, c, n, budget):
        """``slice_equal_rows``: the first slice (it gathers), the full slices, the rest; all ``n`` wide."""
        compressed = self.compressed
        # rows at the request's width (a request of no width fits whole, so its rows are not read)
        per = q if budget is None else self.rows_within(n, budget, q)
        over = per < 1
        per = np.maximum(per, 1)
        first = np.minimum(per, q)
        full = (q - first) // per
        rest = q - first - full * per
        gathers = self.every_chunk_gathers
        largest = self.total(first, n, compressed, True, n)
        largest = np.maximum(largest, np.where(full > 0, self.total(per, n, compressed, gathers, n), 0))
        largest = np.maximum(largest, np.where(rest > 0, self.total(rest, n, compressed, gathers, n), 0))
        return 1 + full + (rest > 0), over, largest

    def causal_cut(self, q, c, n, budget):
        """``slice_causal``: runs of slices, each the most rows whose logits, as wide as the last
        row's window, fit; the slices after it of as many rows while they still fit.  All steps
        advance one run at a time."""
        compressed, ratio, gathers = self.compressed, self.ratio, self.every_chunk_gathers
        if budget is None:  # one slice, as wide as the request's K
            return np.ones_like(q), np.zeros(q.shape, bool), self.total(q, n, compressed, True, n)
        chunks = np.zeros_like(q)
        over = np.zeros(q.shape, bool)
        largest = np.zeros_like(q)
        live = np.arange(q.size)
        q0 = np.zeros_like(q)
        most = q.copy()
        while live.size:
            end, ctx, start = q[live], c[live], q0[live]
            kv = n[live]
            hi = np.minimum(most[live], end - start)
            # the most rows m <= hi whose slice fits: the count grows with rows and width, so it
            # lies between the rows that fit at the widest window and at the narrowest
            lo = self.rows_within((ctx + start + hi) // ratio, budget, hi)
            up = self.rows_within((ctx + start + 1) // ratio, budget, hi)
            while True:
                open_ = lo < up
                if not open_.any():
                    break
                mid = (lo + up + 1) // 2
                fit = self.counted(mid, (ctx + start + mid) // ratio, compressed) <= budget
                lo = np.where(open_ & fit, mid, lo)
                up = np.where(open_ & ~fit, mid - 1, up)
            m = lo
            rows = np.maximum(m, 1)
            q1 = start + rows
            first = self.total(rows, (ctx + q1) // ratio, compressed, (start == 0) | gathers, kv)
            # the slices after it of as many rows that still fit (``run_of``); where not one row
            # fits, every row left is a slice of its own, over budget
            room = (end - q1) // rows
            fitting = ((self.widest(rows, budget) + 1) * ratio - 1 - ctx - q1) // rows
            alike = np.where(m > 0, np.clip(np.minimum(room, fitting), 0, None), end - q1)
            run = self.run_largest(rows, ctx + q1, alike, kv)
            chunks[live] += 1 + alike
            over[live] |= m == 0
            largest[live] = np.maximum(largest[live], np.maximum(first, run))
            q0[live] = q1 + alike * rows
            most[live] = rows
            live = live[q0[live] < end]
        return chunks, over, largest

    def run_largest(self, rows, start, count, kv):
        """The largest of a run's ``count`` chunks of ``rows`` rows, the j-th ``(start + j rows) //
        ratio`` wide (0 for none): its widest where no byte can fall as the width grows
        (``ShapeTotals.total``), else each counted."""
        ratio, compressed, gathers = self.ratio, self.compressed, self.every_chunk_gathers
        widest = (start + count * rows) // ratio
        largest = np.where(count > 0, self.total(rows, widest, compressed, gathers, kv), 0)
        if not self.deepgemm:
            return largest
        each = np.flatnonzero((count > 0) & ~self.topk_grows(rows, widest))
        if each.size:
            counts = count[each]
            owner = np.repeat(np.arange(each.size), counts)
            j = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + 1
            r = rows[each][owner]
            totals = self.total(r, (start[each][owner] + j * r) // ratio, compressed, gathers, kv[each][owner])
            most = np.zeros(each.size, dtype=np.int64)
            np.maximum.at(most, owner, totals)
            largest[each] = most
        return largest

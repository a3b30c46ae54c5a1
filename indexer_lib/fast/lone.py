"""Steps that hold one request or two, evaluated for many at once with numpy.

In a long-context schedule nearly every distinct step holds one request (a prompt's chunk
against its growing context), and most others two (a prompt's last rows with the next one's
first): a million-token workload has thousands, each planned at every budget by every
strategy.  ``LoneSteps`` gives what ``StepOutcomes.at_budgets`` gives such a step (transient
and total peak, chunk count, over budget; not the budget interval) for arrays of them at once,
by the same rules as the strategies' code: a request packed whole where it fits
(``plan.packing.pack``; two together where the first fits alone and both fit), else cut into
equal rows (``slice_equal_rows``) or causal runs (``slice_causal``), each chunk's bytes as
``fast.totals.ShapeTotals`` counts them.  ``lone_steps`` returns None for the settings it does
not reproduce; those take the plain path.  ``test_lone_steps`` holds it to ``StepOutcomes``
step by step.
"""
from __future__ import annotations

import functools
import weakref
from typing import NamedTuple

import numpy as np

from ..memory import buffer_bytes
from ..memory.model import INT32_BYTES
from ..memory.topk_bytes import DEFAULT_BLOCK_BYTES, FP32_BYTES, INT64_BYTES, _bytes_per_row
from ..padding import COMPRESSED_ALIGN, align
from ..plan import PlanSettings, Strategy, get_strategy
from ..engines.v41 import TORCH_PAD_FROM, TORCH_PAD_TO, TORCH_SCORE_BUDGET_BYTES
from ..plan.strategies import (KPOOL_INDEX_PAGE_ENTRIES, Causal, Engine, NOnly, PerRequest, Vllm,
                               mqa_logits_row_bytes, skips_logits, trtllm_kpool_cols, vllm_qsa_table_columns)
from ..workload import PrefillRequest, StepBatch
from .planner import ShapePlanner


class Alone(NamedTuple):
    """Per request planned on its own (arrays): whether it is packed whole, its chunks, whether
    one breaks the budget, the largest chunk's transient bytes, its first chunk's rows (as wide
    as its K, gathering it) and the logits its last chunk leaves alive."""

    fits: np.ndarray
    chunks: np.ndarray
    over: np.ndarray
    largest: np.ndarray
    first_rows: np.ndarray
    last_held: np.ndarray


class ViewedSteps(NamedTuple):
    """Steps as the indexer sees them (arrays, one entry a step): each request's (rows, context,
    K), and what ``skips_logits`` and the releases' own paths read of the whole step."""

    requests: list  # (query rows, context tokens, K entries) of the first request, then the second's
    kv_ratio: int
    rows: np.ndarray  # the step's query rows
    kv: np.ndarray  # its K entries
    longest: np.ndarray  # K entries of its longest request
    longest_tokens: np.ndarray  # tokens of its longest request


class LoneOutcomes(NamedTuple):
    """Per step, what ``StepOutcome`` says of it (arrays, one entry a step)."""

    transient: np.ndarray
    peak: np.ndarray
    chunks: np.ndarray
    over_budget: np.ndarray


# a request (query_len, context_len) as one sortable number: both are far below 2^31 tokens;
# a step of two requests, as a pair of them
KEY_SHIFT = 32
KEY_MASK = (1 << KEY_SHIFT) - 1
PAIR_KEY = np.dtype([("first", np.int64), ("second", np.int64)])


def as_lengths(query_lens, context_lens, second=None) -> tuple[np.ndarray, ...]:
    """(query lens, context lens), and the second requests' where ``second`` names them, as arrays."""
    lengths = (query_lens, context_lens) + (tuple(second) if second is not None else ())
    return tuple(np.asarray(x, dtype=np.int64) for x in lengths)


def step_keys(*lengths: np.ndarray) -> np.ndarray:
    """Sortable keys of steps given as ``as_lengths`` gives them."""
    if len(lengths) == 2:
        query_lens, context_lens = lengths
        return (query_lens << KEY_SHIFT) | context_lens
    keys = np.empty(lengths[0].shape, PAIR_KEY)
    keys["first"], keys["second"] = step_keys(*lengths[:2]), step_keys(*lengths[2:])
    return keys


def lengths_of(keys: np.ndarray) -> tuple[np.ndarray, ...]:
    """``step_keys``' lengths again."""
    if keys.dtype == PAIR_KEY:
        return lengths_of(keys["first"]) + lengths_of(keys["second"])
    return keys >> KEY_SHIFT, keys & KEY_MASK


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


# every evaluator's kept tables hold at most this many steps in all (about 40 bytes a step):
# past it they are all emptied, so a long-lived dashboard's memory stays bounded
KEPT_STEPS = 1 << 22
_KEEPING: "weakref.WeakSet[LoneSteps]" = weakref.WeakSet()
_kept = [0]  # steps kept now


def _count_kept(steps: int) -> bool:
    """Counts steps kept (or, negative, let go); True where the limit emptied every table first."""
    emptied = _kept[0] + steps > KEPT_STEPS
    if emptied:
        for evaluator in _KEEPING:
            evaluator.kept.clear()
        _kept[0] = 0
    _kept[0] += steps
    return emptied


@functools.lru_cache(maxsize=256)  # asked again for every workload of a grid or a dashboard's change
def lone_steps(strategy: str | Strategy, settings: PlanSettings, topk_rows: int | None) -> "LoneSteps | None":
    """The evaluator for these settings, or None where it would not be exact."""
    strategy = get_strategy(strategy)
    if type(strategy) not in (NOnly, Vllm, PerRequest, Causal, Engine):
        return None
    settings = strategy.runs_under(settings)
    if type(strategy) is Engine and engine_path(settings) is None:
        return None
    # DeepSeek-V4.1 is taken one kind at a time (``PlanSettings.kind``); two logits alive only on
    # an engine's equal rows
    alive = strategy.logits_alive(settings)
    if (settings.temporaries not in ("deepgemm", None) or alive not in (1, 2)
            or (alive == 2 and type(strategy) is not Engine)
            or (settings.kind is None and settings.preset.multi_kind) or settings.preset.topk < 1):
        return None
    rules = settings.rules
    if type(strategy) is Causal:
        compressed = (not rules.full_width) if strategy.compressed is None else strategy.compressed
        if (compressed and not rules.has_compressed) or (not compressed and not rules.full_width):
            return None  # the plain path names the build's missing layout
    return LoneSteps(strategy, settings, topk_rows)


# a release's own path (the ``engine`` strategy), as ``LoneSteps`` evaluates it: (the field's
# packing it follows, or the method that evaluates it; whether it reads a budget: "given",
# "none" or "any"), for the paths of ``Engine.split``
ENGINE_PATHS = {
    "vllm": ("vllm", "given"),  # vLLM's logits budget: the field's vllm packing
    "vllm-workspace": ("n-only", "none"),  # vLLM before it: the workspace only
    "vllm-qsa": ("vllm_qsa_steps", "given"),  # ``split_qsa``, vLLM 0.33.0
    "sglang-qsa": ("sglang_qsa_steps", "given"),  # ``split_qsa``, SGLang 0.5.23 (its own constant)
    "sglang-rows": ("sglang_rows_steps", "given"),  # ``Engine._split_rows``
    "sglang-one-call": ("sglang_rows_steps", "none"),  # SGLang before its budget
    "sglang-calls": ("sglang_calls_steps", "given"),  # ``split_sglang_c4``, ``split_sglang_kpool``
    "sglang-calls-one-call": ("sglang_calls_steps", "none"),  # SGLang 0.5.12-0.5.20's C4 path
    "sglang-v41-torch": ("sglang_v41_torch_steps", "any"),  # ``split_sglang_v41_torch``: no budget read
    "trtllm-tokens": ("trtllm_tokens_steps", "given"),  # ``split_tokens``
    "trtllm-tokens-no-cap": ("trtllm_tokens_steps", "none"),  # before the element cap
    "trtllm-kpool": ("trtllm_kpool_steps", "any"),  # ``split_trtllm_kpool``: one call, no budget read
}


def engine_path(settings: PlanSettings) -> str | None:
    """The release's own path for these settings (a key of ``ENGINE_PATHS``), None where it is
    not evaluated here (the plain path plans it)."""
    profile, preset = settings.profile, settings.preset
    if profile is None:
        return None
    if settings.v41_path == "torch":
        return "sglang-v41-torch"
    if settings.v41_path not in (None, "dense"):
        return None
    if preset.qsa:
        return profile.qsa_path if profile.qsa_path in ("vllm-qsa", "sglang-qsa") else None
    if profile.engine == "vllm":
        return {"logits-budget": "vllm", "workspace": "vllm-workspace"}.get(profile.chunker)
    if profile.engine == "sglang":
        if preset.kv_ratio == 1:
            return {"rows": "sglang-rows", "none": "sglang-one-call"}.get(profile.chunker)
        if not (profile.pooled_kv if preset.pooled else profile.compressed_kv):
            return None
        return "sglang-calls-one-call" if profile.one_call_for(preset) else "sglang-calls"
    if profile.engine == "trtllm":
        if preset.pooled and preset.kv_ratio != 1 and profile.pooled_one_call:
            return "trtllm-kpool"
        if profile.chunker == "tokens":
            return "trtllm-tokens-no-cap" if profile.budget_rule == "none" else "trtllm-tokens"
    return None


class LoneSteps:
    """``at_budget(query_lens, context_lens, budget, second)``: the outcomes of steps of one request
    each, or of two, planned by a field strategy's packing or by a release's own path
    (``ENGINE_PATHS``)."""

    def __init__(self, strategy: Strategy, settings: PlanSettings, topk_rows: int | None):
        self.strategy, self.settings, self.topk_rows = strategy, settings, topk_rows
        # how a step is packed: the strategy's own way, or the release's path's (``Engine``)
        self.engine = type(strategy) is Engine
        if self.engine:
            self.path, self.budget_read = ENGINE_PATHS[engine_path(settings)]
        else:
            self.path, self.budget_read = strategy.name, "none" if type(strategy) is NOnly else "given"
        # the field's packings (``packing.pack``): a release's chunker packs as one of them
        self.packing = {"n-only": NOnly, "vllm": Vllm, "per-request": PerRequest, "causal": Causal}.get(self.path)
        # the release's chunker keeps the previous chunk's logits alive while the next is allocated
        self.alive = strategy.logits_alive(settings)
        model, rules = settings.preset, settings.rules
        self.ratio = model.kv_ratio
        # a V4.1 kind past the last KV source sees each request's last rows only (``StepBatch.tail``)
        self.tail = model.main_kind.replay_rows if settings.kind is not None else None
        self.padded = settings.padded  # ``Budgeting.max_rows`` slices at the padded row stride
        # what the budget is counted at (``PlanSettings.counters``): padded, except SGLang's torch
        # scores for DeepSeek-V4.1, counted plain; a causal cut's search is bounded by its rows
        self.counts_padded = self.padded and settings.v41_path != "torch"
        self.rules = rules
        self.row_multiple = rules.row_multiple(model.index_heads)
        # what a budget is held against and what DeepGEMM allocates (``PaddingRules.counter``: its
        # arithmetic takes arrays as it takes numbers)
        self.counted, self.allocated = settings.counters
        self.field_compressed = not rules.full_width  # a field strategy's chunks on a compressed-only build
        if self.packing is Causal:
            self.causal = True
            self.compressed = self.field_compressed if strategy.compressed is None else strategy.compressed
        else:
            self.causal = False
            self.compressed = self.field_compressed
        self.every_chunk_gathers = settings.workspace_lifetime == "chunk"
        self.kv_per_token = model.k_bytes_per_token if self.every_chunk_gathers else 0
        self.deepgemm = settings.temporaries == "deepgemm"
        self.topk = model.topk
        # the buffers of ``memory.buffer_bytes`` (it reads only a plan's settings: any step's record
        # serves), linear in the workspace tokens and the top-k rows: asked for one of each
        plan = ShapePlanner(strategy, settings).record(StepBatch((PrefillRequest(0, 1),)))
        self.per_token = buffer_bytes(plan, 1, 0, self.topk)
        self.per_row = buffer_bytes(plan, 0, 1, self.topk)
        # a packed chunk's question (``may_join``): counted as wide as its longest request where the
        # chunk is compressed (causal), or on a compressed-only build with padding (vllm's
        # ``_within_packed``), else as wide as its K
        self.join = self.compressed if self.causal else self.field_compressed and self.padded
        # steps of two requests: field strategies join them where they fit; per-request never does
        # (at a pack factor of 1; another factor weighs their areas, on the plain path)
        self.joins = self.packing is not PerRequest
        self.pairs = self.joins or strategy.pack_factor == 1.0
        self.kept: dict[tuple, KeptOutcomes] = {}  # (budget, lengths per step) -> what ``keep`` evaluated
        _KEEPING.add(self)

    KEPT_TABLES = 64  # tables kept, one per budget and kind of step (a dashboard's budgets, a grid's)

    # -- logits bytes (arrays)

    def row_bytes(self, cols, padded: bool):
        """(bytes a row of ``cols`` columns takes, rows allocated together), at the padded stride or plain."""
        if padded:
            return self.rules.row_stride(cols, self.compressed) * FP32_BYTES, self.row_multiple
        return cols * FP32_BYTES, 1

    def rows_within(self, cols, budget: int, cap, padded: bool):
        """Most rows of width ``cols`` within the budget, at most ``cap`` (``Budgeting.max_rows``'
        where ``padded`` is the settings')."""
        per_row, step = self.row_bytes(cols, padded)
        rows = budget // np.maximum(per_row, 1) // step * step
        return np.where(per_row == 0, cap, np.minimum(rows, cap))  # no width: any rows

    def widest(self, rows, budget: int):
        """``Budgeting.widest``: the most columns ``rows`` rows may take within the budget (-1: none)."""
        if not self.counts_padded:
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

    def logits(self, rows, cols, compressed: bool, alloc=None):
        """The bytes a chunk's logits allocate: the build's layout, or ``alloc(rows)`` where the
        release's path sizes them its own way (``add_rows``' ``alloc_bytes``)."""
        return self.allocated(rows, cols, compressed) if alloc is None else alloc(rows)

    def total(self, rows, cols, compressed: bool, gather, kv, held=0, alloc=None):
        """A chunk's transient bytes, ``held``: the logits of the chunk before it still alive
        (``ShapeTotals.pair_total``: they are freed before the top-k's temporaries take their place)."""
        gathered = np.where(gather, kv, 0)
        total = (self.logits(rows, cols, compressed, alloc) + INT32_BYTES * (2 * rows + gathered)
                 + gathered * self.kv_per_token)
        if self.deepgemm:
            return total + np.maximum(self.topk_bytes(rows, cols), held)
        return total + held

    def held_after(self, rows, cols, compressed: bool, alloc=None):
        """The logits a chunk leaves alive while the next is allocated (none where one is alive)."""
        return self.logits(rows, cols, compressed, alloc) if self.alive == 2 else 0

    # -- the steps

    def reads(self, budget: int | None) -> bool:
        """Whether it evaluates at this budget (else the strategy's check refuses it, on the plain path)."""
        if budget is None:
            return self.budget_read in ("none", "any")
        return self.budget_read in ("given", "any") and type(budget) is int and budget >= 1

    def at_budget(self, query_lens, context_lens, budget: int | None, second=None) -> LoneOutcomes | None:
        """The outcomes of steps of one request each, (query_len, context_len), at one budget
        (None: the strategy's check refuses the budget, or steps of two that it does not
        evaluate: the plain path plans them).  ``second``: (query lens, context lens) of each
        step's second request, for steps of two.  Looked up where ``keep`` evaluated them all,
        else evaluated."""
        lengths = as_lengths(query_lens, context_lens, second)
        if not self.reads(budget) or (len(lengths) == 4 and not self.pairs):
            return None
        kept = self.kept.get((budget, len(lengths)))
        found = kept.look_up(step_keys(*lengths)) if kept is not None else None
        return found if found is not None else self.evaluate(lengths, budget)

    def keep(self, query_lens, context_lens, budget: int | None, second=None) -> None:
        """Evaluates these steps at this budget, each distinct one once, and keeps the outcomes:
        the many schedules of a grid or a dashboard's change share most of their steps, and one
        numpy pass over all of them costs little more than one over a schedule's."""
        lengths = as_lengths(query_lens, context_lens, second)
        if not self.reads(budget) or (len(lengths) == 4 and not self.pairs):
            return
        table = (budget, len(lengths))
        keys = step_keys(*lengths)
        kept = self.kept.pop(table, None)  # re-inserted last: the oldest goes first
        if kept is not None:
            keys = keys[~kept.holds(keys)]
        keys = np.unique(keys)
        if keys.size:
            found = self.evaluate(lengths_of(keys), budget)
            if _count_kept(keys.size):  # every table was emptied: this one starts again
                kept = None
            kept = KeptOutcomes(keys, found) if kept is None else kept.merged(keys, found)
        if kept is not None:
            self.kept[table] = kept
        while len(self.kept) > self.KEPT_TABLES:
            _count_kept(-self.kept.pop(next(iter(self.kept))).keys.size)

    def evaluate(self, lengths: tuple, budget: int | None) -> LoneOutcomes:
        """``at_budget``, computed: ``lengths`` (query lens, context lens), and for steps of two
        requests the second's after them."""
        step = self.viewed(lengths)
        if self.packing is None:  # a release's own path: every request of the step at once
            return getattr(self, self.path)(step, budget)
        workspace = self.workspace_of(step.kv)
        if len(step.requests) == 1:
            a = self.alone(*step.requests[0], workspace, budget)
            return self.outcomes(workspace, step.rows, *self.unless_skipped(step, a.chunks, a.over, a.largest))
        # two requests, A then B (``plan.packing.pack``): where A fits alone, a monotone packing
        # asks whether the two fit together (one chunk); else each is planned on its own, B's
        # first chunk after A's last
        (qa, ca, na), (qb, cb, nb) = step.requests
        kv, longest = step.kv, step.longest
        a = self.alone(qa, ca, na, workspace, budget)
        b = self.alone(qb, cb, nb, workspace, budget)
        together = a.fits & (kv <= workspace) & self.joins
        if budget is not None:
            together &= self.counted(qa + qb, longest if self.join else kv, self.join) <= budget
        packed = self.total(qa + qb, longest if self.compressed else kv, self.compressed, True, kv)
        largest = np.maximum(a.largest, b.largest)
        if self.alive == 2:
            largest = np.maximum(largest, self.total(b.first_rows, nb, self.compressed, True, nb, a.last_held))
        chunks, over, largest = self.unless_skipped(step, np.where(together, 1, a.chunks + b.chunks),
                                                    np.where(together, False, a.over | b.over),
                                                    np.where(together, packed, largest))
        return self.outcomes(workspace, step.rows, chunks, over, largest)

    def viewed(self, lengths: tuple) -> ViewedSteps:
        """The steps of these lengths (``evaluate``'s) as the indexer sees them."""
        requests = [self.seen(*lengths[k:k + 2]) for k in range(0, len(lengths), 2)]
        return ViewedSteps(requests, self.ratio, sum(q for q, _, _ in requests), sum(n for _, _, n in requests),
                           functools.reduce(np.maximum, [n for _, _, n in requests]),
                           functools.reduce(np.maximum, [c + q for q, c, _ in requests]))

    def vllm_qsa_steps(self, step: ViewedSteps, budget: int) -> LoneOutcomes:
        """vLLM 0.33.0's QSA path (``split_qsa``): every row of the step in slices of ``max(1,
        budget // (W x 4))`` rows against one width W (``vllm_qsa_width``: the step's longest
        sequence, in blocks), each a view of one workspace of ``max(budget, table columns x 4)``
        bytes; the paged cache read in place (no K gathered)."""
        rows = step.rows
        columns = vllm_qsa_table_columns(self.settings)
        width = np.minimum(np.maximum(64, align(-(-step.longest_tokens // self.ratio), 64)), columns)
        per = np.maximum(1, budget // (width * FP32_BYTES))
        workspace_bytes = max(budget, columns * FP32_BYTES) // FP32_BYTES * FP32_BYTES
        # every slice allocates the workspace, and the rest only grows with rows: the first slice,
        # of the most rows, is the largest (no K gathered)
        largest = self.total(np.minimum(per, rows), width, False, True, 0, alloc=lambda r: workspace_bytes)
        return self.outcomes(self.workspace_of(step.kv), rows, -(-rows // per), np.zeros(rows.shape, bool), largest)

    def sglang_rows_steps(self, step: ViewedSteps, budget: int | None) -> LoneOutcomes:
        """SGLang's DSA indexer (``Engine._split_rows``): one gather of the step's K, its query rows
        in slices of ``min(max(1, budget // (N x 4)), M)`` against all N columns where the M x N x 4
        logits break the budget (never below the element gate), none at or below top-k."""
        rows, kv = step.rows, step.kv
        gate = self.settings.profile.chunk_skip_elements
        if budget is None:
            per = rows
        else:
            whole = self.counted(rows, kv, False) <= budget
            if gate is not None:
                whole |= rows * kv < gate
            per = np.where(whole, rows, np.minimum(np.maximum(1, self.rows_within(kv, budget, rows, False)), rows))
        chunks, largest, _, _ = self.slices(rows, per, kv, False)
        workspace = self.workspace_of(kv)
        chunks, over, largest = self.unless_skipped(step, chunks, kv > workspace, largest)
        return self.outcomes(workspace, rows, chunks, over, largest)

    def sglang_calls_steps(self, step: ViewedSteps, budget: int | None) -> LoneOutcomes:
        """SGLang's C4 path (``sglang_c4_call``: the page table's width, or one long request's own
        K rounded to whole pages) and kpool path (``sglang_kpool_cols``: every request's pooled K
        in whole index pages): every query row against that width, in chunks of ``max(budget //
        row_bytes, 1)`` rows where the logits break the budget, none below the element gate
        (``mqa_logits_row_chunk``); the kpool path none at or below top-k tokens."""
        profile = self.settings.profile
        rows, kv, longest_tokens = step.rows, step.kv, step.longest_tokens
        pooled = self.settings.preset.pooled
        if pooled:
            cols = sum(-(-n // KPOOL_INDEX_PAGE_ENTRIES) for _, _, n in step.requests) * KPOOL_INDEX_PAGE_ENTRIES
            gate_cols, limit = cols, rows * cols * FP32_BYTES
        else:
            page = profile.compressed_page_tokens
            entries = page // self.ratio
            cols = gate_cols = -(-longest_tokens // page) * entries
            least, final = profile.compressed_nonpaged_min_rows, longest_tokens // self.ratio
            limit = rows * cols * FP32_BYTES
            if least is not None and len(step.requests) == 1:  # one long request: its own K, not the table's
                own = (rows >= least) & (final > 0)
                cols = np.where(own, -(-final // entries) * entries, cols)
                limit = np.where(own, rows * mqa_logits_row_bytes(cols), limit)
        per = rows
        if budget is not None:
            gate = profile.chunk_skip_elements
            whole = budget >= limit
            if gate is not None:
                whole |= rows * gate_cols < gate
            per = np.where(whole, rows, np.maximum(budget // np.maximum(mqa_logits_row_bytes(cols), 1), 1))
        chunks, largest, _, _ = self.slices(rows, per, cols, not pooled, kv)
        workspace = self.workspace_of(kv)
        chunks, over, largest = self.unless_skipped(step, chunks, kv > workspace, largest)
        return self.outcomes(workspace, rows, chunks, over, largest)

    def trtllm_tokens_steps(self, step: ViewedSteps, budget: int | None) -> LoneOutcomes:
        """TensorRT-LLM's chunker (``split_tokens``, ``token_chunks``): the step's requests packed
        whole while their rows fit the chunk's rows (as many as the step's longest K picks), a
        longer one cut into blocks of that many; each chunk against the K it needs (a block: its
        request's K up to its last row; two requests packed: both K), in tiles of at most
        ``budget // 4 // K`` rows, none where it is the step's one chunk with nothing cached; the
        previous tile's logits alive while the next is allocated."""
        profile, requests, longest = self.settings.profile, step.requests, step.longest
        chunk_rows = np.full_like(longest, profile.chunk_rows)
        for above, rows in reversed(profile.chunk_rows_by_kv or ()):  # the first threshold passed wins
            chunk_rows = np.where(longest > above, min(profile.chunk_rows, rows), chunk_rows)
        # the chunks in order, each (there, rows, K)
        chunks, together = [], np.zeros(longest.shape, bool)
        if len(requests) == 2:
            (qa, _, na), (qb, _, nb) = requests
            together = (qa <= chunk_rows) & (qb <= chunk_rows) & (qa + qb <= chunk_rows)
            chunks.append((together, qa + qb, na + nb))
        for q, c, _ in requests:
            for j in range(int((-(-q // chunk_rows)).max())):  # its blocks (one where it fits)
                q0 = j * chunk_rows
                q1 = np.minimum(q0 + chunk_rows, q)
                chunks.append((~together & (q0 < q), q1 - q0, (c + q1) // self.ratio))
        one_pass = (sum(there.astype(np.int64) for there, _, _ in chunks) == 1)
        for _, c, _ in requests:
            one_pass &= c == 0
        workspace = self.workspace_of(step.kv)
        count = np.zeros_like(longest)
        over = np.zeros(longest.shape, bool)
        largest = np.zeros_like(longest)
        held = np.zeros_like(longest)  # the logits the last tile so far leaves alive
        for there, rows, kv in chunks:
            there = there & (kv > 0)  # no K yet: no logits
            over |= there & (kv > workspace)
            per = rows
            if budget is not None:
                fits = budget // (FP32_BYTES * np.maximum(kv, 1))
                per = np.where(one_pass, rows, np.maximum(1, np.minimum(rows, fits)))
                over |= there & ~one_pass & (fits < 1)
            tiles, top, first, last_held = self.slices(rows, per, kv, False)
            top = np.maximum(top, self.total(first, kv, False, True, kv, held))  # after the tile before
            count += np.where(there, tiles, 0)
            largest = np.maximum(largest, np.where(there, top, 0))
            held = np.where(there, last_held, held)
        return self.outcomes(workspace, step.rows, count, over, largest)

    def sglang_qsa_steps(self, step: ViewedSteps, budget: int) -> LoneOutcomes:
        """SGLang 0.5.23's QSA path (``split_qsa``): every row against the step's longest K (in
        blocks), in slices of ``min(rows, max(m, budget // (W x 4) // m x m))`` rows (m = 128 /
        heads), each ``[rows rounded up to m, W]`` and freed before the next; the step's K gathered
        once; none where no request has a whole block."""
        rows, kv, width = step.rows, step.kv, step.longest
        m = max(1, 128 // self.settings.preset.index_heads)
        per = np.minimum(rows, np.maximum(1, budget // np.maximum(width * FP32_BYTES, 1) // m) * m)
        chunks, largest, _, _ = self.slices(rows, per, width, False, kv,
                                            alloc=lambda r: align(r, m) * width * FP32_BYTES)
        there = width > 0
        workspace = self.workspace_of(kv)
        return self.outcomes(workspace, rows, np.where(there, chunks, 0), there & (kv > workspace),
                             np.where(there, largest, 0))

    def sglang_v41_torch_steps(self, step: ViewedSteps, budget) -> LoneOutcomes:
        """SGLang 0.5.23's torch scores for DeepSeek-V4.1 (``split_sglang_v41_torch``): request by
        request, its ``lc`` K positions (none: no scores), ``torch_width(lc)`` wide, its rows in
        chunks of ``torch_rows_per_chunk``; the previous chunk's scores alive; no budget read."""
        heads = self.settings.preset.index_heads
        count = over = largest = held = 0
        workspace = self.workspace_of(step.kv)
        for q, _, lc in step.requests:
            width = np.where(lc >= TORCH_PAD_FROM, align(lc, TORCH_PAD_TO), lc)
            per = np.maximum(1, TORCH_SCORE_BUDGET_BYTES // np.maximum(heads * width * 2, 1))
            chunks, top, first, last_held = self.slices(q, per, width, self.ratio != 1, lc)
            top = np.maximum(top, self.total(first, width, self.ratio != 1, True, lc, held))  # after the one before
            there = lc > 0
            count = count + np.where(there, chunks, 0)
            over = over | (there & (lc > workspace))
            largest = np.maximum(largest, np.where(there, top, 0))
            held = np.where(there, last_held, held)
        return self.outcomes(workspace, step.rows, count, over, largest)

    def trtllm_kpool_steps(self, step: ViewedSteps, budget) -> LoneOutcomes:
        """TensorRT-LLM's kpool path (``split_trtllm_kpool``): every row of the step in one call,
        ``rows x`` the block table's pooled capacity of fp32, the cache read in place; no budget read."""
        rows, cols = step.rows, trtllm_kpool_cols(self.settings)
        largest = self.total(rows, cols, False, True, 0, alloc=lambda r: r * cols * FP32_BYTES)
        workspace = self.workspace_of(step.kv)
        return self.outcomes(workspace, rows, np.ones_like(rows), np.zeros(rows.shape, bool), largest)

    def unless_skipped(self, step: ViewedSteps, chunks, over, largest):
        """(chunks, over budget, the largest chunk's bytes), none where the release computes no
        logits for the step (``skips_logits``: vLLM's compressed and pooled indexers, SGLang's DSA
        and kpool paths, at or below top-k)."""
        if not self.engine:
            return chunks, over, largest
        skipped = skips_logits(self.settings.profile, step, self.topk, self.settings.preset.pooled)
        return np.where(skipped, 0, chunks), np.where(skipped, False, over), np.where(skipped, 0, largest)

    def seen(self, q, c):
        """(rows, context, K) of each request as the indexer sees it (``PlanSettings.view``): a
        kind past the last KV source keeps the last rows, at their positions; K compressed."""
        if self.tail is not None:
            kept = np.minimum(q, self.tail)
            q, c = kept, c + q - kept
        return q, c, (c + q) // self.ratio

    def workspace_of(self, kv):
        return np.full_like(kv, self.settings.workspace) if self.settings.workspace else kv

    def alone(self, q, c, n, workspace, budget) -> "Alone":
        """Each request planned on its own: packed whole where its K fits the workspace and the
        strategy lets it join, else cut."""
        fits = n <= workspace
        if budget is not None:
            fits &= self.counted(q, n, self.join) <= budget
        packed = self.total(q, n, self.compressed, True, n)
        if self.causal:  # one logits alive: its first and last chunks are not asked
            chunks, over, largest = self.causal_cut(q, c, n, budget)
            first_rows = last_held = np.zeros_like(q)
        else:
            over, chunks, largest, first_rows, last_held = self.equal_rows(q, c, n, budget)
        return Alone(fits, np.where(fits, 1, chunks), np.where(fits, False, over | (n > workspace)),
                     np.where(fits, packed, largest), np.where(fits, q, first_rows),
                     np.where(fits, self.held_after(q, n, self.compressed), last_held))

    def outcomes(self, workspace, rows, chunks, over, largest) -> LoneOutcomes:
        rows = rows if self.topk_rows is None else np.full_like(rows, self.topk_rows)
        reserved, held = self.buffers(workspace, rows)
        transient = held + largest
        return LoneOutcomes(transient, reserved + transient, chunks, over)

    def buffers(self, workspace, rows):
        """(reserved, held through the call) per step: ``memory.buffer_bytes``."""
        ws, topk_out, call = (workspace * a + rows * b for a, b in zip(self.per_token, self.per_row))
        return ws + topk_out, call

    def equal_rows(self, q, c, n, budget):
        """``slice_equal_rows``: the first slice (it gathers), the full slices, the rest; all ``n``
        wide.  (chunks, over budget, the largest chunk's bytes, the first slice's rows, the
        logits the last leaves alive)."""
        # rows at the request's width (a request of no width fits whole, so its rows are not read)
        per = q if budget is None else self.rows_within(n, budget, q, self.padded)
        over = per < 1
        return (over, *self.slices(q, np.maximum(per, 1), n, self.compressed))

    def slices(self, rows, per, n, compressed: bool, kv=None, alloc=None):
        """``add_rows``: ``rows`` rows in slices of ``per``, ``n`` wide against ``kv`` K tokens (default
        ``n``), each allocating ``alloc(rows)`` bytes where given: the first (it gathers), the full
        ones after it, the rest.  (chunks, the largest chunk's bytes, the first slice's rows, the
        logits the last leaves alive)."""
        kv = n if kv is None else kv
        first = np.minimum(per, rows)
        full = (rows - first) // per
        rest = rows - first - full * per
        gathers = self.every_chunk_gathers
        # each slice after the one before it (two alive: its logits held while the next is made);
        # where full slices follow, the first is one of them in rows
        held_first = self.held_after(first, n, compressed, alloc)
        held_per = self.held_after(per, n, compressed, alloc)
        largest = self.total(first, n, compressed, True, kv, alloc=alloc)
        largest = np.maximum(largest, np.where(full > 0, self.total(per, n, compressed, gathers, kv, held_per, alloc),
                                               0))
        before_rest = np.where(full > 0, held_per, held_first)
        largest = np.maximum(largest, np.where(rest > 0, self.total(rest, n, compressed, gathers, kv, before_rest,
                                                                    alloc), 0))
        last_held = np.where(rest > 0, self.held_after(rest, n, compressed, alloc),
                             np.where(full > 0, held_per, held_first))
        return 1 + full + (rest > 0), largest, first, last_held

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
            lo = self.rows_within((ctx + start + hi) // ratio, budget, hi, self.counts_padded)
            up = self.rows_within((ctx + start + 1) // ratio, budget, hi, self.counts_padded)
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


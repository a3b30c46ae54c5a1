"""The strategies that split a step batch into chunks, and ``make_plan``.

Every strategy packs requests greedily in the scheduler's order and cuts a
request that alone breaks a limit; they differ in what a chunk may hold and how
a lone request is cut (docs/design.md#strategies).  ``Budgeting`` counts each
logits allocation against the budget, with DeepGEMM's padding or without.
"""
from __future__ import annotations

from typing import Callable

from ..padding import DEFAULT_DEEPGEMM_VERSION, PaddingRules, get_rules
from ..shapes import ModelPreset, budget_bytes_from_mb, get_model
from ..workload import StepBatch, check_int
from .chunks import Chunk, Plan


class Budgeting:
    """How a planner counts a logits allocation against the budget.

    It also records the budget interval over which every decision the planner
    asked it would come out the same: the plan is then identical for any
    budget b with ``stable_low <= b < stable_high`` (sweeps reuse plans so).
    """

    def __init__(self, model: ModelPreset, rules: PaddingRules, padded: bool,
                 budget: int | None, workspace: int):
        self.model, self.rules, self.padded = model, rules, padded
        self.budget, self.workspace = budget, workspace
        # planners ask millions of times in a sweep: keep the constant at hand
        self.row_multiple = rules.row_multiple(model.index_heads)
        self.stable_low = 0  # most bytes counted and accepted
        self.stable_high: int | None = None  # fewest bytes counted and refused

    def allocated(self, rows: int, cols: int, compressed: bool = False) -> int:
        m = self.row_multiple
        return -(-rows // m) * m * self.rules.row_stride(cols, compressed) * 4

    def _accept(self, nbytes: int) -> None:
        self.stable_low = max(self.stable_low, nbytes)

    def _refuse(self, nbytes: int) -> None:
        if self.stable_high is None or nbytes < self.stable_high:
            self.stable_high = nbytes

    def within(self, rows: int, cols: int, compressed: bool = False) -> bool:
        budget = self.budget
        if budget is None:
            return True
        # the hot path of every planner: counted() spelled out without calls
        if not self.padded:
            nbytes = rows * cols * 4
        else:
            if compressed:
                stride = -(-cols // 256) * 256
            else:
                a = self.rules.stride_align
                stride = -(-(cols + self.rules.stride_extra) // a) * a
            m = self.row_multiple
            nbytes = -(-rows // m) * m * stride * 4
        if nbytes <= budget:
            if nbytes > self.stable_low:
                self.stable_low = nbytes
            return True
        if self.stable_high is None or nbytes < self.stable_high:
            self.stable_high = nbytes
        return False

    def max_rows(self, cols: int, compressed: bool = False) -> int:
        """Most rows of width ``cols`` within the budget (0 when not even one fits)."""
        if self.padded:
            per_row = self.rules.row_stride(cols, compressed) * 4
            step = self.row_multiple
        else:
            # vLLM: E = budget // 4 elements, max(1, E // N) rows per slice
            per_row, step = 4 * max(cols, 1), 1
        rows = self.budget // per_row // step * step
        self._accept(rows * per_row)
        self._refuse((rows + step) * per_row)
        return rows


class _Builder:
    """Collects chunks while tracking absolute row offsets of the batch."""

    def __init__(self, batch: StepBatch, b: Budgeting):
        self.batch, self.b = batch, b
        self.row_offset = [0]
        for r in batch.requests:
            self.row_offset.append(self.row_offset[-1] + r.query_len)
        self.chunks: list[Chunk] = []

    def add(self, r0, r1, q0, q1, cols, gather, over, compressed=False, kv_tokens=None,
            kv_start=0, alloc_rows=None):
        reqs = self.batch.requests[r0:r1]
        n = sum(r.seq_len for r in reqs) if kv_tokens is None else kv_tokens
        over = over or n > self.b.workspace
        rows = q1 - q0 if alloc_rows is None else alloc_rows
        self.chunks.append(
            Chunk(
                requests=(r0, r1),
                rows=(q0, q1),
                token_start=self.row_offset[r0] + q0,
                token_end=self.row_offset[r0] + q1,
                kv_tokens=n,
                logits_cols=cols,
                logits_bytes=self.b.allocated(rows, cols, compressed),
                gather=gather,
                over_budget=over,
                compressed=compressed,
                kv_start=kv_start,
                alloc_rows=alloc_rows,
            )
        )


def _pack(batch: StepBatch, b: Budgeting, may_join, slice_alone, build: _Builder,
          pack_width=None, compressed: bool = False, alloc_rows: int | None = None,
          over: bool = False) -> None:
    """Greedy packing in order; a request that alone breaks a limit is sliced by ``slice_alone``.

    ``may_join(r0, r1, rows, kv)`` says whether requests [r0, r1) may share a chunk;
    ``pack_width(r0, r1, kv)`` is a packed chunk's logits width (default: all kv);
    ``alloc_rows`` pads a packed chunk's logits rows up (fixed-shape); ``over``: the
    packed chunks break the budget whatever the split (fixed-shape: not one row fits).
    """
    query_lens, seq_lens = batch.query_lens, batch.seq_lens
    n_req, workspace = len(query_lens), b.workspace
    i = 0
    while i < n_req:
        j, rows, kv = i, 0, 0
        while j < n_req:
            q, s = query_lens[j], seq_lens[j]
            if kv + s <= workspace and may_join(i, j + 1, rows + q, kv + s):
                rows, kv, j = rows + q, kv + s, j + 1
            else:
                break
        if j == i:
            slice_alone(i, build)
            i += 1
        else:
            width = kv if pack_width is None else pack_width(i, j, kv)
            build.add(i, j, 0, rows, width, gather=True, over=over,
                      compressed=compressed, kv_tokens=kv, alloc_rows=alloc_rows)
            i = j


def _slice_equal_rows(i: int, build: _Builder) -> None:
    """vLLM: slices of max(1, rows-within-budget) rows at the request's full width."""
    b, r = build.b, build.batch.requests[i]
    n = r.seq_len
    per = b.max_rows(n) if b.budget is not None else r.query_len
    over = per < 1
    per = max(1, per)
    for q0 in range(0, r.query_len, per):
        build.add(i, i + 1, q0, min(q0 + per, r.query_len), n, gather=q0 == 0, over=over)


def _slice_causal(i: int, build: _Builder, compressed: bool) -> None:
    """Each slice is as wide as its last row's ke (a KV prefix): early slices take more rows."""
    b, r = build.b, build.batch.requests[i]
    q0 = 0
    while q0 < r.query_len:
        # largest m with the slice [q0, q0 + m) of width context + q0 + m within budget
        lo, hi = 0, r.query_len - q0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if b.within(mid, r.context_len + q0 + mid, compressed):
                lo = mid
            else:
                hi = mid - 1
        over = lo == 0
        q1 = q0 + max(lo, 1)
        build.add(i, i + 1, q0, q1, r.context_len + q1, gather=q0 == 0, over=over,
                  compressed=compressed, kv_tokens=r.seq_len)
        q0 = q1


def _useful_area(batch: StepBatch, r0: int, r1: int) -> int:
    """Logits each row really reads: sum over rows of ke - ks."""
    return sum(r.query_len * r.context_len + r.query_len * (r.query_len + 1) // 2
               for r in batch.requests[r0:r1])


def plan_n_only(batch: StepBatch, b: Budgeting, **_) -> list[Chunk]:
    unbudgeted = Budgeting(b.model, b.rules, b.padded, None, b.workspace)  # never refuses
    build = _Builder(batch, unbudgeted)
    _pack(batch, unbudgeted, lambda r0, r1, m, n: True, _slice_equal_rows, build)
    return build.chunks


def plan_vllm(batch: StepBatch, b: Budgeting, **_) -> list[Chunk]:
    build = _Builder(batch, b)
    _pack(batch, b, lambda r0, r1, m, n: b.within(m, n), _slice_equal_rows, build)
    return build.chunks


def plan_per_request(batch: StepBatch, b: Budgeting, pack_factor: float = 1.0, **_) -> list[Chunk]:
    if not pack_factor >= 1.0:
        raise ValueError(f"pack_factor {pack_factor!r}: must be >= 1 (allocated / useful area)")

    def may_join(r0, r1, m, n):
        if not b.within(m, n):
            return False
        # two or more requests always allocate more than they read: skip the sum at factor 1
        if r1 - r0 == 1:
            return True
        return pack_factor > 1.0 and m * n <= pack_factor * _useful_area(batch, r0, r1)

    build = _Builder(batch, b)
    _pack(batch, b, may_join, _slice_equal_rows, build)
    return build.chunks


def plan_causal(batch: StepBatch, b: Budgeting, compressed: bool | None = None, **_) -> list[Chunk]:
    # DeepGEMM 2.8 has only the compressed layout; older versions only the full one
    if compressed is None:
        compressed = not b.rules.full_width
    if compressed and not b.rules.has_compressed:
        raise ValueError(
            f"DeepGEMM {b.rules.version} has no compressed (max_seqlen_k) layout: "
            "it needs version 2.2 or later"
        )
    if not compressed and not b.rules.full_width:
        raise ValueError(f"DeepGEMM {b.rules.version} has only the compressed layout")
    reqs = batch.requests
    build = _Builder(batch, b)

    def pack_width(r0, r1, n):
        return max(r.seq_len for r in reqs[r0:r1]) if compressed else n

    def may_join(r0, r1, m, n):
        return b.within(m, pack_width(r0, r1, n), compressed)

    # same greedy packing as vLLM, but a request alone is sliced causally
    _pack(batch, b, may_join, lambda i, bld: _slice_causal(i, bld, compressed), build,
          pack_width, compressed)
    return build.chunks


KV_SPLIT_ALIGN = 256  # column chunks start at multiples of 256 tokens: K-scale slices stay 16-byte aligned


def plan_kv_split(batch: StepBatch, b: Budgeting, **_) -> list[Chunk]:
    """Causal row slicing; where even one row is wider than the budget allows, the
    rows are cut into the smallest allocation (DeepGEMM's row multiple) and the
    KV columns into ranges, whose top-k results the executor merges per row."""
    build = _Builder(batch, b)

    def slice_alone(i: int, bld: _Builder) -> None:
        r = batch.requests[i]
        if b.within(1, r.context_len + 1):
            # the first row fits, so causal slicing meets the budget everywhere it can
            probe = _Builder(batch, b)
            _slice_causal(i, probe, compressed=False)
            if not any(c.over_budget for c in probe.chunks):
                bld.chunks.extend(probe.chunks)
                return
        _split_columns(i, bld)

    _pack(batch, b, lambda r0, r1, m, n: b.within(m, n), slice_alone, build)
    return build.chunks


def _split_columns(i: int, build: _Builder) -> None:
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
        last_ke = r.context_len + q1  # the slice's widest window
        for kv_start in range(0, last_ke, width):
            cols = min(width, last_ke - kv_start)
            # flagged only if this very block of rows and columns breaks the budget
            build.add(i, i + 1, q0, q1, cols, gather=first, over=over and not b.within(q1 - q0, cols),
                      kv_tokens=r.seq_len, kv_start=kv_start)
            first = False


def plan_fixed_shape(batch: StepBatch, b: Budgeting, fixed_width: int | None = None,
                     **_) -> list[Chunk]:
    """Every chunk allocates one logits shape [R, W], rows and width padded up, so a
    caching allocator reuses one block.  The shape comes from the field's plan of
    the step at this budget (``vllm``): W is its widest chunk, or ``fixed_width``
    (e.g. the prompt's full length, for one shape over a whole long prefill); R is
    its tallest chunk, capped at the most rows of width W within the budget."""
    field = plan_vllm(batch, b)
    width = max(c.logits_cols for c in field)
    if fixed_width is not None:
        check_int("fixed_width", fixed_width, 1)
        longest = max(batch.seq_lens)
        if fixed_width < longest:
            raise ValueError(f"fixed_width {fixed_width} < the step's longest sequence "
                             f"{longest}: the fixed shape must hold every request")
        width = fixed_width
    max_rows = b.max_rows(width)
    over = max_rows < 1
    rows_per = max(1, min(max_rows, max(c.num_rows for c in field)))
    build = _Builder(batch, b)

    def may_join(r0, r1, m, n):
        return m <= rows_per and n <= width

    def slice_alone(i: int, bld: _Builder) -> None:
        r = batch.requests[i]
        for q0 in range(0, r.query_len, rows_per):
            bld.add(i, i + 1, q0, min(q0 + rows_per, r.query_len), width, gather=q0 == 0,
                    over=over, kv_tokens=r.seq_len, alloc_rows=rows_per)

    _pack(batch, b, may_join, slice_alone, build, lambda r0, r1, kv: width,
          alloc_rows=rows_per, over=over)
    return build.chunks


# the field's strategies (docs/design.md#strategies)
FIELD_STRATEGIES: dict[str, Callable[..., list[Chunk]]] = {
    "n-only": plan_n_only,
    "vllm": plan_vllm,
    "per-request": plan_per_request,
    "causal": plan_causal,
}

# strategies beyond the field (issue 9): the executor merges column-split top-k
# exactly (``kernels.merge``) and allocates fixed logits shapes
BEYOND_STRATEGIES: dict[str, Callable[..., list[Chunk]]] = {
    "kv-split": plan_kv_split,
    "fixed-shape": plan_fixed_shape,
}

STRATEGIES: dict[str, Callable[..., list[Chunk]]] = {**FIELD_STRATEGIES, **BEYOND_STRATEGIES}


def strategy_budget_bytes(strategy: str, budget_mb: float) -> int | None:
    """The logits budget a strategy plans with, from MB: none for ``n-only``."""
    return None if strategy == "n-only" else budget_bytes_from_mb(budget_mb)


def check_strategy(name: str) -> str:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}: must be one of {', '.join(STRATEGIES)}")
    return name


def make_plan(
    batch: StepBatch,
    strategy: str,
    budget_bytes: int | None,
    workspace_tokens: int | None = None,
    model: str = "deepseek-v3.2",
    deepgemm_version: str = DEFAULT_DEEPGEMM_VERSION,
    padded: bool = True,
    **options,
) -> Plan:
    """Split ``batch`` into chunks with the named strategy.

    ``budget_bytes`` bounds each chunk's logits (padded bytes of ``deepgemm_version``
    unless ``padded`` is False); ``workspace_tokens`` bounds the K gathered per
    chunk (default: vLLM's 40 x max_model_len).
    """
    check_strategy(strategy)
    preset = get_model(model)
    rules = get_rules(deepgemm_version)
    if budget_bytes is None:
        if strategy != "n-only":
            raise ValueError(f"strategy {strategy!r} needs a logits budget: budget_bytes must be > 0")
    else:
        check_int("budget_bytes", budget_bytes, 1)
    if workspace_tokens is None:
        workspace_tokens = preset.default_workspace_tokens
    check_int("workspace_tokens", workspace_tokens, 1)
    b = Budgeting(preset, rules, padded, budget_bytes, workspace_tokens)
    chunks = STRATEGIES[strategy](batch, b, **options)
    return Plan(strategy, batch, model, deepgemm_version, padded, budget_bytes,
                workspace_tokens, tuple(chunks), (b.stable_low, b.stable_high))

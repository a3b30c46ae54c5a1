"""The strategies that split a step batch into chunks, and ``make_plan``.

Every strategy packs requests greedily in the scheduler's order and cuts a
request that alone breaks a limit; they differ in what a chunk may hold and how
a lone request is cut (docs/design.md#strategies).  ``Budgeting`` counts each
logits allocation against the budget, with DeepGEMM's padding or without.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Callable, NamedTuple

from ..engines import EngineProfile, get_engine
from ..padding import DEFAULT_DEEPGEMM_VERSION, PaddingRules, get_rules
from ..shapes import ModelPreset, budget_bytes_from_mb, get_model
from ..workload import StepBatch, check_int
from .builders import ChunkBuilder, NeighbourShapeBuilder, ShapeBuilder, Slice, lone_slices
from .chunks import Chunk, Plan, made_fast


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
        # a build with only the compressed layout (DeepGEMM 2.8) allocates every chunk
        # [rows, max_seqlen_k of its requests], never [rows, N]
        self.compressed_only = not rules.full_width
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

    def narrow(self, low: int, high: int | None) -> None:
        """The interval as if the questions that gave [low, high) were asked again."""
        self._accept(low)
        if high is not None:
            self._refuse(high)

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


def _pack(batch: StepBatch, b: Budgeting, may_join, slice_alone, build,
          pack_width=None, compressed: bool = False, alloc_rows: int | None = None,
          over: bool = False, monotone: bool = False) -> None:
    """Greedy packing in order; a request that alone breaks a limit is sliced by
    ``slice_alone(i, build, times)``, together with the ``times - 1`` identical requests that
    follow it (whether a request fits alone depends on its lengths only), and a group of
    identical requests is repeated while the run lasts (``StepBatch.repeats``: schedulers
    send runs of equal chunks).

    ``may_join(r0, r1, rows, kv, longest)`` says whether requests [r0, r1) may share a
    chunk (``longest``: their longest sequence, kept as the chunk grows, so a compressed
    width costs nothing to ask); ``pack_width(r0, r1, kv, longest)`` is a packed chunk's
    logits width (default: all kv); ``alloc_rows`` pads a packed chunk's logits rows up
    (fixed-shape); ``over``: the packed chunks break the budget whatever the split
    (fixed-shape: not one row fits).  ``monotone``: whenever requests [r0, r1) may join, so
    may any [r0, r1') with r1' < r1 (more rows and columns only add bytes); then a request
    that alone breaks a limit is sliced without asking more, and one that fits asks the rest
    of the batch, in one call, and packs it whole when it fits (most steps do): the same
    chunks as request by request, and the same budget interval (a refusal of the rest is
    never below the refusal that stops the request-by-request packing).
    """
    query_lens, seq_lens = batch.query_lens, batch.seq_lens
    n_req, workspace = len(query_lens), b.workspace
    repeats = batch.repeats
    i = 0
    while i < n_req:
        j, rows, kv, longest = i, 0, 0, 0
        if monotone:
            q, s = query_lens[i], seq_lens[i]
            if not (s <= workspace and may_join(i, i + 1, q, s, s)):
                slice_alone(i, build, repeats[i])  # alone it breaks a limit: with the rest, too
                i += repeats[i]
                continue
            j, rows, kv, longest = i + 1, q, s, s
            if j < n_req:
                rest_rows, rest_kv, rest_longest = batch.totals_from(i)
                if rest_kv <= workspace and may_join(i, n_req, rest_rows, rest_kv, rest_longest):
                    j, rows, kv, longest = n_req, rest_rows, rest_kv, rest_longest
        while j < n_req:
            q, s = query_lens[j], seq_lens[j]
            wider = s if s > longest else longest
            if kv + s <= workspace and may_join(i, j + 1, rows + q, kv + s, wider):
                rows, kv, longest, j = rows + q, kv + s, wider, j + 1
            else:
                break
        if j == i:
            slice_alone(i, build, repeats[i])
            i += repeats[i]
        else:
            width = kv if pack_width is None else pack_width(i, j, kv, longest)
            size, groups = j - i, 1
            if j < n_req and repeats[i] > size:
                # the group stopped at a request identical to its own: while g + 1 identical
                # requests follow, the next group asks the same questions and gets the same
                # answers (a monotone packing's rest holds those g + 1: it is refused too)
                while repeats[i + groups * size] > size:
                    groups += 1
            build.add(i, j, 0, rows, width, gather=True, over=over, compressed=compressed,
                      kv_tokens=kv, alloc_rows=alloc_rows, times=groups)
            i += groups * size


def _slice_equal_rows(i: int, build, times: int = 1) -> None:
    """vLLM: slices of max(1, rows-within-budget) rows at the request's full width (its
    own seq_len wide in the compressed layout); the same for the ``times - 1`` identical
    requests after it."""
    b, r = build.b, build.batch.requests[i]
    compressed = b.compressed_only

    def slices() -> list[Slice]:
        n = r.seq_len
        per = r.query_len if b.budget is None else b.max_rows(n, compressed)
        over = per < 1
        per = max(1, per)
        return [Slice(q0, min(q0 + per, r.query_len), n, q0 == 0, over, compressed, n)
                for q0 in range(0, r.query_len, per)]

    build.add_alone(i, lone_slices(b, "equal rows", r, compressed, slices), times)


def _pack_field(batch: StepBatch, b: Budgeting, may_join, build, monotone: bool = False) -> None:
    """The field's packing (n-only, vllm, per-request): all of a chunk's K, or, on a
    compressed-only build, as wide as its longest request."""
    if not b.compressed_only:
        _pack(batch, b, may_join, _slice_equal_rows, build, monotone=monotone)
        return
    _pack(batch, b, may_join, _slice_equal_rows, build,
          lambda r0, r1, n, longest: longest, compressed=True, monotone=monotone)


def _counted_by_longest(b: Budgeting) -> bool:
    """Whether a packed chunk is counted with its longest request's width (a compressed-only
    build's padded bytes) rather than with its K (vLLM's M x N x 4, and every full layout)."""
    return b.compressed_only and b.padded


def _slice_causal(i: int, build, compressed: bool, times: int = 1) -> None:
    """Each slice is as wide as its last row's ke (a KV prefix): early slices take more rows;
    the same for the ``times - 1`` identical requests after it."""
    b, r = build.b, build.batch.requests[i]

    def slices() -> list[Slice]:
        out = []
        q0, most = 0, r.query_len
        while q0 < r.query_len:
            # largest m with the slice [q0, q0 + m) of width context + q0 + m within budget; a
            # slice is wider than the one before, so it takes at most as many rows (bytes never
            # fall with rows or width): ask for the previous slice's rows first, the usual answer
            lo, hi = 0, min(most, r.query_len - q0)
            if b.within(hi, r.context_len + q0 + hi, compressed):
                lo = hi
            hi -= 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if b.within(mid, r.context_len + q0 + mid, compressed):
                    lo = mid
                else:
                    hi = mid - 1
            most = max(lo, 1)
            q1 = q0 + most
            out.append(Slice(q0, q1, r.context_len + q1, q0 == 0, lo == 0, compressed, r.seq_len))
            q0 = q1
        return out

    build.add_alone(i, lone_slices(b, "causal", r, compressed, slices), times)


def _useful_area(batch: StepBatch, r0: int, r1: int) -> int:
    """Logits each row really reads: sum over rows of ke - ks."""
    return sum(r.query_len * r.context_len + r.query_len * (r.query_len + 1) // 2
               for r in batch.requests[r0:r1])


def plan_n_only(batch: StepBatch, b: Budgeting, builder=ChunkBuilder, **_):
    unbudgeted = Budgeting(b.model, b.rules, b.padded, None, b.workspace)  # never refuses
    build = builder(batch, unbudgeted)
    _pack_field(batch, unbudgeted, lambda r0, r1, m, n, longest: True, build, monotone=True)
    return build.result()


def plan_vllm(batch: StepBatch, b: Budgeting, builder=ChunkBuilder, **_):
    build = builder(batch, b)
    by_longest = _counted_by_longest(b)

    def may_join(r0, r1, m, n, longest):
        return b.within(m, longest, True) if by_longest else b.within(m, n)

    _pack_field(batch, b, may_join, build, monotone=True)
    return build.result()


def plan_per_request(batch: StepBatch, b: Budgeting, pack_factor: float = 1.0, builder=ChunkBuilder, **_):
    if not pack_factor >= 1.0:
        raise ValueError(f"pack_factor {pack_factor!r}: must be >= 1 (allocated / useful area)")
    by_longest = _counted_by_longest(b)

    def may_join(r0, r1, m, n, longest):
        if not (b.within(m, longest, True) if by_longest else b.within(m, n)):
            return False
        # two or more requests always allocate more than they read: skip the sum at factor 1
        if r1 - r0 == 1:
            return True
        return pack_factor > 1.0 and m * n <= pack_factor * _useful_area(batch, r0, r1)

    build = builder(batch, b)
    _pack_field(batch, b, may_join, build)
    return build.result()


def plan_causal(batch: StepBatch, b: Budgeting, compressed: bool | None = None, builder=ChunkBuilder,
                **_):
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
    build = builder(batch, b)

    def pack_width(r0, r1, n, longest):
        return longest if compressed else n

    def may_join(r0, r1, m, n, longest):
        return b.within(m, pack_width(r0, r1, n, longest), compressed)

    # same greedy packing as vLLM, but a request alone is sliced causally
    _pack(batch, b, may_join, lambda i, bld, times: _slice_causal(i, bld, compressed, times), build,
          pack_width, compressed, monotone=True)
    return build.result()


KV_SPLIT_ALIGN = 256  # column chunks start at multiples of 256 tokens: K-scale slices stay 16-byte aligned


def plan_kv_split(batch: StepBatch, b: Budgeting, **_) -> list[Chunk]:
    """Causal row slicing; where even one row is wider than the budget allows, the
    rows are cut into the smallest allocation (DeepGEMM's row multiple) and the
    KV columns into ranges, whose top-k results the executor merges per row."""
    build = ChunkBuilder(batch, b)

    def slice_one(i: int, bld: ChunkBuilder) -> None:
        r = batch.requests[i]
        if b.within(1, r.context_len + 1):
            # the first row fits, so causal slicing meets the budget everywhere it can
            probe = ChunkBuilder(batch, b)
            _slice_causal(i, probe, compressed=False)
            if not any(c.over_budget for c in probe.chunks):
                bld.chunks.extend(probe.chunks)
                return
        _split_columns(i, bld)

    def slice_alone(i: int, bld: ChunkBuilder, times: int) -> None:
        for k in range(i, i + times):
            slice_one(k, bld)

    _pack(batch, b, lambda r0, r1, m, n, longest: b.within(m, n), slice_alone, build, monotone=True)
    return build.chunks


def _split_columns(i: int, build) -> None:
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
    build = ChunkBuilder(batch, b)

    def may_join(r0, r1, m, n, longest):
        return m <= rows_per and n <= width

    def slice_alone(i: int, bld: ChunkBuilder, times: int) -> None:
        for k in range(i, i + times):
            r = batch.requests[k]
            for q0 in range(0, r.query_len, rows_per):
                bld.add(k, k + 1, q0, min(q0 + rows_per, r.query_len), width, gather=q0 == 0,
                        over=over, kv_tokens=r.seq_len, alloc_rows=rows_per)

    _pack(batch, b, may_join, slice_alone, build, lambda r0, r1, kv, longest: width,
          alloc_rows=rows_per, over=over, monotone=True)
    return build.chunks


def plan_engine(batch: StepBatch, b: Budgeting, engine: EngineProfile, builder=ChunkBuilder, **_):
    """The engine release's own chunker (``data/engines/``), on its DeepGEMM and workspace:
    vLLM's workspace-only packing (before 0.19.0) or logits budget (#36178), SGLang's
    query rows against the whole batch's K, or one call."""
    if engine.skip_logits_at_or_below_topk and max(batch.seq_lens) <= b.model.topk:
        return builder(batch, b).result()  # no logits at all: the engine selects every token
    if engine.chunker == "workspace":
        return plan_n_only(batch, b, builder)
    if engine.chunker == "logits-budget":
        return plan_vllm(batch, b, builder)
    return _plan_rows(batch, b, engine, builder)


def _plan_rows(batch: StepBatch, b: Budgeting, engine: EngineProfile, builder=ChunkBuilder):
    """SGLang: one gather of the whole batch's K; the step's query rows in slices of
    min(max(1, budget // (N x 4)), M) rows, each against all N columns, when the
    M x N x 4 logits break the budget (never below the element gate)."""
    rows, cols = batch.num_rows, batch.num_kv_tokens
    gate = engine.chunk_skip_elements
    if b.budget is None or (gate is not None and rows * cols < gate) or b.within(rows, cols):
        per = rows
    else:
        per = min(max(1, b.max_rows(cols)), rows)
    build = builder(batch, b)
    build.add_rows(0, len(batch.requests), rows, per, cols, kv_tokens=cols)
    return build.result()


def _check_engine_budget(engine: EngineProfile, batch: StepBatch, budget_bytes: int | None,
                         topk: int) -> None:
    """ValueError for a budget the engine has no use for, or a step it cannot plan without one."""
    if engine.chunker in ("workspace", "none"):
        if budget_bytes is not None:
            raise ValueError(f"{engine.name} has no logits budget (its chunker: {engine.chunker}): "
                             "budget_bytes must be None")
        return
    if budget_bytes is not None:
        return
    gate = engine.chunk_skip_elements
    if engine.chunker == "rows" and gate is not None and batch.num_rows * batch.num_kv_tokens < gate:
        return  # under the element gate the engine reads no budget
    if engine.skip_logits_at_or_below_topk and max(batch.seq_lens) <= topk:
        return
    raise ValueError(f"{engine.name} chunks this step ({batch.num_rows} x {batch.num_kv_tokens} logits) "
                     "against a budget: budget_bytes must be > 0 (engines.EngineBudget computes it)")


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

# the project's strategies: any DeepGEMM version, on any engine's workspace
STRATEGIES: dict[str, Callable[..., list[Chunk]]] = {**FIELD_STRATEGIES, **BEYOND_STRATEGIES}

# the engine release's own chunker, on its own DeepGEMM (``make_plan(..., engine=...)``;
# default: the latest vLLM)
ENGINE_STRATEGIES: dict[str, Callable[..., list[Chunk]]] = {"engine": plan_engine}
ALL_STRATEGIES = {**STRATEGIES, **ENGINE_STRATEGIES}


def strategy_budget_bytes(strategy: str, budget_mb: float, engine=None) -> int | None:
    """The logits budget a strategy plans with, from MB: none for ``n-only``, nor for the
    ``engine`` strategy of a release without a budget."""
    if strategy == "n-only":
        return None
    if strategy == "engine" and get_engine(engine).chunker in ("workspace", "none"):
        return None
    return budget_bytes_from_mb(budget_mb)


def plan_at(batch: StepBatch, strategy: str, budget_mb: float, model: str = "deepseek-v3.2",
            engine: str | EngineProfile | None = None, deepgemm_version: str | None = None,
            **options) -> Plan:
    """A strategy's plan at a budget in MiB on an engine release: the ``engine`` strategy is
    its own chunker on its own DeepGEMM; the others run on ``deepgemm_version`` where given."""
    return make_plan(batch, strategy, strategy_budget_bytes(strategy, budget_mb, engine), model=model,
                     deepgemm_version=asked_deepgemm(strategy, deepgemm_version),
                     engine=engine, **options)


def check_strategy(name: str) -> str:
    if name not in ALL_STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}: must be one of {', '.join(ALL_STRATEGIES)}")
    return name


FULL_LAYOUT_STRATEGIES = ("kv-split", "fixed-shape")


def runs_on(strategy: str, deepgemm_version: str) -> bool:
    """Whether a DeepGEMM build has the layout the strategy needs (kv-split and fixed-shape
    need the full ``[M, N]`` one, which 2.8, as in vLLM 0.33.0, lacks)."""
    return strategy not in FULL_LAYOUT_STRATEGIES or get_rules(deepgemm_version).full_width


def asked_deepgemm(strategy: str, deepgemm_version: str | None) -> str | None:
    """The DeepGEMM version a strategy is asked to plan on with an engine: the ``engine``
    strategy always keeps its release's own build (None), the others run on the one named."""
    return None if strategy == "engine" else deepgemm_version


def check_layout(strategy: str, deepgemm_version: str, engine: EngineProfile | str | None = None) -> None:
    """ValueError for a strategy that needs DeepGEMM's full ``[M, N]`` layout on a build that
    has only the compressed one (``runs_on``)."""
    if not runs_on(strategy, deepgemm_version):
        on = f" ({get_engine(engine).name})" if engine is not None else ""
        raise ValueError(f"strategy {strategy!r} needs DeepGEMM's full logits layout; DeepGEMM "
                         f"{deepgemm_version}{on} has only the compressed one (give another "
                         "deepgemm_version, or an engine release before vllm==0.33.0)")


class _Settings(NamedTuple):
    """What ``make_plan`` decides before the strategy runs."""

    profile: EngineProfile | None
    deepgemm_version: str
    padded: bool
    workspace_tokens: int
    budgeting: Budgeting
    options: dict


def _settings(batch: StepBatch, strategy: str, budget_bytes: int | None, workspace_tokens: int | None,
              model: str, deepgemm_version: str | None, padded: bool,
              engine: str | EngineProfile | None, options: dict) -> _Settings:
    preset, profile, deepgemm_version, workspace_tokens = _resolved(strategy, workspace_tokens, model,
                                                                    deepgemm_version, engine)
    if strategy == "engine":
        padded = False  # every engine budgets plain M x N x 4
        options = {**options, "engine": profile}
    b = _budgeting(batch, strategy, budget_bytes, preset, profile, get_rules(deepgemm_version), padded,
                   workspace_tokens)
    return _Settings(profile, deepgemm_version, padded, b.workspace, b, options)


def _resolved(strategy: str, workspace_tokens: int | None, model: str, deepgemm_version: str | None,
              engine: str | EngineProfile | None):
    """``_checked_settings``, kept for settings named by strings (an engine profile object may not hash)."""
    checked = _checked_settings if engine is None or isinstance(engine, str) else _checked_settings.__wrapped__
    return checked(strategy, workspace_tokens, model, deepgemm_version, engine)


def _budgeting(batch: StepBatch, strategy: str, budget_bytes: int | None, preset: ModelPreset,
               profile: EngineProfile | None, rules: PaddingRules, padded: bool,
               workspace_tokens: int | None) -> Budgeting:
    """The settings' part that depends on the step, checked: an engine without a workspace of its
    own gathers the step's K (``workspace_tokens`` None); the budget the strategy needs."""
    if workspace_tokens is None:
        workspace_tokens = batch.num_kv_tokens
    if strategy == "engine":
        _check_engine_budget(profile, batch, budget_bytes, preset.topk)
    elif budget_bytes is None and strategy != "n-only":
        raise ValueError(f"strategy {strategy!r} needs a logits budget: budget_bytes must be > 0")
    # a grid plans with the same few values thousands of times: the named checks only for the unusual
    if budget_bytes is not None and not (type(budget_bytes) is int and budget_bytes >= 1):
        check_int("budget_bytes", budget_bytes, 1)
    if not (type(workspace_tokens) is int and workspace_tokens >= 1):
        check_int("workspace_tokens", workspace_tokens, 1)
    return Budgeting(preset, rules, padded, budget_bytes, workspace_tokens)


@lru_cache(maxsize=4096)  # a grid plans thousands of steps with a few settings
def _checked_settings(strategy: str, workspace_tokens: int | None, model: str, deepgemm_version: str | None,
                      engine: str | EngineProfile | None):
    """What a plan's settings resolve to, checked: (model, engine profile, DeepGEMM version,
    workspace tokens; None: an engine's that is the step's own K)."""
    check_strategy(strategy)
    preset = get_model(model)
    profile = get_engine(engine) if engine is not None or strategy == "engine" else None
    if deepgemm_version is not None:
        get_rules(deepgemm_version)  # an unknown version says so before anything else
    if profile is not None:
        if deepgemm_version is not None and deepgemm_version != profile.deepgemm_rules:
            if strategy == "engine":  # the release's own behaviour includes its own build
                raise ValueError(f"deepgemm_version {deepgemm_version!r}: {profile.name} runs "
                                 f"{profile.deepgemm_build}, DeepGEMM rules {profile.deepgemm_rules!r}")
            # the project's strategies may ask "this engine's workspace on another DeepGEMM"
        else:
            deepgemm_version = profile.deepgemm_rules
    if deepgemm_version is None:
        deepgemm_version = DEFAULT_DEEPGEMM_VERSION
    check_layout(strategy, deepgemm_version, profile)
    if workspace_tokens is None:
        workspace_tokens = preset.default_workspace_tokens if profile is None else \
            profile.workspace_tokens(preset.max_model_len) or None
    return preset, profile, deepgemm_version, workspace_tokens


def _plan(batch: StepBatch, strategy: str, budget_bytes: int | None, model: str, s: _Settings,
          chunks) -> Plan:
    b = s.budgeting
    return _plan_record(batch, strategy, budget_bytes, model, s.profile, s.deepgemm_version, s.padded,
                        s.workspace_tokens, (b.stable_low, b.stable_high), tuple(chunks))


def _plan_record(batch: StepBatch, strategy: str, budget_bytes: int | None, model: str,
                 profile: EngineProfile | None, deepgemm_version: str, padded: bool, workspace_tokens: int,
                 budget_stable: tuple[int, int | None], chunks: tuple) -> Plan:
    return made_fast(Plan, strategy=strategy, batch=batch, model=model, deepgemm_version=deepgemm_version,
                     padded=padded, budget_bytes=budget_bytes, workspace_tokens=workspace_tokens,
                     chunks=chunks, budget_stable=budget_stable,
                     engine=None if profile is None else profile.name,
                     workspace_lifetime="persistent" if profile is None else profile.workspace_lifetime,
                     topk_output="persistent" if profile is None else profile.topk_output,
                     logits_alive=_logits_alive(strategy, profile))


def _logits_alive(strategy: str, profile: EngineProfile | None) -> int:
    """How many chunks' logits a plan keeps alive at once: the engine's own chunk loop may hold
    the previous chunk's; the project's strategies free each before the next."""
    return profile.logits_alive if strategy == "engine" else 1


def make_plan(
    batch: StepBatch,
    strategy: str,
    budget_bytes: int | None,
    workspace_tokens: int | None = None,
    model: str = "deepseek-v3.2",
    deepgemm_version: str | None = None,
    padded: bool = True,
    engine: str | EngineProfile | None = None,
    **options,
) -> Plan:
    """Split ``batch`` into chunks with the named strategy.

    ``budget_bytes`` bounds each chunk's logits (padded bytes of ``deepgemm_version``
    unless ``padded`` is False); ``workspace_tokens`` bounds the K gathered per
    chunk (default: vLLM's 40 x max_model_len).  ``engine`` (``vllm==0.15.1``, a
    profile): plan on that release's DeepGEMM padding, workspace and layout; the
    ``engine`` strategy is the release's own chunker (default: the latest vLLM), which
    counts plain M x N x 4 bytes as the engines do.  A ``deepgemm_version`` given with an
    engine replaces its DeepGEMM for the project's strategies (a what-if); the ``engine``
    strategy refuses one that is not the release's own.
    """
    s = _settings(batch, strategy, budget_bytes, workspace_tokens, model, deepgemm_version, padded,
                  engine, options)
    chunks = ALL_STRATEGIES[strategy](batch, s.budgeting, **s.options)
    if s.profile is not None and s.profile.workspace_lifetime == "chunk":
        chunks = [replace(c, gather=True) for c in chunks]  # a fresh K buffer per chunk: every chunk gathers
    return _plan(batch, strategy, budget_bytes, model, s, chunks)


# the strategies whose chunks' memory depends on each chunk's shape alone, or, where an engine
# keeps the previous chunk's logits alive, on its shape and its neighbour's (``plan_shapes``)
SHAPE_STRATEGIES = tuple(FIELD_STRATEGIES) + tuple(ENGINE_STRATEGIES)


class PlanShapes(NamedTuple):
    """A step's plan as a frontier needs it: the plan without its chunks (its settings and
    budget interval), how many chunks it has, whether one breaks a limit, and their
    distinct shapes (``memory.model``'s key: rows, cols, compressed, alloc_rows, kv_tokens,
    gather); where the plan keeps two chunks' logits alive (``Plan.logits_alive``), also the
    distinct pairs (shape of the chunk before or None, shape)."""

    plan: Plan  # ``chunks`` is empty
    num_chunks: int
    over_budget: bool
    shapes: tuple[tuple, ...]
    pairs: tuple[tuple, ...] | None = None


class StepShapes(NamedTuple):
    """``PlanShapes`` without the plan record: what a frontier reads of each step's plan."""

    budget_stable: tuple[int, int | None]
    workspace_tokens: int
    num_chunks: int
    over_budget: bool
    shapes: tuple[tuple, ...]
    pairs: tuple[tuple, ...] | None


class ShapePlanner:
    """``plan_shapes`` with one set of settings, resolved and checked once, for the many steps and
    budgets of a frontier: each step runs the strategy's own code into a shape builder."""

    def __init__(self, strategy: str, workspace_tokens: int | None = None, model: str = "deepseek-v3.2",
                 deepgemm_version: str | None = None, padded: bool = True,
                 engine: str | EngineProfile | None = None, **options):
        if strategy not in SHAPE_STRATEGIES:
            raise ValueError(f"strategy {strategy!r}: plan_shapes plans one of {', '.join(SHAPE_STRATEGIES)} "
                             "(the others' chunk memory depends on more than a chunk's shape)")
        self.strategy, self.model = strategy, model
        self.preset, self.profile, self.deepgemm_version, self.workspace_tokens = _resolved(
            strategy, workspace_tokens, model, deepgemm_version, engine)
        self.rules = get_rules(self.deepgemm_version)
        self.padded = False if strategy == "engine" else padded  # every engine budgets plain M x N x 4
        self.options = {**options, "engine": self.profile} if strategy == "engine" else options
        self.neighbours = _logits_alive(strategy, self.profile) > 1
        self.builder = NeighbourShapeBuilder if self.neighbours else ShapeBuilder
        # a fresh K buffer per chunk: every chunk gathers
        self.every_chunk_gathers = self.profile is not None and self.profile.workspace_lifetime == "chunk"

    def shapes(self, batch: StepBatch, budget_bytes: int | None) -> StepShapes:
        """The step's plan at this budget, as counts and distinct shapes (and pairs)."""
        b = _budgeting(batch, self.strategy, budget_bytes, self.preset, self.profile, self.rules, self.padded,
                       self.workspace_tokens)
        found = ALL_STRATEGIES[self.strategy](batch, b, builder=self.builder, **self.options)
        shapes, pairs = tuple(found.shapes), tuple(found.pairs) if self.neighbours else None
        if self.every_chunk_gathers:
            def gathers(shape):
                return None if shape is None else shape[:5] + (True,)

            shapes = tuple(dict.fromkeys(map(gathers, shapes)))
            if pairs is not None:
                pairs = tuple(dict.fromkeys((gathers(a), gathers(b)) for a, b in pairs))
        return StepShapes((b.stable_low, b.stable_high), b.workspace, found.num_chunks, found.over_budget,
                          shapes, pairs)

    def record(self, batch: StepBatch, budget_bytes: int | None = None, workspace_tokens: int | None = None,
               budget_stable: tuple[int, int | None] = (0, None)) -> Plan:
        """A plan of these settings without its chunks (``memory.ShapesPeak`` reads only the settings)."""
        if workspace_tokens is None:
            workspace_tokens = self.workspace_tokens or batch.num_kv_tokens
        return _plan_record(batch, self.strategy, budget_bytes, self.model, self.profile, self.deepgemm_version,
                            self.padded, workspace_tokens, budget_stable, ())

    def plan(self, batch: StepBatch, budget_bytes: int | None) -> PlanShapes:
        step = self.shapes(batch, budget_bytes)
        plan = self.record(batch, budget_bytes, step.workspace_tokens, step.budget_stable)
        return PlanShapes(plan, step.num_chunks, step.over_budget, step.shapes, step.pairs)


def plan_shapes(
    batch: StepBatch,
    strategy: str,
    budget_bytes: int | None,
    workspace_tokens: int | None = None,
    model: str = "deepseek-v3.2",
    deepgemm_version: str | None = None,
    padded: bool = True,
    engine: str | EngineProfile | None = None,
    **options,
) -> PlanShapes:
    """``make_plan``, by the same strategy code, recording the chunks' count and distinct
    shapes (and, for an engine's chunk loop that keeps two chunks' logits alive, the distinct
    pairs of neighbours) instead of each chunk (one of ``SHAPE_STRATEGIES``)."""
    return ShapePlanner(strategy, workspace_tokens, model, deepgemm_version, padded, engine,
                        **options).plan(batch, budget_bytes)

"""The strategies that split a step batch into chunks, as objects in one registry.

A strategy says what it is (does it read a budget, on which engine; does it need DeepGEMM's
full ``[M, N]`` layout; can a frontier plan it by the chunks' shapes) and how it splits a
step: ``split(batch, budgeting, build)``, the same signature for all.  Its options are its
fields (``Causal(compressed=True)``); ``get_strategy("causal", compressed=True)`` names one,
and an unknown name or option is an error.  Every strategy packs requests greedily in the
scheduler's order and cuts a request that alone breaks a limit; they differ in what a chunk
may hold and how a lone request is cut (docs/design.md#strategies).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import ClassVar

from ..checks import BadValue, unknown_name
from ..elementwise import any_of, not_
from ..engines import EngineProfile, get_engine, process_budget
from ..engines.v41 import TORCH_LOGITS_ALIVE
from ..presets import budget_bytes_from_mb, free_bytes_from_gib
from ..workload import StepBatch, check_int
from .budgeting import Budgeting
from .builders import ChunkBuilder, Piece
from .packing import (Packing, field_packing, join_always, pack, slice_causal, split_columns, useful_area,
                      within_packed)
from .paths import release_path
from .settings import PlanSettings

# where a strategy's budget comes from at a point of a grid
NO_BUDGET, GIVEN_BUDGET, MEASURED_BUDGET = "none", "given", "measured"


@dataclass(frozen=True)
class Strategy:
    name: ClassVar[str]
    # "field" (the serving field's ideas), "beyond" (the project's), "engine" (a release's own chunker)
    family: ClassVar[str]
    needs_full_layout: ClassVar[bool] = False  # DeepGEMM's [M, N] layout, which 2.8 lacks
    cuts_columns: ClassVar[bool] = False  # a row may be cut into column ranges (else one row a chunk at least)
    # a chunk's memory depends on its shape alone (and its neighbour's where two chunks' logits
    # are alive): a frontier can plan it by shapes (``indexer_lib.fast``)
    by_shapes: ClassVar[bool] = True
    # the release's own chunker: its own DeepGEMM build and the engine's unpadded arithmetic,
    # whatever the settings ask of the project's strategies
    own_build: ClassVar[bool] = False

    def budget_source(self, profile: EngineProfile | None) -> str:
        """Where the budget comes from: none, given (the grid's budget_mb), or measured (the
        engine measures it from free memory)."""
        return GIVEN_BUDGET

    def budget_bytes(self, budget_mb: float | None, free_gib: float | None,
                     settings: PlanSettings, mem_fraction_static: float | None = None) -> int | None:
        """The budget it plans with at one point: ``budget_mb`` where it reads one, the engine's
        own measured with ``free_gib`` free (without a free GiB: ``budget_mb`` in its place), or
        None."""
        profile = self.runs_under(settings).profile
        source = self.budget_source(profile)
        if source == NO_BUDGET:
            return None
        if source == MEASURED_BUDGET and free_gib is not None:
            kwargs = {} if mem_fraction_static is None else {"mem_fraction_static": mem_fraction_static}
            return process_budget(profile, free_bytes_from_gib(free_gib), settings.gpu_preset.capacity_bytes,
                                  compressed=settings.preset.kv_ratio != 1, rocm=settings.gpu_preset.rocm, **kwargs)
        return budget_bytes_from_mb(budget_mb)

    def runs_under(self, settings: PlanSettings) -> PlanSettings:
        """The settings as this strategy runs them (BadValue where the build lacks its layout)."""
        if self.needs_full_layout and not settings.rules.full_width:
            on = f" ({settings.engine})" if settings.engine else ""
            raise BadValue("strategy", f"strategy {self.name!r} needs DeepGEMM's full logits layout; DeepGEMM "
                                       f"{settings.deepgemm}{on} has only the compressed one (give another "
                                       "deepgemm_version, or an engine release before vllm==0.33.0)")
        return settings

    def logits_alive(self, settings: PlanSettings) -> int:
        """How many chunks' logits are alive at once (the project's strategies free each first)."""
        return 1

    def check_budget(self, batch: StepBatch, budget: int | None, settings: PlanSettings) -> None:
        if budget is None:
            raise ValueError(f"strategy {self.name!r} needs a logits budget: budget_bytes must be > 0")

    def for_steps(self, steps: list[StepBatch]) -> "Strategy":
        """The strategy for a series of steps of one prefill (fixed-shape: one width for all)."""
        return self

    def for_build(self, has_compressed: bool) -> "Strategy":
        """The strategy on a kernel build that has (or lacks) the compressed layout."""
        return self

    def packing(self, settings: PlanSettings) -> Packing:
        """What a chunk of requests may hold under these settings, and how a request that alone
        breaks a limit is cut."""
        raise NotImplementedError

    def split(self, batch, b: Budgeting, build, among=True) -> None:
        """Split the step into chunks, recorded in ``build``: by default, its packing.  ``batch``:
        one step, or arrays of steps (``workload.StepArrays``) where the strategy is written for
        them (``evaluates_arrays``); ``among``: the steps split."""
        pack(batch, b, _packing_of(self, b.settings), build, among)

    def evaluates_arrays(self, settings: PlanSettings) -> bool:
        """Whether ``split`` takes arrays of steps under these settings (its settings as it runs them)."""
        return False

    def budget_read(self, settings: PlanSettings) -> str:
        """The budgets its split reads under these settings (as it runs them): "given" (one it
        needs), "none" (it refuses one) or "any" (it reads none, and takes whatever is given)."""
        return "given"


@lru_cache(maxsize=256)  # made once per strategy and settings, not for every step of a grid
def _packing_of(strategy: Strategy, settings: PlanSettings) -> Packing:
    return strategy.packing(settings)


@dataclass(frozen=True)
class NOnly(Strategy):
    """vLLM before its budget: requests packed while their K fits the workspace, rows unbounded."""

    name: ClassVar[str] = "n-only"
    family: ClassVar[str] = "field"

    def budget_source(self, profile) -> str:
        return NO_BUDGET

    def check_budget(self, batch, budget, settings) -> None:
        if budget is not None:
            raise ValueError(f"strategy 'n-only' reads no logits budget: budget_bytes must be None, not {budget!r}")

    def packing(self, settings) -> Packing:
        return field_packing(settings, join_always)

    def budget_read(self, settings) -> str:
        return "none"

    def evaluates_arrays(self, settings) -> bool:
        return True


@dataclass(frozen=True)
class Vllm(Strategy):
    """vLLM's budget (#36178): requests packed while M x N x 4 fits; a request alone that breaks it
    is cut into slices of equal rows."""

    name: ClassVar[str] = "vllm"
    family: ClassVar[str] = "field"

    def packing(self, settings) -> Packing:
        return field_packing(settings, within_packed(settings))

    def evaluates_arrays(self, settings) -> bool:
        return True


@dataclass(frozen=True)
class PerRequest(Strategy):
    """One request per chunk, unless packing wastes at most ``pack_factor`` x the useful logits."""

    name: ClassVar[str] = "per-request"
    family: ClassVar[str] = "field"
    pack_factor: float = 1.0  # most allocated / useful area a packed chunk may have

    def __post_init__(self):
        if not self.pack_factor >= 1.0:
            raise ValueError(f"pack_factor {self.pack_factor!r}: must be >= 1 (allocated / useful area)")

    def split(self, batch, b, build, among=True) -> None:
        within, factor = within_packed(b.settings), self.pack_factor

        def may_join(b, r0, r1, m, n, longest, among=True):
            joins = within(b, r0, r1, m, n, longest, among)
            # two or more requests always allocate more than they read: none at factor 1
            if factor == 1.0:
                return joins & (r1 - r0 == 1)
            if not joins or r1 - r0 == 1:  # a factor that weighs areas: one step at a time
                return joins
            return m * n <= factor * useful_area(batch, r0, r1)

        pack(batch, b, field_packing(b.settings, may_join, monotone=False), build, among)

    def evaluates_arrays(self, settings) -> bool:
        return self.pack_factor == 1.0


@dataclass(frozen=True)
class Causal(Strategy):
    """vLLM's packing; a request alone is cut into slices as wide as their last row's window."""

    name: ClassVar[str] = "causal"
    family: ClassVar[str] = "field"
    # DeepGEMM's compressed max_seqlen_k rows; None: compressed where the build has only that layout
    compressed: bool | None = None

    def for_build(self, has_compressed: bool) -> "Strategy":
        return replace(self, compressed=has_compressed) if self.compressed is None else self

    def packing(self, settings) -> Packing:
        rules = settings.rules
        compressed = (not rules.full_width) if self.compressed is None else self.compressed
        if compressed and not rules.has_compressed:
            raise ValueError(f"DeepGEMM {rules.version} has no compressed (max_seqlen_k) layout: "
                             "it needs version 2.2 or later")
        if not compressed and not rules.full_width:
            raise ValueError(f"DeepGEMM {rules.version} has only the compressed layout")

        def width(r0, r1, n, longest):
            return longest if compressed else n

        def may_join(b, r0, r1, m, n, longest, among=True):
            return b.within(m, longest if compressed else n, compressed, among)

        def slice_alone(i, build, times, among=True):
            slice_causal(i, build, compressed, times, among)

        return Packing(may_join, slice_alone, width, compressed, monotone=True)

    def evaluates_arrays(self, settings) -> bool:
        try:
            _packing_of(self, settings)
        except ValueError:
            return False  # the plain path names the build's missing layout
        return True


@dataclass(frozen=True)
class KvSplit(Strategy):
    """Causal row slicing; where even one row is wider than the budget allows, the rows are cut
    into the smallest allocation (DeepGEMM's row multiple) and the KV columns into ranges, whose
    top-k results the executor merges per row."""

    name: ClassVar[str] = "kv-split"
    family: ClassVar[str] = "beyond"
    needs_full_layout: ClassVar[bool] = True
    cuts_columns: ClassVar[bool] = True
    by_shapes: ClassVar[bool] = False  # a column range's memory depends on its neighbours

    def split(self, batch, b, build, among=True) -> None:
        def slice_one(i: int, bld) -> None:
            r = batch.requests[i]
            if b.within(1, r.window(1)):
                # the first row fits, so causal slicing meets the budget everywhere it can
                probe = ChunkBuilder(batch, b)
                slice_causal(i, probe, compressed=False)
                if not any(c.over_budget for c in probe.chunks):
                    bld.chunks.extend(probe.chunks)
                    return
            split_columns(i, bld)

        def slice_alone(i: int, bld, times: int, among=True) -> None:
            for k in range(i, i + times):
                slice_one(k, bld)

        pack(batch, b, Packing(_within_k, slice_alone, monotone=True), build)


def _within_k(b, r0, r1, m, n, longest, among=True):
    """``may_join`` of a chunk counted against the budget as wide as its K."""
    return b.within(m, n, False, among)


@dataclass(frozen=True)
class FixedShape(Strategy):
    """Every chunk allocates one logits shape [R, W], rows and width padded up, so a caching
    allocator reuses one block.  The shape comes from the field's plan of the step at this
    budget (``vllm``): W is its widest chunk, or ``fixed_width`` (e.g. the prompt's full length,
    for one shape over a whole long prefill); R is its tallest chunk, capped at the most rows of
    width W within the budget."""

    name: ClassVar[str] = "fixed-shape"
    family: ClassVar[str] = "beyond"
    needs_full_layout: ClassVar[bool] = True
    by_shapes: ClassVar[bool] = False  # its padded inputs are counted per chunk
    fixed_width: int | None = None

    def __post_init__(self):
        if self.fixed_width is not None:
            check_int("fixed_width", self.fixed_width, 1)

    def for_steps(self, steps) -> "Strategy":
        """One width over the whole prefill: its last step's sequence."""
        if self.fixed_width is not None:
            return self
        return replace(self, fixed_width=max(step.seq_lens[-1] for step in steps))

    def split(self, batch, b, build, among=True) -> None:
        field = ChunkBuilder(batch, b)
        Vllm().split(batch, b, field)
        width = max(c.logits_cols for c in field.chunks)
        if self.fixed_width is not None:
            longest = max(batch.seq_lens)
            if self.fixed_width < longest:
                raise ValueError(f"fixed_width {self.fixed_width} < the step's longest sequence "
                                 f"{longest}: the fixed shape must hold every request")
            width = self.fixed_width
        max_rows = b.max_rows(width)
        over = max_rows < 1
        rows_per = max(1, min(max_rows, max(c.num_rows for c in field.chunks)))

        def slice_alone(i: int, bld, times: int, among=True) -> None:
            for k in range(i, i + times):
                r = batch.requests[k]
                for q0 in range(0, r.query_len, rows_per):
                    bld.add(Piece(k, k + 1, q0, min(q0 + rows_per, r.query_len), width, q0 == 0, over,
                                  kv_tokens=r.seq_len, alloc_rows=rows_per))

        def may_join(b, r0, r1, m, n, longest, among=True):
            return m <= rows_per and n <= width

        pack(batch, b, Packing(may_join, slice_alone, lambda r0, r1, kv, longest: width, alloc_rows=rows_per,
                               over=over, monotone=True), build)


@dataclass(frozen=True)
class Engine(Strategy):
    """The engine release's own chunker (``data/engines/``), on its DeepGEMM and workspace: the
    release's own path for the model (``plan.paths.release_path``): vLLM's workspace-only packing
    (before 0.19.0) or logits budget, SGLang's query rows against the whole batch's K, its C4 and
    kpool paths, TensorRT-LLM's chunks of query rows tiled to an element cap, QSA's and
    DeepSeek-V4.1's paths."""

    name: ClassVar[str] = "engine"
    family: ClassVar[str] = "engine"
    own_build: ClassVar[bool] = True

    def budget_source(self, profile) -> str:
        rule = get_engine(profile).budget_rule
        if rule == "none":
            return NO_BUDGET
        return MEASURED_BUDGET if rule.startswith("sglang") else GIVEN_BUDGET

    def runs_under(self, settings: PlanSettings) -> PlanSettings:
        return settings.own_chunker

    def budget_bytes(self, budget_mb, free_gib, settings, mem_fraction_static=None):
        profile = self.runs_under(settings).profile
        if settings.preset.qsa and profile.qsa_budget_mib is not None:
            return budget_bytes_from_mb(profile.qsa_budget_mib)  # SGLang's QSA path: a constant of its own
        return super().budget_bytes(budget_mb, free_gib, settings, mem_fraction_static)

    def logits_alive(self, settings: PlanSettings) -> int:
        profile = settings.profile
        if settings.v41_path == "torch":
            return TORCH_LOGITS_ALIVE  # SGLang's torch scores: the previous chunk's still bound
        if settings.preset.qsa:
            return 1  # vLLM: one workspace per call, its chunks views of it; SGLang: each chunk deleted
        if settings.preset.kv_ratio != 1 and profile.compressed_logits_alive is not None:
            return profile.compressed_logits_alive  # SGLang's C4 path frees each chunk's logits
        return profile.logits_alive

    def check_budget(self, batch, budget, settings) -> None:
        """ValueError for a budget the engine has no use for, or a step it cannot plan without one."""
        release_path(settings).check_budget(batch, budget, settings)

    def budget_read(self, settings) -> str:
        return release_path(settings).budget_read

    def split(self, batch, b, build, among=True) -> None:
        path = release_path(b.settings)
        skipped = path.skips(batch, b.settings)  # no logits at all: the engine selects every token
        if any_of(skipped):
            among = among & not_(skipped)
        path.split(batch, b, build, among)

    def evaluates_arrays(self, settings) -> bool:
        return True


# the field's strategy before budgets: the unsplit reference that chunk overheads are measured against
BASELINE = NOnly.name

# the registry: every strategy by name, in the order tables and menus list them
STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (NOnly, Vllm, PerRequest, Causal, KvSplit, FixedShape, Engine)}


def strategy_names(*families: str) -> tuple[str, ...]:
    """The strategies' names, of the given families ("field", "beyond", "engine") or all."""
    return tuple(name for name, cls in STRATEGIES.items() if not families or cls.family in families)


def get_strategy(strategy: str | Strategy, **options) -> Strategy:
    """A strategy by name with its options (``get_strategy("causal", compressed=True)``), or the
    object itself; ValueError for an unknown name or option."""
    if isinstance(strategy, Strategy):
        return replace(strategy, **options) if options else strategy
    cls = STRATEGIES.get(strategy)
    if cls is None:
        raise unknown_name("strategy", "strategy", strategy, STRATEGIES)
    known = [f.name for f in fields(cls)]
    unknown = [k for k in options if k not in known]
    if unknown:
        has = f"its options: {', '.join(known)}" if known else "it has no options"
        raise BadValue("strategy", f"strategy {strategy!r} has no option {unknown[0]!r} ({has})")
    return cls(**options)

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

import math
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import ClassVar

from ..checks import BadValue
from ..padding import align
from ..engines import EngineProfile, get_engine, process_budget
from ..engines.v41 import TORCH_LOGITS_ALIVE, torch_rows_per_chunk, torch_width
from ..shapes import budget_bytes_from_mb, free_bytes_from_gib
from ..workload import StepBatch, check_int
from .budgeting import Budgeting
from .builders import ChunkBuilder, Piece
from .packing import (Packing, pack, slice_causal, slice_equal_rows, split_columns, useful_area)
from .settings import PlanSettings

# where a strategy's budget comes from at a point of a grid
NO_BUDGET, GIVEN_BUDGET, MEASURED_BUDGET = "none", "given", "measured"


@dataclass(frozen=True)
class Strategy:
    name: ClassVar[str]
    kind: ClassVar[str]  # "field" (the engines' own ideas), "beyond" (the project's), "engine"
    needs_full_layout: ClassVar[bool] = False  # DeepGEMM's [M, N] layout, which 2.8 lacks
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
                                  compressed=settings.preset.kv_ratio != 1, **kwargs)
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

    def split(self, batch: StepBatch, b: Budgeting, build) -> None:
        """Split the step into chunks, recorded in ``build``: by default, its packing."""
        pack(batch, b, _packing_of(self, b.settings), build)


@lru_cache(maxsize=256)  # made once per strategy and settings, not for every step of a grid
def _packing_of(strategy: Strategy, settings: PlanSettings) -> Packing:
    return strategy.packing(settings)


def _field_packing(settings: PlanSettings, may_join, monotone: bool = True) -> Packing:
    """The field's packing (n-only, vllm, per-request): all of a chunk's K, or, on a
    compressed-only build, as wide as its longest request."""
    if settings.rules.full_width:
        return Packing(may_join, slice_equal_rows, None, False, None, False, monotone)
    return Packing(may_join, slice_equal_rows, lambda r0, r1, n, longest: longest, True, None, False, monotone)


def _within_packed(settings: PlanSettings):
    """``may_join`` of a packed chunk against the budget: counted with its longest request's width
    on a compressed-only build's padded bytes, else with its K (vLLM's M x N x 4, and every full
    layout)."""
    if not settings.rules.full_width and settings.padded:
        return lambda b, r0, r1, m, n, longest: b.within(m, longest, True)
    return lambda b, r0, r1, m, n, longest: b.within(m, n)


@dataclass(frozen=True)
class NOnly(Strategy):
    """vLLM before its budget: requests packed while their K fits the workspace, rows unbounded."""

    name: ClassVar[str] = "n-only"
    kind: ClassVar[str] = "field"

    def budget_source(self, profile) -> str:
        return NO_BUDGET

    def check_budget(self, batch, budget, settings) -> None:
        if budget is not None:
            raise ValueError(f"strategy 'n-only' reads no logits budget: budget_bytes must be None, not {budget!r}")

    def packing(self, settings) -> Packing:
        return _field_packing(settings, lambda b, r0, r1, m, n, longest: True)


@dataclass(frozen=True)
class Vllm(Strategy):
    """vLLM's budget (#36178): requests packed while M x N x 4 fits; a request alone that breaks it
    is cut into slices of equal rows."""

    name: ClassVar[str] = "vllm"
    kind: ClassVar[str] = "field"

    def packing(self, settings) -> Packing:
        return _field_packing(settings, _within_packed(settings))


@dataclass(frozen=True)
class PerRequest(Strategy):
    """One request per chunk, unless packing wastes at most ``pack_factor`` x the useful logits."""

    name: ClassVar[str] = "per-request"
    kind: ClassVar[str] = "field"
    pack_factor: float = 1.0  # most allocated / useful area a packed chunk may have

    def __post_init__(self):
        if not self.pack_factor >= 1.0:
            raise ValueError(f"pack_factor {self.pack_factor!r}: must be >= 1 (allocated / useful area)")

    def split(self, batch, b, build) -> None:
        within, factor = _within_packed(b.settings), self.pack_factor

        def may_join(b, r0, r1, m, n, longest):
            if not within(b, r0, r1, m, n, longest):
                return False
            # two or more requests always allocate more than they read: skip the sum at factor 1
            if r1 - r0 == 1:
                return True
            return factor > 1.0 and m * n <= factor * useful_area(batch, r0, r1)

        pack(batch, b, _field_packing(b.settings, may_join, monotone=False), build)


@dataclass(frozen=True)
class Causal(Strategy):
    """vLLM's packing; a request alone is cut into slices as wide as their last row's window."""

    name: ClassVar[str] = "causal"
    kind: ClassVar[str] = "field"
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

        def may_join(b, r0, r1, m, n, longest):
            return b.within(m, longest if compressed else n, compressed)

        return Packing(may_join, lambda i, bld, times: slice_causal(i, bld, compressed, times), width, compressed,
                       monotone=True)


@dataclass(frozen=True)
class KvSplit(Strategy):
    """Causal row slicing; where even one row is wider than the budget allows, the rows are cut
    into the smallest allocation (DeepGEMM's row multiple) and the KV columns into ranges, whose
    top-k results the executor merges per row."""

    name: ClassVar[str] = "kv-split"
    kind: ClassVar[str] = "beyond"
    needs_full_layout: ClassVar[bool] = True
    by_shapes: ClassVar[bool] = False  # a column range's memory depends on its neighbours

    def split(self, batch, b, build) -> None:
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

        def slice_alone(i: int, bld, times: int) -> None:
            for k in range(i, i + times):
                slice_one(k, bld)

        pack(batch, b, Packing(lambda b, r0, r1, m, n, longest: b.within(m, n), slice_alone, monotone=True), build)


@dataclass(frozen=True)
class FixedShape(Strategy):
    """Every chunk allocates one logits shape [R, W], rows and width padded up, so a caching
    allocator reuses one block.  The shape comes from the field's plan of the step at this
    budget (``vllm``): W is its widest chunk, or ``fixed_width`` (e.g. the prompt's full length,
    for one shape over a whole long prefill); R is its tallest chunk, capped at the most rows of
    width W within the budget."""

    name: ClassVar[str] = "fixed-shape"
    kind: ClassVar[str] = "beyond"
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

    def split(self, batch, b, build) -> None:
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

        def slice_alone(i: int, bld, times: int) -> None:
            for k in range(i, i + times):
                r = batch.requests[k]
                for q0 in range(0, r.query_len, rows_per):
                    bld.add(Piece(k, k + 1, q0, min(q0 + rows_per, r.query_len), width, q0 == 0, over,
                                  kv_tokens=r.seq_len, alloc_rows=rows_per))

        pack(batch, b, Packing(lambda b, r0, r1, m, n, longest: m <= rows_per and n <= width, slice_alone,
                               lambda r0, r1, kv, longest: width, alloc_rows=rows_per, over=over,
                               monotone=True), build)


@dataclass(frozen=True)
class Engine(Strategy):
    """The engine release's own chunker (``data/engines/``), on its DeepGEMM and workspace:
    vLLM's workspace-only packing (before 0.19.0) or logits budget, SGLang's query rows against
    the whole batch's K, TensorRT-LLM's chunks of query rows tiled to an element cap, or one call."""

    name: ClassVar[str] = "engine"
    kind: ClassVar[str] = "engine"
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
        engine = settings.profile
        if settings.v41_path == "torch":
            return  # SGLang's torch scores are capped by a constant: the budget is not read
        if sglang_c4(engine, batch, settings.preset.pooled) and engine.compressed_one_call:
            if budget is not None:
                raise ValueError(f"{engine.name} has no logits budget on its C4 path (every query row in one "
                                 "call): budget_bytes must be None")
            return
        if engine.chunker in ("workspace", "none") or (engine.chunker == "tokens" and engine.budget_rule == "none"):
            if budget is not None:
                raise ValueError(f"{engine.name} has no logits budget (its chunker: {engine.chunker}): "
                                 "budget_bytes must be None")
            return
        if budget is not None:
            return
        if settings.preset.qsa:
            raise ValueError(f"{engine.name}'s QSA path chunks every step against a budget: budget_bytes must be > 0")
        pooled = settings.preset.pooled
        if sglang_c4(engine, batch, pooled) or sglang_kpool(engine, batch, pooled) or trtllm_kpool(engine, batch, pooled):
            return  # no budget: one call (the release's own None, as in a graph-backed forward)
        gate = engine.chunk_skip_elements
        if engine.chunker == "rows" and gate is not None and batch.num_rows * batch.num_kv_tokens < gate:
            return  # under the element gate the engine reads no budget
        if skips_logits(engine, batch, settings.preset.topk, pooled):
            return
        raise ValueError(f"{engine.name} chunks this step ({batch.num_rows} x {batch.num_kv_tokens} logits) "
                         "against a budget: budget_bytes must be > 0 (engines.EngineBudget computes it)")

    def split(self, batch, b, build) -> None:
        engine = b.settings.profile
        if b.settings.preset.qsa:
            split_qsa(batch, b, build)
            return
        if b.settings.v41_path == "torch":
            split_sglang_v41_torch(batch, b, build)
            return
        pooled = b.settings.preset.pooled
        if skips_logits(engine, batch, b.model.topk, pooled):
            return  # no logits at all: the engine selects every token
        if sglang_kpool(engine, batch, pooled):
            split_sglang_kpool(batch, b, build)
        elif trtllm_kpool(engine, batch, pooled):
            split_trtllm_kpool(batch, b, build)
        elif sglang_c4(engine, batch, pooled):
            split_sglang_c4(batch, b, build)
        elif engine.chunker == "workspace":
            NOnly().split(batch, b, build)
        elif engine.chunker == "logits-budget":
            Vllm().split(batch, b, build)
        elif engine.chunker == "tokens":
            split_tokens(batch, b, build)
        else:
            self._split_rows(batch, b, build)

    @staticmethod
    def _split_rows(batch, b, build) -> None:
        """SGLang: one gather of the whole batch's K; the step's query rows in slices of
        min(max(1, budget // (N x 4)), M) rows, each against all N columns, when the M x N x 4
        logits break the budget (never below the element gate)."""
        rows, cols = batch.num_rows, batch.num_kv_tokens
        gate = b.settings.profile.chunk_skip_elements
        if b.budget is None or (gate is not None and rows * cols < gate) or b.within(rows, cols):
            per = rows
        else:
            per = min(max(1, b.max_rows(cols)), rows)
        build.add_rows(0, len(batch.requests), rows, per, cols)


def token_chunks(query_lens, chunk_rows: int) -> list[tuple[int, int, int, int]]:
    """TensorRT-LLM's chunks of a step, as ``(r0, r1, q0, q1)``: requests [r0, r1) packed whole
    while their query rows fit ``chunk_rows`` (q0 = 0, q1 = their rows), a request longer than
    that alone, cut into blocks of ``chunk_rows`` rows (r1 = r0 + 1, rows [q0, q1) of its own)."""
    out, i, n = [], 0, len(query_lens)
    while i < n:
        if query_lens[i] > chunk_rows:
            out.extend((i, i + 1, q0, min(q0 + chunk_rows, query_lens[i]))
                       for q0 in range(0, query_lens[i], chunk_rows))
            i += 1
            continue
        j, rows = i + 1, query_lens[i]
        while j < n and query_lens[j] <= chunk_rows and rows + query_lens[j] <= chunk_rows:
            rows += query_lens[j]
            j += 1
        out.append((i, j, 0, rows))
        i = j
    return out


def split_tokens(batch, b, build) -> None:
    """TensorRT-LLM: chunks of query rows (``token_chunks``, at the rows the step's longest K picks),
    each against the K it needs (a packed chunk: all of its requests' K; a block of one request: its
    K up to the block's last row), each chunk's logits in tiles of at most ``budget // 4 // K`` rows
    (the element cap; a tile of one row where even one is wider).  A step that is one chunk with
    nothing cached runs one call without tiles; chunks without K compute no logits."""
    engine, requests = b.settings.profile, batch.requests
    chunks = token_chunks(batch.query_lens, engine.chunk_rows_for(batch.longest))
    one_pass = len(chunks) == 1 and all(r.context_len == 0 for r in requests)
    for r0, r1, q0, q1 in chunks:
        kv = requests[r0].window(q1) if r1 == r0 + 1 else sum(batch.seq_lens[r0:r1])
        if kv == 0:
            continue  # nothing to score yet: the engine fills the rows' top-k with -1
        rows = q1 - q0
        per, over = rows, False
        if b.budget is not None and not one_pass:
            fits = b.max_rows(kv)
            per, over = max(1, min(rows, fits)), fits < 1
        build.add_rows(r0, r1, rows, per, kv, q0=q0, over=over)


def split_sglang_v41_torch(batch, b, build) -> None:
    """SGLang 0.5.23's torch indexer for DeepSeek-V4.1 on SM90 (``engines.v41``): request by request,
    its ``lc = seq_len // ratio`` K positions (none: no scores), its scores ``width`` wide
    (``torch_width``), its rows in chunks of ``torch_rows_per_chunk(heads, width)``; no budget."""
    heads = b.model.index_heads
    for i, lc in enumerate(batch.seq_lens):
        if lc == 0:
            continue  # prefill_requests skips a request with nothing visible yet
        width = torch_width(lc)
        build.add_rows(i, i + 1, batch.query_lens[i], torch_rows_per_chunk(heads, width), width, kv=lc,
                       compressed=batch.kv_ratio != 1)


def sglang_c4(engine, batch, pooled: bool = False) -> bool:
    """Whether the step goes through SGLang's own path for compressed K (DeepSeek-V4's C4 indexer,
    ``C4IndexerBackendMixin.forward_c4_indexer``); a pooled indexer has its own (``sglang_kpool``)."""
    return batch.kv_ratio != 1 and engine.engine == "sglang" and engine.compressed_kv and not pooled


def sglang_kpool(engine, batch, pooled: bool) -> bool:
    """Whether the step goes through SGLang's own path for pooled K (GLM-5.3-Flash's kpool indexer,
    ``IndexerKPool._get_topk_ragged_kpool_plan``)."""
    return pooled and batch.kv_ratio != 1 and engine.engine == "sglang" and engine.pooled_kv


KPOOL_INDEX_PAGE_ENTRIES = 64  # SGLang's index page: 64 pooled entries (dsa_indexer_kpool.py:992)


def sglang_kpool_cols(batch, page_entries: int = KPOOL_INDEX_PAGE_ENTRIES) -> int:
    """The columns of SGLang 0.5.23's kpool logits for one step: every request's ``seq_len //
    pool`` pooled entries rounded up to whole pages of ``page_entries`` (the index page of 64
    pooled entries), summed over the step (``kpool_plan._append_local_rows``: ``pool_pages_i =
    ceil((seq_len // kpool) / index_page_size)``; ``ragged_total_k_rows = total_pool_pages x
    index_page_size``)."""
    return sum(-(-s // page_entries) for s in batch.seq_lens) * page_entries


def split_sglang_kpool(batch, b, build) -> None:
    """SGLang 0.5.23's kpool indexer on an extend step (``_get_topk_ragged_kpool_plan``): every
    query row of the step against the whole step's pooled K (``sglang_kpool_cols``) in one
    ``fp8_mqa_logits`` call, or, where the logits break the budget read for the call
    (``_mqa_logits_row_chunks``: none below the element gate; chunked when rows x cols x 4 >
    budget), in slices of ``max(budget // row_bytes, 1)`` rows (``row_bytes``: a row aligned to
    256 columns), each chunk's logits freed before the next (``_kpool_topk_by_row_chunks``)."""
    rows = batch.num_rows
    cols = sglang_kpool_cols(batch)  # 64 pooled entries to an index page (dsa_indexer_kpool.py:992)
    per = mqa_logits_row_chunk(b, rows, cols, cols, rows * cols * 4)
    # fp8_mqa_logits without max_seqlen_k: DeepGEMM's [M, N] layout (dsa_indexer_kpool.py:916-967)
    build.add_rows(0, len(batch.requests), rows, per, cols, kv=batch.num_kv_tokens)


def trtllm_kpool(engine, batch, pooled: bool) -> bool:
    """Whether the step goes through TensorRT-LLM's own path for pooled K (GLM-5.3-Flash's
    ``glm_kpool`` backend, ``GlmKpoolSparseAttention.score_pools``)."""
    return pooled and batch.kv_ratio != 1 and engine.pooled_one_call


def trtllm_kpool_cols(settings) -> int:
    """The columns of TensorRT-LLM's kpool scores: the block table's pooled capacity,
    ``ceil(block_tables.shape[1] x tokens_per_block / kpool)``, the table as wide as the model's
    longest sequence (the KV block size divides max_model_len: any power of two up to 2^20 does
    for GLM-5.3-Flash's 1,048,576), so ``ceil(max_model_len / kpool)`` whatever the step holds."""
    preset = settings.preset
    return -(-preset.max_model_len // preset.kv_ratio)


def split_trtllm_kpool(batch, b, build) -> None:
    """TensorRT-LLM's kpool indexer on a context step (``Glm5NextSparseAttention.forward_prefill``):
    every context row of the step in one ``kpool_score`` call, ``torch.empty(rows, pools, float32)``
    with ``pools`` the block table's pooled capacity (``trtllm_kpool_cols``), no row chunks and no
    element cap; the kernel reads the pooled cache in place (no K gathered).  No budget is read."""
    rows = batch.num_rows
    if not rows:
        return
    cols = trtllm_kpool_cols(b.settings)
    build.add_rows(0, len(batch.requests), rows, rows, cols, kv=0, alloc_bytes=lambda n: n * cols * 4)


def mqa_logits_row_bytes(cols: int) -> int:
    """SGLang's ``mqa_logits_row_bytes``: a row of fp32 logits, its width aligned to 256 columns."""
    return -(-cols // 256) * 256 * 4


def mqa_logits_row_chunk(b, rows: int, cols: int, gate_cols: int, limit: int) -> int:
    """SGLang's rows per logits call under the budget read for the call (``b.budget``), as its C4
    and kpool paths cut them (``mqa_logits_utils.py``): every row in one call below the element gate
    (rows x ``gate_cols`` under ``chunk_skip_elements``: no budget read) or while the budget covers
    ``limit`` bytes, else ``max(budget // row_bytes, 1)`` rows (a row of ``cols`` aligned to 256
    columns); ``b``'s budget interval is narrowed to the budgets that cut the same."""
    budget, gate = b.budget, b.settings.profile.chunk_skip_elements
    if budget is None or (gate is not None and rows * gate_cols < gate):
        return rows
    if budget >= limit:
        b.narrow(limit, None)
        return rows
    row_bytes = mqa_logits_row_bytes(cols)
    per = max(budget // row_bytes, 1)
    b.narrow(per * row_bytes if budget >= row_bytes else 0, min(limit, (budget // row_bytes + 1) * row_bytes))
    return per


def sglang_c4_call(profile, batch) -> tuple[str, int, int]:
    """(sub-path, logits columns, the width the budget gate reads) of SGLang's C4 indexer for one
    step.  Paged: every row against the batch's page table, ``ceil(max seq_len / page) x entries
    per page`` columns (``PagedIndexerMetadata.max_compressed_seq_len``); non-paged (one request,
    at least ``compressed_nonpaged_min_rows`` query rows): ``max_seqlen_k``, its ``seq_len //
    ratio`` entries rounded up to the page's entries (``_get_nonpaged_indexer_plan``)."""
    ratio, page = batch.kv_ratio, profile.compressed_page_tokens
    entries = page // ratio
    longest = batch.longest_tokens
    paged = -(-longest // page) * entries
    least = profile.compressed_nonpaged_min_rows
    final = longest // ratio
    if least is not None and len(batch.requests) == 1 and batch.num_rows >= least and final > 0:
        return "non-paged", -(-final // entries) * entries, paged
    return "paged", paged, paged


def split_sglang_c4(batch, b, build) -> None:
    """SGLang's C4 indexer, every query row against the step's one width (``sglang_c4_call``).
    0.5.12-0.5.20 (``compressed_budget_rule`` "none"): one call over all the rows, whatever the
    budget.  0.5.21-0.5.23: one budget per forward (``PagedIndexerMetadata``: none below the element
    gate, rows x paged width), the rows cut into slices of ``max(budget // row_bytes, 1)`` where the
    logits break the budget (paged: ``plan_indexer_row_chunks``, chunking when rows x cols x 4 >
    budget; non-paged: ``mqa_logits_rows_per_chunk`` when rows x row_bytes > budget); each chunk's
    logits freed before the next is allocated."""
    profile = b.settings.profile
    path, cols, gate_cols = sglang_c4_call(profile, batch)
    rows = batch.num_rows  # the budget None on 0.5.12-0.5.20 (check_budget): one call
    # paged: chunked when rows x cols x 4 breaks the budget; non-paged: when rows x row_bytes does
    limit = rows * cols * 4 if path == "paged" else rows * mqa_logits_row_bytes(cols)
    per = mqa_logits_row_chunk(b, rows, cols, gate_cols, limit)
    build.add_rows(0, len(batch.requests), rows, per, cols, kv=batch.num_kv_tokens, compressed=True)


def vllm_qsa_table_columns(settings) -> int:
    """vLLM 0.33.0's ``page_table.shape[1] * k_cache.shape[1]`` for QSA's compressed cache: the
    block table's width (``get_block_table_width(cdiv(max_model_len, block), block)``, aligned to
    128 tokens) times the compressed states per block (``block // ratio``)."""
    preset = settings.preset
    block, ratio = preset.kv_block, preset.kv_ratio
    blocks = -(-preset.max_model_len // block)
    return align(blocks, 128 // math.gcd(128, block)) * (block // ratio)


def vllm_qsa_width(settings, batch) -> int:
    """vLLM 0.33.0's QSA logits width: ``round_up(cdiv(max_seq_len, ratio), 64)``, at least 64 and
    at most the block table's columns (``qsa_select_paged_prefill``)."""
    ratio = batch.kv_ratio
    longest = batch.longest_tokens
    width = align(-(-longest // ratio), 64)
    return min(max(64, width), vllm_qsa_table_columns(settings))


def split_qsa(batch, b, build) -> None:
    """Qwen's QSA indexer on the release's own prefill path (``EngineProfile.qsa_path``).

    vLLM 0.33.0 (``qsa_select_paged_prefill``): every prefill row of the step in one call against
    one width W (``vllm_qsa_width``), in slices of ``max(1, budget // (W x 4))`` rows, each a
    ``[rows, W]`` view of one fp32 workspace of ``max(budget, table columns x 4)`` bytes allocated
    per call: every slice's allocation is that workspace; the kernel reads the paged cache (no K
    gathered).  SGLang 0.5.23 (``QSAIndexer.select_prefill_tokens``): every row against the
    batch's longest ``seq_len // ratio`` blocks, in slices of ``min(rows, max(m, (budget //
    (W x 4)) // m x m))`` rows (m = 128 / H), each ``[rows rounded up to m, W]`` fp32, deleted
    before the next; none when every sequence is shorter than one block.  Neither skips the logits
    of short sequences."""
    profile, settings = b.settings.profile, b.settings
    rows, budget = batch.num_rows, b.budget
    if not rows:
        return
    if profile.qsa_path == "vllm-qsa":
        width = vllm_qsa_width(settings, batch)
        row = width * 4
        per = max(1, budget // row)
        # the same slices for budgets in [per x row, (per + 1) x row) (one row below 2 rows), and
        # for every budget from rows x row up
        b.narrow(per * row if per > 1 else 0, (per + 1) * row if per < rows else None)
        table = vllm_qsa_table_columns(settings) * 4
        if budget >= table:
            b.narrow(budget, budget + 1)  # the workspace is the budget itself
        else:
            b.narrow(0, table)
        workspace = max(budget, table) // 4 * 4  # q.new_empty(budget_bytes // 4, float32)
        build.add_rows(0, len(batch.requests), rows, per, width, kv=0, alloc_bytes=lambda n: workspace)
        return
    width = max(batch.seq_lens)
    if width <= 0:
        return  # no complete block: no logits
    m = max(1, 128 // b.model.index_heads)
    per_row = width * 4
    k = max(1, budget // per_row // m)  # slices of k x m rows
    per = min(rows, k * m)
    if rows <= m:
        b.narrow(0, None)
    elif per == rows:
        b.narrow(align(rows, m) * per_row, None)
    else:
        b.narrow(k * m * per_row if k > 1 else 0, (k + 1) * m * per_row)
    build.add_rows(0, len(batch.requests), rows, per, width, kv=batch.num_kv_tokens,
                   alloc_bytes=lambda n: align(n, m) * per_row)


def skips_logits(engine, batch, topk: int, pooled: bool = False) -> bool:
    """Whether the release computes no logits for the step and selects every K entry: SGLang's DSA
    indexer when every sequence is at most top-k (its C4 path has no such skip); vLLM's compressed
    indexers when the longest compressed K is (TensorRT-LLM's compressed path computes them: its V4
    config leaves skip_indexer_for_short_seqs off).  A pooled indexer (GLM-5.3-Flash's kpool, top-k
    in tokens) skips them on vLLM 0.33.0 and SGLang 0.5.23 while the step's longest sequence is at
    most top-k tokens (vLLM ``models/glm5next/nvidia/sparse_indexer.py:280-293``; SGLang
    ``dsa_indexer_kpool.py:1774-1778``)."""
    if pooled:
        if not (batch.kv_ratio != 1 and engine.pooled_kv) or engine.pooled_one_call:
            return False  # TensorRT-LLM's kpool path: no skip read (taken as none)
        return batch.longest_tokens <= topk
    at_most_topk = batch.longest <= topk  # ``&`` below: numpy arrays of many steps' lengths too (``fast.lone``)
    vllm_compressed = batch.kv_ratio != 1 and engine.compressed_kv and engine.engine == "vllm"
    return at_most_topk & bool((engine.skip_logits_at_or_below_topk and not sglang_c4(engine, batch))
                               or vllm_compressed)


# the field's strategy before budgets: the unsplit reference that chunk overheads are measured against
BASELINE = NOnly.name

# the registry: every strategy by name, in the order tables and menus list them
STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (NOnly, Vllm, PerRequest, Causal, KvSplit, FixedShape, Engine)}


def strategy_names(*kinds: str) -> tuple[str, ...]:
    """The strategies' names, of the given kinds ("field", "beyond", "engine") or all."""
    return tuple(name for name, cls in STRATEGIES.items() if not kinds or cls.kind in kinds)


def get_strategy(strategy: str | Strategy, **options) -> Strategy:
    """A strategy by name with its options (``get_strategy("causal", compressed=True)``), or the
    object itself; ValueError for an unknown name or option."""
    if isinstance(strategy, Strategy):
        return replace(strategy, **options) if options else strategy
    cls = STRATEGIES.get(strategy)
    if cls is None:
        raise BadValue("strategy", f"unknown strategy {strategy!r}: must be one of {', '.join(STRATEGIES)}")
    known = [f.name for f in fields(cls)]
    unknown = [k for k in options if k not in known]
    if unknown:
        has = f"its options: {', '.join(known)}" if known else "it has no options"
        raise BadValue("strategy", f"strategy {strategy!r} has no option {unknown[0]!r} ({has})")
    return cls(**options)

"""Each engine release's own prefill path for the indexer's logits, one object per distinct path,
chosen in one place from the release's profile and the model (``release_path``).

A path splits a step the way the release's code does (``split``), says where its code computes no
logits at all (``skips``), which budget it reads (``budget_read``) and which steps it plans without
one.  It is written once, with ``indexer_lib.elementwise``: the same code plans one step (a
``StepBatch``, Python ints) into any builder, and evaluates arrays of steps at once (a
``StepArrays``, numpy arrays) into ``memory.StepsMemory``; ``among`` names the steps it splits.
Each path's rule is sourced in its docstring (the release's file and line, docs/design.md#engines).
"""
from __future__ import annotations

import functools
import math
from typing import ClassVar

from ..dtypes import FP32_BYTES
from ..elementwise import any_of, cdiv, largest, maximum, minimum, not_, where
from ..engines.v41 import torch_rows_per_chunk, torch_width
from ..padding import align
from .budgeting import Budgeting
from .builders import RowSlices
from .packing import field_packing, join_always, pack, slice_equal_rows, within_packed
from .settings import PlanSettings

KPOOL_INDEX_PAGE_ENTRIES = 64  # SGLang's index page: 64 pooled entries (dsa_indexer_kpool.py:992)


class ReleasePath:
    """One release path.  ``budget_read``: "given" (a budget the step needs unless
    ``unbudgeted`` says otherwise), "none" (it reads none: a budget is refused) or "any" (it reads
    none, and takes whatever is given)."""

    name: ClassVar[str]
    budget_read: ClassVar[str] = "given"
    rocm_kernel: ClassVar[str] = "fp8_mqa_logits"  # the aiter kernel it scores with on ROCm

    def split(self, batch, b: Budgeting, build, among=True) -> None:
        raise NotImplementedError

    def skips(self, batch, settings: PlanSettings):
        """Where the release computes no logits for the step and selects every K entry
        (``skips_logits``)."""
        return skips_logits(settings.profile, batch, settings.preset.topk, settings.preset.pooled)

    def unbudgeted(self, batch, settings: PlanSettings) -> bool:
        """Whether a step of a "given" path is planned without a budget (one call)."""
        return bool(self.skips(batch, settings))

    def check_budget(self, batch, budget: int | None, settings: PlanSettings) -> None:
        """ValueError for a budget the path has no use for, or a step it cannot plan without one."""
        engine = settings.profile
        if self.budget_read == "any" or (budget is not None and self.budget_read == "given"):
            return
        if self.budget_read == "none":
            if budget is not None:
                raise ValueError(self.refusal(engine))
            return
        if not self.unbudgeted(batch, settings):
            raise ValueError(f"{engine.name} chunks this step ({batch.num_rows} x {batch.num_kv_tokens} logits) "
                             "against a budget: budget_bytes must be > 0 (engines.EngineBudget computes it)")

    def refusal(self, engine) -> str:
        return f"{engine.name} has no logits budget (its chunker: {engine.chunker}): budget_bytes must be None"


class VllmChunker(ReleasePath):
    """vLLM's chunker: requests packed in order while the M x N x 4 logits fit the budget
    (``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB``, 0.19.0 on), or, before it, while their K fits the
    workspace; a request alone that breaks a limit cut into equal rows (the field's ``vllm`` and
    ``n-only`` packings, ``plan.packing``)."""

    def __init__(self, budgeted: bool):
        self.budgeted = budgeted
        self.name = "vllm" if budgeted else "vllm-workspace"
        self.budget_read = "given" if budgeted else "none"

    def split(self, batch, b, build, among=True) -> None:
        pack(batch, b, _vllm_packing(b.settings, self.budgeted), build, among)


@functools.lru_cache(maxsize=256)  # made once per settings, not for every step of a grid
def _vllm_packing(settings: PlanSettings, budgeted: bool):
    packing = field_packing(settings, within_packed(settings) if budgeted else join_always)
    ratio, buffer = settings.preset.kv_ratio, settings.workspace
    if settings.profile.compressed_pack_undivided and ratio != 1 and packing.width is None and buffer is not None:
        # vLLM 0.20.0-0.31.0 on compressed K: the builder packs entries against the undivided
        # workspace (0.20.0 v1/attention/backends/mla/indexer.py:249, :525-530) and the layer slices
        # the chunk's K to its buffer of workspace // ratio entries (sparse_attn_indexer.py:195), so
        # the logits are at most the buffer wide and the K past it is gathered out of bounds
        packing = packing._replace(kv_limit_ratio=ratio, width=lambda r0, r1, kv, longest: minimum(kv, buffer),
                                   slice_alone=functools.partial(slice_equal_rows, cap=buffer))
    return packing


class SglangRows(ReleasePath):
    """SGLang's DSA indexer (``Indexer._get_topk_ragged``): one gather of the step's K, its query
    rows in slices of ``min(max(1, budget // (N x 4)), M)`` against all N columns where the M x N
    x 4 logits break the budget, never below the element gate; before its budget (chunker
    "none"), one call."""

    name = "sglang-rows"

    def __init__(self, budgeted: bool):
        self.budget_read = "given" if budgeted else "none"
        if not budgeted:
            self.name = "sglang-one-call"

    def unbudgeted(self, batch, settings) -> bool:
        gate = settings.profile.chunk_skip_elements
        return (gate is not None and batch.num_rows * batch.num_kv_tokens < gate) or super().unbudgeted(batch, settings)

    def split(self, batch, b, build, among=True) -> None:
        rows, cols = batch.num_rows, batch.num_kv_tokens
        per = rows
        if b.budget is not None:
            gate = b.settings.profile.chunk_skip_elements
            asked = among if gate is None else among & (rows * cols >= gate)  # under the gate: one call
            whole = not_(asked)
            if any_of(asked):
                whole = whole | b.within(rows, cols, among=asked)
            cut = among & not_(whole)
            if any_of(cut):
                per = where(whole, rows, minimum(maximum(1, b.max_rows(cols, among=cut)), rows))
        build.add_rows(RowSlices(0, len(batch.requests), rows, per, cols), among=among)


ATOM_ROW_ALIGN = 128  # ATOM rounds its budget's rows down to a multiple of this (deepseek_v2.py:1713-1714)


def _power_of_two_at_most(n):
    """The largest power of two at most ``n`` (1 to 127; a number or an array of them)."""
    out = 1
    for p in (2, 4, 8, 16, 32, 64):
        out = where(n >= p, p, out)
    return out


def atom_rows_per_chunk(budget: int, cols, rows):
    """ATOM's query rows per ``fp8_mqa_logits`` call (ROCm/ATOM main ffdf3bb5
    ``atom/models/deepseek_v2.py:1699-1719``; the same lines in ``deepseek_v4.py:1662-1680`` and
    ``plugin/vllm/attention/layer_sparse_mla.py:352-400``): ``budget_rows = budget // (cols x 4)``,
    the unpadded fp32 row; every row in one call unless ``budget_rows < rows``, then
    ``budget_rows`` rounded down to a multiple of 128, or below 128 the largest power of two at
    most ``max(1, budget_rows)``.  ``budget`` in bytes (> 0; ATOM's 0 disables: no budget)."""
    budget_rows = budget // maximum(cols * FP32_BYTES, 1)
    aligned = budget_rows // ATOM_ROW_ALIGN * ATOM_ROW_ALIGN
    cut = where(budget_rows >= ATOM_ROW_ALIGN, aligned, _power_of_two_at_most(budget_rows))
    return where((cols > 0) & (budget_rows < rows), cut, rows)


def _atom_budgets_alike(per, rows, row_bytes) -> tuple:
    """[low, high) of the budgets that give ATOM the same rows per call (``atom_rows_per_chunk``)
    for one step: every budget from rows x row up is one call; a multiple of 128 holds until the
    next one, a power of two below 128 until its double (one row from no budget at all)."""
    if per >= rows:
        return rows * row_bytes, None
    above = per + ATOM_ROW_ALIGN if per >= ATOM_ROW_ALIGN else 2 * per
    return (per * row_bytes if per > 1 else 0), min(above, rows) * row_bytes


class AtomRows(ReleasePath):
    """ATOM's indexer prefill (``sparse_attn_indexer``, DeepSeek-V3.2 and GLM-5): one gather of the
    step's K (``total_kv``, the sum of its seq_lens), its query rows in order in slices of
    ``atom_rows_per_chunk`` rows, each against all ``total_kv`` columns; no logits while the step's
    longest sequence is at most top-k (``deepseek_v2.py:1638``).  Before its budget (0.1.3-0.1.5,
    chunker "none"), one call."""

    def __init__(self, budgeted: bool):
        self.budget_read = "given" if budgeted else "none"
        self.name = "atom-rows" if budgeted else "atom-one-call"

    def split(self, batch, b, build, among=True) -> None:
        rows, cols = batch.num_rows, batch.num_kv_tokens
        per = rows
        if b.budget is not None:
            per = atom_rows_per_chunk(b.budget, cols, rows)
            if b.tracks and among and rows > 0:
                b.narrow(*_atom_budgets_alike(per, rows, cols * FP32_BYTES))
        build.add_rows(RowSlices(0, len(batch.requests), rows, maximum(per, 1), cols), among=among & (rows > 0))


def mqa_logits_row_bytes(cols):
    """SGLang's ``mqa_logits_row_bytes``: a row of fp32 logits, its width aligned to 256 columns."""
    return cdiv(cols, 256) * 256 * FP32_BYTES


def mqa_logits_row_chunk(b: Budgeting, rows, cols, gate_cols, limit, among=True):
    """SGLang's rows per logits call under the budget read for the call (``b.budget``), as its C4
    and kpool paths cut them (``mqa_logits_utils.py``): every row in one call below the element gate
    (rows x ``gate_cols`` under ``chunk_skip_elements``: no budget read) or while the budget covers
    ``limit`` bytes, else ``max(budget // row_bytes, 1)`` rows (a row of ``cols`` aligned to 256
    columns); ``b``'s budget interval is narrowed to the budgets that cut the same."""
    budget, gate = b.budget, b.settings.profile.chunk_skip_elements
    if budget is None:
        return rows
    under = False if gate is None else rows * gate_cols < gate
    whole = under | (budget >= limit)
    row_bytes = mqa_logits_row_bytes(cols)
    per = where(whole, rows, maximum(budget // maximum(row_bytes, 1), 1))
    if b.tracks and among and not under:  # one step: the budgets that cut it the same
        if whole:
            b.narrow(limit, None)
        else:
            b.narrow(per * row_bytes if budget >= row_bytes else 0,
                     min(limit, (budget // row_bytes + 1) * row_bytes))
    return per


def sglang_c4_width(profile, batch):
    """(where the step takes the non-paged sub-path, its logits columns, the width the budget gate
    reads) of SGLang's C4 indexer.  Paged: every row against the batch's page table, ``ceil(max
    seq_len / page) x entries per page`` columns (``PagedIndexerMetadata.max_compressed_seq_len``);
    non-paged (one request, at least ``compressed_nonpaged_min_rows`` query rows): ``max_seqlen_k``,
    its ``seq_len // ratio`` entries rounded up to the page's entries (``_get_nonpaged_indexer_plan``)."""
    ratio, page = batch.kv_ratio, profile.compressed_page_tokens
    entries = page // ratio
    longest = batch.longest_tokens
    paged = cdiv(longest, page) * entries
    least = profile.compressed_nonpaged_min_rows
    final = longest // ratio
    if least is None or len(batch.requests) != 1:
        return False, paged, paged
    own = (batch.num_rows >= least) & (final > 0)
    return own, where(own, cdiv(final, entries) * entries, paged), paged


def sglang_c4_call(profile, batch) -> tuple:
    """(sub-path, logits columns, the width the budget gate reads) of SGLang's C4 indexer for one
    step (``sglang_c4_width``), the sub-path "paged" or "non-paged"."""
    own, cols, gate_cols = sglang_c4_width(profile, batch)
    return where(own, "non-paged", "paged"), cols, gate_cols


class SglangC4(ReleasePath):
    """SGLang's C4 indexer, every query row against the step's one width (``sglang_c4_width``).
    0.5.12-0.5.20 (``compressed_budget_rule`` "none"): one call over all the rows, whatever the
    budget.  0.5.21-0.5.23: one budget per forward (``PagedIndexerMetadata``: none below the element
    gate, rows x paged width), the rows cut into slices of ``max(budget // row_bytes, 1)`` where the
    logits break the budget (paged: ``plan_indexer_row_chunks``, chunking when rows x cols x 4 >
    budget; non-paged: ``mqa_logits_rows_per_chunk`` when rows x row_bytes > budget); each chunk's
    logits freed before the next is allocated.  No skip: every step computes its logits."""

    name = "sglang-c4"

    def __init__(self, budgeted: bool):
        self.budget_read = "given" if budgeted else "none"

    def skips(self, batch, settings):
        return False

    def unbudgeted(self, batch, settings) -> bool:
        return True  # no budget: one call (the release's own None, as in a graph-backed forward)

    def refusal(self, engine) -> str:
        return (f"{engine.name} has no logits budget on its C4 path (every query row in one call): "
                "budget_bytes must be None")

    def split(self, batch, b, build, among=True) -> None:
        own, cols, gate_cols = sglang_c4_width(b.settings.profile, batch)
        rows = batch.num_rows
        # paged: chunked when rows x cols x 4 breaks the budget; non-paged: when rows x row_bytes does
        limit = where(own, rows * mqa_logits_row_bytes(cols), rows * cols * FP32_BYTES)
        per = mqa_logits_row_chunk(b, rows, cols, gate_cols, limit, among)
        build.add_rows(RowSlices(0, len(batch.requests), rows, per, cols, kv=batch.num_kv_tokens, compressed=True),
                       among=among)


class SglangC4Hip(ReleasePath):
    """SGLang 0.5.23's C4 indexer on ROCm by default (the FP8 indexer: the FP4 one is opt-in): every
    query row of the step in one call against the paged width (``sglang_c4_width``'s paged columns,
    ``ceil(longest seq_len / 256) x 64``), no non-paged sub-path (``_can_use_nonpaged_indexer``
    refuses HIP) and no budget read (``PagedIndexerMetadata`` leaves its schedule None on HIP, so
    ``rows_per_chunk`` stays None).  ``_aiter_fp8_paged_mqa_logits`` allocates the logits itself,
    ``[rows, cols]`` fp32 unaligned (its rule "aiter-unaligned"), fresh on every layer's call and
    freed when the call's top-k returns; aiter's paged kernel fills them.  No skip."""

    name = "sglang-c4-hip"
    budget_read = "none"
    rocm_kernel = "deepgemm_fp8_paged_mqa_logits"

    def skips(self, batch, settings):
        return False

    def refusal(self, engine) -> str:
        return (f"{engine.name} reads no logits budget on its C4 path on ROCm (every query row in one call): "
                "budget_bytes must be None")

    def split(self, batch, b, build, among=True) -> None:
        _, _, paged = sglang_c4_width(b.settings.profile, batch)
        rows = batch.num_rows
        # compressed=False: the allocation is SGLang's own [rows, cols], not DeepGEMM's aligned layout
        build.add_rows(RowSlices(0, len(batch.requests), rows, rows, paged, kv=batch.num_kv_tokens), among=among)


def sglang_kpool_cols(batch, page_entries: int = KPOOL_INDEX_PAGE_ENTRIES):
    """The columns of SGLang 0.5.23's kpool logits for one step: every request's ``seq_len //
    pool`` pooled entries rounded up to whole pages of ``page_entries`` (the index page of 64
    pooled entries), summed over the step (``kpool_plan._append_local_rows``: ``pool_pages_i =
    ceil((seq_len // kpool) / index_page_size)``; ``ragged_total_k_rows = total_pool_pages x
    index_page_size``)."""
    return sum(cdiv(s, page_entries) for s in batch.seq_lens) * page_entries


class SglangKpool(ReleasePath):
    """SGLang 0.5.23's kpool indexer on an extend step (``_get_topk_ragged_kpool_plan``): every
    query row of the step against the whole step's pooled K (``sglang_kpool_cols``) in one
    ``fp8_mqa_logits`` call, or, where the logits break the budget read for the call
    (``_mqa_logits_row_chunks``: none below the element gate; chunked when rows x cols x 4 >
    budget), in slices of ``max(budget // row_bytes, 1)`` rows (``row_bytes``: a row aligned to
    256 columns), each chunk's logits freed before the next (``_kpool_topk_by_row_chunks``); none
    while the step's longest sequence is at most top-k tokens (``dsa_indexer_kpool.py:1774-1778``)."""

    name = "sglang-kpool"

    def unbudgeted(self, batch, settings) -> bool:
        return True  # no budget: one call

    def split(self, batch, b, build, among=True) -> None:
        rows = batch.num_rows
        cols = sglang_kpool_cols(batch)
        per = mqa_logits_row_chunk(b, rows, cols, cols, rows * cols * FP32_BYTES, among)
        # fp8_mqa_logits without max_seqlen_k: DeepGEMM's [M, N] layout (dsa_indexer_kpool.py:916-967)
        build.add_rows(RowSlices(0, len(batch.requests), rows, per, cols, kv=batch.num_kv_tokens), among=among)


def trtllm_kpool_cols(settings) -> int:
    """The columns of TensorRT-LLM's kpool scores: the block table's pooled capacity,
    ``ceil(block_tables.shape[1] x tokens_per_block / kpool)``, the table as wide as the model's
    longest sequence (the KV block size divides max_model_len: any power of two up to 2^20 does
    for GLM-5.3-Flash's 1,048,576), so ``ceil(max_model_len / kpool)`` whatever the step holds."""
    preset = settings.preset
    return cdiv(preset.max_model_len, preset.kv_ratio)


class TrtllmKpool(ReleasePath):
    """TensorRT-LLM's kpool indexer on a context step (``Glm5NextSparseAttention.forward_prefill``):
    every context row of the step in one ``kpool_score`` call, ``torch.empty(rows, pools, float32)``
    with ``pools`` the block table's pooled capacity (``trtllm_kpool_cols``), no row chunks and no
    element cap; the kernel reads the pooled cache in place (no K gathered).  No budget is read,
    and no skip (taken as none)."""

    name = "trtllm-kpool"
    budget_read = "any"

    def skips(self, batch, settings):
        return False

    def split(self, batch, b, build, among=True) -> None:
        rows = batch.num_rows
        cols = trtllm_kpool_cols(b.settings)
        build.add_rows(RowSlices(0, len(batch.requests), rows, maximum(rows, 1), cols, kv=0,
                                 alloc_bytes=lambda n: n * cols * FP32_BYTES), among=among & (rows > 0))


def token_chunks(batch, chunk_rows) -> list[tuple]:
    """TensorRT-LLM's chunks of a step, as ``(r0, r1, q0, q1, K, there)``: requests [r0, r1)
    packed whole while their query rows fit ``chunk_rows`` (q0 = 0, q1 = their rows, K all of
    theirs), a request longer than that alone, cut into blocks of ``chunk_rows`` rows (r1 = r0 + 1,
    rows [q0, q1) of its own, K up to the block's last row); ``there``: the steps that have the
    chunk (arrays of steps: each its own)."""
    out = []
    open_, first, rows, kv = False, 0, 0, 0
    for i, r in enumerate(batch.requests):
        q = r.query_len
        long_ = q > chunk_rows
        joins = open_ & not_(long_) & (rows + q <= chunk_rows)
        close = open_ & not_(joins)
        if any_of(close):
            out.append((first, i, 0, rows, kv, close))
        if any_of(long_):
            for k in range(largest(where(long_, cdiv(q, chunk_rows), 0))):  # its blocks
                q0 = k * chunk_rows
                q1 = minimum(q0 + chunk_rows, q)
                out.append((i, i + 1, q0, q1, r.window(q1), long_ & (q0 < q)))
        open_, first = joins | not_(long_), where(joins, first, i)
        rows, kv = where(joins, rows + q, q), where(joins, kv + r.seq_len, r.seq_len)
    if any_of(open_):
        out.append((first, len(batch.requests), 0, rows, kv, open_))
    return out


class TrtllmTokens(ReleasePath):
    """TensorRT-LLM: chunks of query rows (``token_chunks``, at the rows the step's longest K picks,
    ``EngineProfile.chunk_rows_for``), each chunk's logits in tiles of at most ``budget // 4 // K``
    rows (the element cap; a tile of one row where even one is wider).  A step that is one chunk
    with nothing cached runs one call without tiles; chunks without K compute no logits.  Before the
    element cap (``budget_rule`` "none"), no tiles."""

    name = "trtllm-tokens"

    def __init__(self, budgeted: bool):
        self.budget_read = "given" if budgeted else "none"

    def split(self, batch, b, build, among=True) -> None:
        chunks = token_chunks(batch, b.settings.profile.chunk_rows_for(batch.longest))
        one_pass = sum(there * 1 for *_, there in chunks) == 1
        for r in batch.requests:
            one_pass = one_pass & (r.context_len == 0)
        for r0, r1, q0, q1, kv, there in chunks:
            present = among & there & (kv > 0)  # nothing to score yet: the engine fills the rows' top-k with -1
            if not any_of(present):
                continue
            rows = q1 - q0
            per, over = rows, False
            if b.budget is not None:
                tiled = present & not_(one_pass)
                fits = b.max_rows(kv, among=tiled)
                per, over = where(one_pass, rows, maximum(1, minimum(rows, fits))), tiled & (fits < 1)
            build.add_rows(RowSlices(r0, r1, rows, per, kv, q0=q0, over=over), among=present)


def vllm_qsa_table_columns(settings) -> int:
    """vLLM 0.33.0's ``page_table.shape[1] * k_cache.shape[1]`` for QSA's compressed cache: the
    block table's width (``get_block_table_width(cdiv(max_model_len, block), block)``, aligned to
    128 tokens) times the compressed states per block (``block // ratio``)."""
    preset = settings.preset
    block, ratio = preset.kv_block, preset.kv_ratio
    blocks = cdiv(preset.max_model_len, block)
    return align(blocks, 128 // math.gcd(128, block)) * (block // ratio)


def vllm_qsa_width(settings, batch):
    """vLLM 0.33.0's QSA logits width: ``round_up(cdiv(max_seq_len, ratio), 64)``, at least 64 and
    at most the block table's columns (``qsa_select_paged_prefill``)."""
    width = align(cdiv(batch.longest_tokens, batch.kv_ratio), 64)
    return minimum(maximum(64, width), vllm_qsa_table_columns(settings))


class VllmQsa(ReleasePath):
    """vLLM 0.33.0's prefill path for Qwen's QSA indexer (``qsa_select_paged_prefill``): every
    prefill row of the step in one call against one width W (``vllm_qsa_width``), in slices of
    ``max(1, budget // (W x 4))`` rows, each a ``[rows, W]`` view of one fp32 workspace of
    ``max(budget, table columns x 4)`` bytes allocated per call: every slice's allocation is that
    workspace; the kernel reads the paged cache (no K gathered).  It never skips the logits."""

    name = "vllm-qsa"

    def skips(self, batch, settings):
        return False

    def check_budget(self, batch, budget, settings) -> None:
        if budget is None:
            raise ValueError(f"{settings.profile.name}'s QSA path chunks every step against a budget: "
                             "budget_bytes must be > 0")

    def split(self, batch, b, build, among=True) -> None:
        rows, budget = batch.num_rows, b.budget
        width = vllm_qsa_width(b.settings, batch)
        row = width * FP32_BYTES
        per = maximum(1, budget // row)
        table = vllm_qsa_table_columns(b.settings) * FP32_BYTES
        if b.tracks and among:
            # the same slices for budgets in [per x row, (per + 1) x row) (one row below 2 rows), and
            # for every budget from rows x row up; the workspace is the budget itself above the table
            b.narrow(per * row if per > 1 else 0, (per + 1) * row if per < rows else None)
            b.narrow(budget, budget + 1) if budget >= table else b.narrow(0, table)
        workspace = maximum(budget, table) // FP32_BYTES * FP32_BYTES  # q.new_empty(budget_bytes // 4, float32)
        build.add_rows(RowSlices(0, len(batch.requests), rows, per, width, kv=0, alloc_bytes=lambda n: workspace),
                       among=among & (rows > 0))


class SglangQsa(VllmQsa):
    """SGLang 0.5.23's prefill path for Qwen's QSA indexer (``QSAIndexer.select_prefill_tokens``):
    every row against the batch's longest ``seq_len // ratio`` blocks, in slices of ``min(rows,
    max(m, (budget // (W x 4)) // m x m))`` rows (m = 128 / H), each ``[rows rounded up to m, W]``
    fp32, deleted before the next; none when every sequence is shorter than one block.  Its budget
    is a constant of its own (``EngineProfile.qsa_budget_mib``)."""

    name = "sglang-qsa"

    def split(self, batch, b, build, among=True) -> None:
        rows, budget, width = batch.num_rows, b.budget, batch.longest
        m = max(1, 128 // b.model.index_heads)
        per_row = width * FP32_BYTES
        k = maximum(1, budget // maximum(per_row, 1) // m)  # slices of k x m rows
        per = minimum(rows, k * m)
        if b.tracks and among and width > 0:
            if rows <= m:
                b.narrow(0, None)
            elif per == rows:
                b.narrow(align(rows, m) * per_row, None)
            else:
                b.narrow(k * m * per_row if k > 1 else 0, (k + 1) * m * per_row)
        build.add_rows(RowSlices(0, len(batch.requests), rows, per, width, kv=batch.num_kv_tokens,
                                 alloc_bytes=lambda n: align(n, m) * per_row), among=among & (rows > 0) & (width > 0))


class SglangV41Torch(ReleasePath):
    """SGLang 0.5.23's torch indexer for DeepSeek-V4.1 on SM90 (``engines.v41``): request by
    request, its ``lc = seq_len // ratio`` K positions (none: no scores), its scores ``width`` wide
    (``torch_width``), its rows in chunks of ``torch_rows_per_chunk(heads, width)``; no budget read,
    no skip."""

    name = "sglang-v41-torch"
    budget_read = "any"

    def skips(self, batch, settings):
        return False

    def split(self, batch, b, build, among=True) -> None:
        heads = b.model.index_heads
        for i, lc in enumerate(batch.seq_lens):
            present = among & (lc > 0)  # prefill_requests skips a request with nothing visible yet
            if any_of(present):
                width = torch_width(lc)
                build.add_rows(RowSlices(i, i + 1, batch.query_lens[i], torch_rows_per_chunk(heads, width), width,
                                         kv=lc, compressed=batch.kv_ratio != 1), among=present)


@functools.lru_cache(maxsize=256)
def release_path(settings: PlanSettings) -> ReleasePath:
    """The release's own path for these settings' model (``settings.profile``), the one place it is
    chosen: QSA's and DeepSeek-V4.1's paths where the model has them, SGLang's kpool and C4 paths and
    TensorRT-LLM's kpool path for pooled and compressed K, else the release's chunker (ATOM's own)."""
    profile, preset = settings.profile, settings.preset
    if preset.qsa:
        return VllmQsa() if profile.qsa_path == "vllm-qsa" else SglangQsa()
    if settings.v41_path == "torch":
        return SglangV41Torch()
    pooled, compressed = preset.pooled, preset.kv_ratio != 1
    if pooled and compressed and profile.engine == "sglang" and profile.pooled_kv:
        return SglangKpool()
    if pooled and compressed and profile.pooled_one_call:
        return TrtllmKpool()
    if profile.own_rocm_c4(preset, settings.gpu_preset):
        return SglangC4Hip()
    if compressed and profile.engine == "sglang" and profile.compressed_kv and not pooled:
        return SglangC4(not profile.compressed_one_call)
    if profile.engine == "atom":
        return AtomRows(profile.budget_rule != "none")
    if profile.chunker in ("workspace", "logits-budget"):
        return VllmChunker(profile.chunker == "logits-budget")
    if profile.chunker == "tokens":
        return TrtllmTokens(profile.budget_rule != "none")
    return SglangRows(profile.chunker != "none")


def skips_logits(engine, batch, topk: int, pooled: bool = False):
    """Where the release computes no logits for the step and selects every K entry: SGLang's DSA
    indexer when every sequence is at most top-k (its C4 path has no such skip); vLLM's compressed
    indexers from 0.27.0 (``compressed_skip_short``) when the longest compressed K is
    (TensorRT-LLM's compressed path computes them: its V4
    config leaves skip_indexer_for_short_seqs off).  A pooled indexer (GLM-5.3-Flash's kpool, top-k
    in tokens) skips them on vLLM 0.33.0 and SGLang 0.5.23 while the step's longest sequence is at
    most top-k tokens (vLLM ``models/glm5next/nvidia/sparse_indexer.py:280-293``; SGLang
    ``dsa_indexer_kpool.py:1774-1778``)."""
    if pooled:
        if not (batch.kv_ratio != 1 and engine.pooled_kv) or engine.pooled_one_call:
            return False  # TensorRT-LLM's kpool path: no skip read (taken as none)
        return batch.longest_tokens <= topk
    sglang_c4 = batch.kv_ratio != 1 and engine.engine == "sglang" and engine.compressed_kv
    vllm_compressed = (batch.kv_ratio != 1 and engine.compressed_kv and engine.engine == "vllm"
                       and engine.compressed_skip_short)
    if (engine.skip_logits_at_or_below_topk and not sglang_c4) or vllm_compressed:
        return batch.longest <= topk
    return False

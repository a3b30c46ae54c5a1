"""Exact bytes of a plan on the GPU (per GPU, per indexer call).

Two kinds of memory:
- persistent, reserved once by the engine before it sizes its KV cache: the K
  gather workspace (workspace_tokens x (D + 4) bytes) and the top-k output
  buffer ([max_num_batched_tokens, topk] int32);
- transient, per chunk: DeepGEMM's padded logits allocation, the chunk's
  metadata (ks and ke per row, and the gather's slot map per KV token when the
  chunk gathers) and the temporaries of the backend that runs it (by default
  the reference backend's bounded tiles, ``memory.tiling``).

A plan made on an engine release (``Plan.engine``) says where that engine keeps
its buffers: a K workspace allocated per chunk (vLLM before 0.13.0: a K buffer
per chunk) or per call (SGLang: the whole batch's K, with its top-k output, held
for the call: ``MemoryReport.call``), and whether a chunk's logits stay alive
until the next chunk's are allocated (SGLang's chunk loop: ``ChunkMemory.held``).

This is what ``indexer_lib.run.executor`` allocates; the tracer
(``indexer_lib.run.tracer``) checks the two agree.

``fits(plan, free_bytes)`` compares the transient peak with the memory free at
run time, because the persistent buffers were taken before "free" was read.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Callable

from ..caches import PerSettings
from ..padding import get_rules, unpadded_logits_bytes
from ..plan import Chunk, Plan, PlanShapes, merged_chunks
from ..plan.chunks import made_fast
from .engine_path import call_metadata_bytes, chunk_path_bytes, engine_path, workspace_path_bytes
from .tiling import merge_temporaries_bytes, reference_phase_bytes, reference_temporaries_bytes
from .topk_bytes import topk_temporaries_bytes
from ..shapes import ModelPreset, get_model

INT32_BYTES = 4

# bytes of executor temporaries for one chunk
TemporariesFn = Callable[[Chunk, ModelPreset], int]
DEFAULT_BACKEND = "reference"
# "engine": the engine release's own kernels and metadata (``engine_path``)
MODELLED_BACKENDS = ("reference", "deepgemm", "engine")


def logits_bytes(chunk: Chunk, plan: Plan, padded: bool = True) -> int:
    """The chunk's logits allocation: ``logits_rows`` (a fixed-shape chunk's padded
    rows, else its rows) x its width, with DeepGEMM's padding unless ``padded`` is False."""
    if not padded:
        return unpadded_logits_bytes(chunk.logits_rows, chunk.logits_cols)
    rules = get_rules(plan.deepgemm_version)
    heads = get_model(plan.model).index_heads
    return rules.logits_bytes(chunk.logits_rows, chunk.logits_cols, heads, chunk.compressed)


def padded_inputs_bytes(chunk: Chunk, model: ModelPreset) -> int:
    """DeepGEMM allocates its own logits, so a fixed-shape chunk pads its inputs instead:
    q ``[R, H, D]`` fp8, weights ``[R, H]`` fp32 and ks/ke ``[R]`` int32 with R = alloc_rows
    (the extra rows have empty windows).  0 for a chunk that is not padded."""
    rows = chunk.alloc_rows
    if rows is None or rows <= chunk.num_rows:
        return 0
    h, d = model.index_heads, model.head_dim
    return rows * h * d + 4 * rows * h + 2 * INT32_BYTES * rows


def running_topk_bytes(rows: int, topk: int) -> int:
    """A column-split chunk's merge state: the running float32 values ``[rows, k]``
    and the range's int32 candidate indices ``[rows, k]`` (the running indices are
    the persistent top-k buffer's rows)."""
    return 2 * 4 * rows * topk


def metadata_bytes(chunk: Chunk) -> int:
    """ks and ke per row; when the chunk gathers, one cache slot per gathered KV token."""
    gathered = chunk.kv_tokens if chunk.gather else 0
    return INT32_BYTES * (2 * chunk.num_rows + gathered)


def workspace_bytes(plan: Plan, workspace_tokens: int | None = None) -> int:
    """fp8 K + fp32 scale per token (default: the plan's workspace, as vLLM reserves it)."""
    tokens = plan.workspace_tokens if workspace_tokens is None else workspace_tokens
    return _k_bytes(plan.model, tokens)


def topk_buffer_bytes(plan: Plan, topk_rows: int | None = None, topk: int | None = None) -> int:
    rows = plan.batch.num_rows if topk_rows is None else topk_rows
    k = get_model(plan.model).topk if topk is None else topk
    return _topk_bytes(rows, k)


def _k_bytes(model: str, tokens: int) -> int:
    return tokens * get_model(model).k_bytes_per_token


def _topk_bytes(rows: int, k: int) -> int:
    return rows * k * INT32_BYTES


def backend_temporaries(plan: Plan, backend, topk: int) -> TemporariesFn:
    """A backend's temporaries as a per-chunk function: ``backend`` is the name of a
    backend the model counts by formula (``reference``, ``deepgemm``; no torch
    needed), or a backend object, which counts its own (``temporaries_bytes``)."""
    if backend == "reference":
        return lambda chunk, model: reference_temporaries_bytes(plan, chunk, topk)
    if backend == "deepgemm":
        # the H200 path, modelled without DeepGEMM installed (the backend counts the same)
        return lambda chunk, model: deepgemm_temporaries_bytes(chunk, model, topk)
    if isinstance(backend, str):
        raise ValueError(f"unknown backend {backend!r}: must be one of {', '.join(MODELLED_BACKENDS)} "
                         "(or a backend object)")
    return lambda chunk, model: backend.temporaries_bytes(plan, chunk, topk)


# the window top-k's temporaries bound, cached per shape (sweeps repeat shapes)
_window_topk_bound = lru_cache(maxsize=1 << 16)(topk_temporaries_bytes)


def deepgemm_temporaries_bytes(chunk: Chunk, model: ModelPreset, topk: int,
                               block_bytes: int | None = None) -> int:
    """The deepgemm backend's temporaries for one chunk: DeepGEMM keeps its work on
    chip, so the window top-k's bound, or a fixed-shape chunk's padded inputs (they
    are not alive at the same time).  ``block_bytes``: the top-k's row block (default
    the backend's)."""
    bound = _window_topk_bound
    args = (chunk.num_rows, chunk.logits_cols, topk) + (() if block_bytes is None else (block_bytes,))
    return max(bound(*args), padded_inputs_bytes(chunk, model))


def phase_temporaries(plan: Plan, backend, topk: int, temporaries: TemporariesFn | None = None):
    """A backend's temporaries per chunk as (during the logits call, during top-k)."""
    if temporaries is None and backend == "reference":
        return lambda chunk, model: reference_phase_bytes(plan, chunk, topk)
    if temporaries is None and backend == "deepgemm":
        # DeepGEMM computes on chip; a fixed-shape chunk's padded inputs live through its call
        return lambda chunk, model: (padded_inputs_bytes(chunk, model),
                                     _window_topk_bound(chunk.num_rows, chunk.logits_cols, topk))
    whole = temporaries or backend_temporaries(plan, backend, topk)
    return lambda chunk, model: (whole(chunk, model),) * 2  # one figure: counted in both phases


@dataclass(frozen=True)
class ChunkMemory:
    logits: int
    metadata: int
    temporaries: int  # peak of the backend's (and, column-split, the merge's) temporaries
    running: int = 0  # column-split chunks: running values + candidate indices
    kv_buffer: int = 0  # a K buffer allocated for this chunk alone (workspace per chunk)
    held: int = 0  # the previous chunk's logits, alive while this chunk's logits are computed
    held_with: int = 0  # this chunk's temporaries during its logits call (next to ``held``)

    @property
    def total(self) -> int:
        return (self.logits + self.metadata + self.running + self.kv_buffer
                + max(self.temporaries, self.held + self.held_with))


@dataclass(frozen=True)
class MemoryReport:
    workspace: int  # the K workspace reserved once (0 where it is allocated per chunk or call)
    topk_buffer: int  # the top-k output reserved once (0 where it is allocated per call)
    chunks: tuple[ChunkMemory, ...]
    call: int = 0  # allocated by the call and held through it (an engine's per-call K and top-k)

    @property
    def persistent(self) -> int:
        return self.workspace + self.topk_buffer

    @cached_property  # a frontier asks each report for its peak several times
    def peak_transient(self) -> int:
        return self.call + max((c.total for c in self.chunks), default=0)

    @property
    def worst_chunk(self) -> int:
        totals = [c.total for c in self.chunks]
        return totals.index(max(totals))

    @property
    def peak(self) -> int:
        return self.persistent + self.peak_transient


def memory_report(
    plan: Plan,
    topk_rows: int | None = None,
    temporaries: TemporariesFn | None = None,
    padded: bool = True,
    backend=DEFAULT_BACKEND,
    topk: int | None = None,
    workspace_tokens: int | None = None,
) -> MemoryReport:
    """Bytes of every buffer the plan needs.

    ``topk_rows``: rows of the persistent top-k buffer (vLLM: max_num_batched_tokens;
    default: the step's rows).  ``padded=False`` counts logits as plain M x N x 4.
    Temporaries: ``temporaries(chunk, model)`` if given, else those of ``backend``
    (a name or a Backend; default the reference backend that ``run.executor`` runs;
    None: no temporaries, as if logits and top-k were in-place kernels).
    ``topk``: k (default: the model's).  ``workspace_tokens``: the K workspace
    really allocated (default: the plan's, as on cuda and meta).
    """
    model = get_model(plan.model)
    k = model.topk if topk is None else topk
    if backend == "engine" and temporaries is None:
        return _engine_report(plan, model, topk_rows, k, padded, workspace_tokens)
    phases = phase_temporaries(plan, backend, k, temporaries) \
        if plan.logits_alive > 1 and (temporaries or backend is not None) else None
    shareable = temporaries is None and backend in ("deepgemm", None)
    if temporaries is None and backend is not None:
        temporaries = backend_temporaries(plan, backend, k)
    per_chunk_kv = plan.workspace_lifetime == "chunk"
    # the deepgemm backend's temporaries (and none) depend on a chunk's shape alone, so chunks
    # of one shape (a request's equal row slices) are counted once; the reference backend's
    # depend on the chunk's windows, and a backend object counts its own: never shared
    by_shape: dict | None = {} if shareable else None
    made: dict[tuple, ChunkMemory] = {}  # equal records are one object (a frontier makes millions)
    chunks = []
    previous = 0
    for c, merged in zip(plan.chunks, merged_chunks(plan.chunks)):
        shape = (c.num_rows, c.logits_cols, c.compressed, c.alloc_rows, c.kv_tokens, c.gather, merged)
        known = by_shape.get(shape) if by_shape is not None else None
        if known is None:
            known = _chunk_bytes(c, merged, plan, model, padded, temporaries, k, per_chunk_kv)
            if by_shape is not None:
                by_shape[shape] = known
        logits, metadata, tmp, running, kv_buffer = known
        held = held_with = 0
        if plan.logits_alive > 1 and previous:
            held = previous
            held_with = phases(c, model)[0] if phases else 0
        fields = (logits, metadata, tmp, running, kv_buffer, held, held_with)
        record = made.get(fields)
        if record is None:
            record = made[fields] = ChunkMemory(*fields)
        chunks.append(record)
        previous = logits
    workspace, topk_out, call = _buffers(plan, topk_rows, k, workspace_tokens)
    return MemoryReport(workspace, topk_out, tuple(chunks), call)


def _buffers(plan: Plan, topk_rows: int | None, k: int, workspace_tokens: int | None) -> tuple[int, int, int]:
    """(workspace reserved once, top-k output reserved once, bytes held through the call)."""
    tokens = plan.workspace_tokens if workspace_tokens is None else workspace_tokens
    rows = plan.batch.num_rows if topk_rows is None else topk_rows
    return _buffer_bytes(plan.model, tokens, plan.workspace_lifetime, plan.topk_output, rows, k)


@lru_cache(maxsize=1 << 12)  # a frontier asks it once per step plan, with a few settings
def _buffer_bytes(model: str, workspace_tokens: int, workspace_lifetime: str, topk_output: str,
                  topk_rows: int, k: int) -> tuple[int, int, int]:
    workspace = 0 if workspace_lifetime == "chunk" else _k_bytes(model, workspace_tokens)
    topk_out = _topk_bytes(topk_rows, k)
    call = 0
    if workspace_lifetime == "call":
        workspace, call = 0, call + workspace
    if topk_output == "call":
        topk_out, call = 0, call + topk_out
    return workspace, topk_out, call


SHAPE_BACKENDS = ("deepgemm", None)  # backends whose temporaries depend on a chunk's shape alone
# per plan settings, the transient bytes per shape (or pair): a frontier meets tens of thousands
_shape_totals = PerSettings(limit=1 << 18)


def shapes_peak(shaped: PlanShapes, topk_rows: int | None = None, backend: str | None = "deepgemm",
                padded: bool = True) -> tuple[int, int]:
    """(transient peak, peak) of a plan from its chunks' distinct shapes (``plan_shapes``):
    what ``memory_report`` gives the whole plan, for a plan whose chunks' bytes depend on
    their shapes alone (a ``SHAPE_BACKENDS`` backend), or, where the previous chunk's logits
    are alive while a chunk's are computed (``Plan.logits_alive``), on its shape and the
    previous chunk's (``PlanShapes.pairs``)."""
    plan = shaped.plan
    rows = plan.batch.num_rows if topk_rows is None else topk_rows
    return ShapesPeak(plan, backend, padded)(shaped.shapes, shaped.pairs, plan.workspace_tokens, rows)


class ShapesPeak:
    """``shapes_peak`` for the many plans of one set of plan settings (a frontier's): ``plan`` is
    any plan with them (its batch, budget and chunks are not read)."""

    def __init__(self, plan: Plan, backend: str | None = "deepgemm", padded: bool = True):
        if backend not in SHAPE_BACKENDS:
            raise ValueError(f"backend {backend!r}: shapes_peak counts one of "
                             f"{', '.join(str(b) for b in SHAPE_BACKENDS)} (the others read each chunk's windows)")
        self.plan, self.backend, self.padded = plan, backend, padded
        self.per_chunk_kv = plan.workspace_lifetime == "chunk"
        self.settings = (plan.model, plan.deepgemm_version, padded, backend, self.per_chunk_kv, plan.logits_alive)
        self.topk = get_model(plan.model).topk

    def __call__(self, shapes: tuple, pairs: tuple | None, workspace_tokens: int, topk_rows: int) -> tuple[int, int]:
        """(transient peak, peak) of a plan of these settings with these distinct shapes (and pairs of
        neighbours), its workspace and the rows of its top-k buffer."""
        plan = self.plan
        if plan.logits_alive == 1:
            keys, total_of = shapes, _shape_total
        elif pairs is not None:
            keys, total_of = pairs, _pair_total
        else:
            raise ValueError(f"logits_alive {plan.logits_alive}: a held chunk's bytes depend on its neighbour "
                             "(plan_shapes gives the pairs of neighbours)")
        totals = _shape_totals.of(self.settings)
        largest = 0
        for shape in keys:
            total = totals.get(shape)
            if total is None:
                total = _shape_totals.add(totals, shape, total_of(plan, shape, self.padded, self.backend,
                                                                  self.per_chunk_kv))
            if total > largest:
                largest = total
        workspace, topk_out, call = _buffer_bytes(plan.model, workspace_tokens, plan.workspace_lifetime,
                                                  plan.topk_output, topk_rows, self.topk)
        transient = call + largest
        return transient, workspace + topk_out + transient


def _shape_total(plan: Plan, shape: tuple, padded: bool, backend: str | None, per_chunk_kv: bool) -> int:
    """Transient bytes of a chunk of this shape in this plan (``memory_report``'s count)."""
    return _pair_total(plan, (None, shape), padded, backend, per_chunk_kv)


def _pair_total(plan: Plan, pair: tuple, padded: bool, backend: str | None, per_chunk_kv: bool) -> int:
    """Transient bytes of a chunk of one shape after a chunk of another (None: the plan's first
    chunk), whose logits are alive while this chunk's are computed where the plan keeps two
    chunks' logits (``memory_report``'s count)."""
    before, shape = pair
    model = get_model(plan.model)
    k = model.topk
    chunk = _shape_chunk(shape)
    temporaries = backend_temporaries(plan, backend, k) if backend is not None else None
    logits, metadata, tmp, running, kv_buffer = _chunk_bytes(chunk, False, plan, model, padded, temporaries, k,
                                                             per_chunk_kv)
    held = held_with = 0
    if before is not None:  # only the pairs of a plan that keeps two chunks' logits have one
        held = logits_bytes(_shape_chunk(before), plan, padded)
        if held and backend is not None:
            held_with = phase_temporaries(plan, backend, k)(chunk, model)[0]
    return made_fast(ChunkMemory, logits=logits, metadata=metadata, temporaries=tmp, running=running,
                     kv_buffer=kv_buffer, held=held, held_with=held_with).total


def _shape_chunk(shape: tuple) -> Chunk:
    """A chunk of this shape (``plan_shapes``' key), for the memory model's per-chunk counts; made
    without its __init__ (a grid meets tens of thousands of shapes)."""
    rows, cols, compressed, alloc_rows, kv_tokens, gather = shape
    return made_fast(Chunk, requests=(0, 1), rows=(0, rows), token_start=0, token_end=rows, kv_tokens=kv_tokens,
                     logits_cols=cols, logits_bytes=0, gather=gather, over_budget=False, compressed=compressed,
                     kv_start=0, alloc_rows=alloc_rows)


def _engine_report(plan: Plan, model: ModelPreset, topk_rows: int | None, k: int, padded: bool,
                   workspace_tokens: int | None) -> MemoryReport:
    """The engine's own path (``engine_path``): its metadata for the whole call, row_ends next
    to each chunk's logits, its zeros during the top-k, the previous chunk's logits held while
    the next are allocated (``logits_alive``)."""
    profile = engine_path(plan)
    chunks = []
    previous = 0
    for c in plan.chunks:
        logits = logits_bytes(c, plan, padded)
        with_logits, during_topk = chunk_path_bytes(c, profile.path)
        held = previous if plan.logits_alive > 1 else 0
        chunks.append(ChunkMemory(logits, with_logits, during_topk, held=held))
        previous = logits
    tokens = plan.workspace_tokens if workspace_tokens is None else workspace_tokens
    workspace = workspace_path_bytes(profile, tokens, model.head_dim, model.k_bytes_per_token - model.head_dim)
    return MemoryReport(workspace, topk_buffer_bytes(plan, topk_rows, k), tuple(chunks),
                        call=call_metadata_bytes(plan, profile.path))


def _chunk_bytes(c: Chunk, merged: bool, plan: Plan, model: ModelPreset, padded: bool,
                 temporaries, k: int, per_chunk_kv: bool) -> tuple[int, int, int, int, int]:
    """(logits, metadata, temporaries, running, kv_buffer) of one chunk."""
    tmp = temporaries(c, model) if temporaries else 0
    running = 0
    if merged:
        # held through the range's logits, top-k and merge; the merge runs after
        # the backend's temporaries are gone
        running = running_topk_bytes(c.num_rows, k)
        if temporaries:
            tmp = max(tmp, merge_temporaries_bytes(c.num_rows, k))
    kv_buffer = c.kv_tokens * model.k_bytes_per_token if per_chunk_kv and c.gather else 0
    return logits_bytes(c, plan, padded), metadata_bytes(c), tmp, running, kv_buffer


def peak_bytes(plan: Plan, **kwargs) -> int:
    """Peak bytes of the indexer call: persistent buffers plus the largest chunk."""
    return memory_report(plan, **kwargs).peak


def fits(plan: Plan, free_bytes: int, **kwargs) -> bool:
    """Whether every chunk's transient bytes fit in memory free at run time."""
    return memory_report(plan, **kwargs).peak_transient <= free_bytes

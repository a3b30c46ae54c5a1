"""Exact bytes of a plan on the GPU (per GPU, per indexer call).

Two kinds of memory:
- persistent, reserved once by the engine before it sizes its KV cache: the K
  gather workspace (workspace_tokens x (D + 4) bytes) and the top-k output
  buffer ([max_num_batched_tokens, topk] int32);
- transient, per chunk: DeepGEMM's padded logits allocation, the chunk's
  metadata (ks and ke per row, and the gather's slot map per KV token when the
  chunk gathers) and the temporaries of whatever runs it (``PlanSettings.temporaries``:
  the reference executor's bounded tiles, ``memory.tiling``; the H200 path's window
  top-k; or the engine release's own path, ``memory.replayed``).

A plan made on an engine release says where that engine keeps its buffers: a K
workspace allocated per chunk (vLLM before 0.13.0: a K buffer per chunk) or per call
(SGLang: the whole batch's K, with its top-k output, held for the call:
``MemoryReport.call``), and whether a chunk's logits stay alive until the next chunk's
are allocated (the engines' chunk loops: ``ChunkMemory.held``).

This is what ``indexer_lib.run.executor`` allocates; the tracer
(``indexer_lib.run.tracer``) checks the two agree.

``fits(plan, free_bytes)`` compares the transient peak with the memory free at
run time, because the persistent buffers were taken before "free" was read.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import FP32_BYTES, INT32_BYTES
from ..padding import unpadded_logits_bytes
from ..plan import Chunk, Plan, PlanSettings, merged_chunks
from ..presets import ModelPreset
from .chunk_bytes import (deepgemm_phases, kernel_inputs_of, kv_bytes_per_gathered_token, logits_alloc,
                          metadata_bytes_of, padded_inputs_of, staged_alloc, transient_total)
from .replayed import (call_metadata_bytes, chunk_path_bytes, replayed_profile, upcast_weights_bytes,
                       workspace_path_bytes)
from .tiling import merge_temporaries_bytes, reference_phase_bytes, reference_temporaries_bytes
from .topk_bytes import topk_counter

FROM_SETTINGS = "the plan's settings"  # memory_report's default: the temporaries the plan names


def logits_bytes(chunk: Chunk, plan: Plan, count_padding: bool = True) -> int:
    """The chunk's logits allocation: ``logits_rows`` (a fixed-shape chunk's padded rows, else
    its rows) x its width, with DeepGEMM's padding unless ``count_padding`` is False; a chunk whose
    allocation is not rows x cols (QSA's paths: ``Chunk.alloc_bytes``) takes that."""
    if chunk.alloc_bytes is None and not count_padding:
        return unpadded_logits_bytes(chunk.logits_rows, chunk.logits_cols)
    # what the kernel allocates: DeepGEMM's padded layout (SGLang's torch scores for DeepSeek-V4.1: plain)
    return logits_alloc(plan.settings.counters[1], chunk.num_rows, chunk.logits_cols, chunk.compressed,
                        chunk.alloc_rows, chunk.alloc_bytes)


def staged_bytes(chunk: Chunk, plan: Plan, count_padding: bool = True) -> int:
    """The kernel's own logits, alive through the chunk's logits call next to ``logits_bytes``
    (DeepGEMM's bf16 before the release's fp32 copy: ``PlanSettings.staged``); 0 elsewhere, and
    counted unpadded (``count_padding`` False) as the engines count: M x N x 4 alone."""
    if not count_padding:
        return 0
    return staged_alloc(plan.settings.staged, chunk.num_rows, chunk.logits_cols, chunk.compressed,
                        chunk.alloc_rows, chunk.alloc_bytes)


def padded_inputs_bytes(chunk: Chunk, model: ModelPreset) -> int:
    """A fixed-shape chunk's inputs padded up to its rows (``chunk_bytes.padded_inputs_of``)."""
    return padded_inputs_of(chunk.num_rows, chunk.alloc_rows, model.index_heads, model.head_dim)


def running_topk_bytes(rows: int, topk: int) -> int:
    """A column-split chunk's merge state: the running float32 values ``[rows, k]``
    and the range's int32 candidate indices ``[rows, k]`` (the running indices are
    the persistent top-k buffer's rows)."""
    return (FP32_BYTES + INT32_BYTES) * rows * topk


def metadata_bytes(chunk: Chunk) -> int:
    """ks and ke per row; when the chunk gathers, one cache slot per gathered KV token."""
    return metadata_bytes_of(chunk.num_rows, chunk.kv_tokens if chunk.gather else 0)


def workspace_bytes(settings: PlanSettings, workspace_tokens) -> int:
    """fp8 K + fp32 scale per token of the K workspace (a number, or an array of them)."""
    return workspace_tokens * settings.preset.k_bytes_per_token


def topk_buffer_bytes(topk_rows, k: int) -> int:
    """The top-k output: ``topk_rows`` rows of ``k`` int32 indices (numbers or arrays)."""
    return topk_rows * k * INT32_BYTES


def deepgemm_temporaries_bytes(chunk: Chunk, model: ModelPreset, topk: int,
                               block_bytes: int | None = None) -> int:
    """The deepgemm backend's temporaries for one chunk at their peak (``deepgemm_phases``: the
    window top-k's bound, or a fixed-shape chunk's padded inputs, never alive at the same time).
    ``block_bytes``: the top-k's row block (default the backend's)."""
    return max(_deepgemm_phases(chunk, model, topk, block_bytes))


def _deepgemm_phases(chunk: Chunk, model: ModelPreset, topk: int, block_bytes: int | None = None) -> tuple[int, int]:
    count = topk_counter(topk) if block_bytes is None else topk_counter(topk, block_bytes)
    return deepgemm_phases(chunk.num_rows, chunk.logits_cols, chunk.alloc_rows, model.index_heads, model.head_dim,
                           count)


class Temporaries:
    """What runs a chunk allocates besides its logits and metadata: ``whole(chunk)``, its peak,
    and ``phases(chunk)``, (during the logits call, during the top-k), which matters where the
    previous chunk's logits are still alive during the logits call.  This base counts none (as
    if logits and top-k were in-place kernels)."""

    counts = False  # whether it counts any (a column-split chunk's merge adds its own then)
    by_shape = True  # whether a chunk's count depends on its shape alone (not its rows' windows)

    def __init__(self, plan: Plan, topk: int):
        self.plan, self.topk, self.model = plan, topk, plan.settings.preset

    def whole(self, chunk: Chunk) -> int:
        return 0

    def phases(self, chunk: Chunk) -> tuple[int, int]:
        return 0, 0


class ReferenceTemporaries(Temporaries):
    """The CPU reference executor's bounded tiles (``memory.tiling``)."""

    counts = True
    by_shape = False  # its tiles follow each row's window

    def whole(self, chunk):
        return reference_temporaries_bytes(self.plan, chunk, self.topk)

    def phases(self, chunk):
        return reference_phase_bytes(self.plan, chunk, self.topk)


class DeepgemmTemporaries(Temporaries):
    """The H200 path, modelled without DeepGEMM installed: DeepGEMM computes on chip; a
    fixed-shape chunk's padded inputs (and, on ROCm, what aiter's kernel copies to its padded rows)
    live through its call, then the window top-k runs."""

    counts = True

    def __init__(self, plan: Plan, topk: int):
        super().__init__(plan, topk)
        self.count = topk_counter(topk)
        self.rules = plan.settings.rules
        self.known: dict[tuple, tuple[int, int]] = {}  # a plan's chunks share a few shapes: each counted once

    def whole(self, chunk):
        return max(self.phases(chunk))

    def phases(self, chunk):
        key = (chunk.num_rows, chunk.logits_cols, chunk.alloc_rows)
        phases = self.known.get(key)
        if phases is None:
            phases = self.known[key] = deepgemm_phases(*key, self.model.index_heads, self.model.head_dim, self.count,
                                                       self.rules)
        return phases


class BackendTemporaries(Temporaries):
    """A kernels backend object, which counts its own (``temporaries_bytes``): one figure,
    counted in both phases."""

    counts = True
    by_shape = False  # the backend counts as it likes

    def __init__(self, plan: Plan, topk: int, backend):
        super().__init__(plan, topk)
        self.backend = backend

    def whole(self, chunk):
        return self.backend.temporaries_bytes(self.plan, chunk, self.topk)

    def phases(self, chunk):
        return (self.whole(chunk),) * 2


NAMED_TEMPORARIES = {"reference": ReferenceTemporaries, "deepgemm": DeepgemmTemporaries, None: Temporaries}


def temporaries_of(plan: Plan, temporaries, topk: int) -> Temporaries:
    """A name of ``NAMED_TEMPORARIES`` or a backend object, as a ``Temporaries``."""
    if isinstance(temporaries, str) or temporaries is None:
        if temporaries not in NAMED_TEMPORARIES:
            raise ValueError(f"unknown temporaries {temporaries!r}: must be one of reference, deepgemm, "
                             "engine, None (or a backend object)")
        return NAMED_TEMPORARIES[temporaries](plan, topk)
    return BackendTemporaries(plan, topk, temporaries)


@dataclass(frozen=True)
class ChunkMemory:
    logits: int
    metadata: int
    temporaries: int  # peak of the backend's (and, column-split, the merge's) temporaries
    running: int = 0  # column-split chunks: running values + candidate indices
    kv_buffer: int = 0  # a K buffer allocated for this chunk alone (workspace per chunk)
    held: int = 0  # the previous chunk's logits, alive while this chunk's logits are computed
    held_with: int = 0  # this chunk's temporaries during its logits call (next to ``held``, ``staged``)
    staged: int = 0  # the kernel's own logits before the engine's copy (``logits``), during the call

    @property
    def total(self) -> int:
        return transient_total(self.logits, self.metadata, self.temporaries, self.running, self.kv_buffer,
                               self.held, self.held_with, self.staged)


def chunk_memory(plan: Plan, chunk: Chunk, held: int, merged: bool, temporaries: Temporaries,
                 count_padding: bool = True) -> ChunkMemory:
    """One chunk's bytes, next to ``held`` bytes of the previous chunk's logits (0 where none are
    alive); ``merged``: one of several column ranges of its rows (kv-split)."""
    k = temporaries.topk
    tmp = temporaries.whole(chunk)
    running = 0
    if merged:
        # held through the range's logits, top-k and merge; the merge runs after the backend's
        # temporaries are gone
        running = running_topk_bytes(chunk.num_rows, k)
        if temporaries.counts:
            tmp = max(tmp, merge_temporaries_bytes(chunk.num_rows, k))
    kv_buffer = chunk.kv_tokens * kv_bytes_per_gathered_token(plan.settings) if chunk.gather else 0
    staged = staged_bytes(chunk, plan, count_padding)
    held_with = temporaries.phases(chunk)[0] if held or staged else 0
    # a record made with one dict update (a dataclass's __init__ sets each field): a long run
    # counts a hundred thousand plans
    memory = object.__new__(ChunkMemory)
    memory.__dict__.update(logits=logits_bytes(chunk, plan, count_padding), metadata=metadata_bytes(chunk),
                           temporaries=tmp, running=running, kv_buffer=kv_buffer, held=held, held_with=held_with,
                           staged=staged)
    return memory


@dataclass(frozen=True)
class MemoryReport:
    workspace: int  # the K workspace reserved once (0 where it is allocated per chunk or call)
    topk_buffer: int  # the top-k output reserved once (0 where it is allocated per call)
    chunks: tuple[ChunkMemory, ...]
    call: int = 0  # allocated by the call and held through it (an engine's per-call K and top-k)

    @property
    def persistent(self) -> int:
        return self.workspace + self.topk_buffer

    @property
    def peak_transient(self) -> int:
        return self.call + max((c.total for c in self.chunks), default=0)

    @property
    def peak(self) -> int:
        return self.persistent + self.peak_transient


def buffer_bytes(settings: PlanSettings, workspace_tokens, topk_rows, k: int) -> tuple:
    """(workspace reserved once, top-k output reserved once, bytes held through the call) under
    these settings (numbers, or arrays of them)."""
    lifetime = settings.workspace_lifetime
    workspace = 0 if lifetime == "chunk" else workspace_bytes(settings, workspace_tokens)
    topk_out = topk_buffer_bytes(topk_rows, k)
    call = 0
    if lifetime == "call":
        workspace, call = 0, call + workspace
    if settings.topk_output == "call":
        topk_out, call = 0, call + topk_out
    return workspace, topk_out, call


def memory_report(plan: Plan, topk_rows: int | None = None, temporaries=FROM_SETTINGS, topk: int | None = None,
                  workspace_tokens: int | None = None, count_padding: bool = True) -> MemoryReport:
    """Bytes of every buffer the plan needs.

    ``topk_rows``: rows of the persistent top-k buffer (vLLM: max_num_batched_tokens;
    default: the step's rows).  ``temporaries``: whose temporaries each chunk adds (default:
    the plan's settings'; a name of ``PlanSettings.temporaries`` or a kernels backend object,
    which counts its own).  ``topk``: k (default: the model's).  ``workspace_tokens``: the K
    workspace really allocated (default: the plan's, as on cuda and meta).
    ``count_padding=False`` counts logits as plain M x N x 4.
    """
    k = plan.settings.preset.topk if topk is None else topk
    rows = plan.batch.num_rows if topk_rows is None else topk_rows
    tokens = plan.workspace_tokens if workspace_tokens is None else workspace_tokens
    if temporaries is FROM_SETTINGS:
        temporaries = plan.settings.temporaries
    if temporaries == "replay":
        return _engine_report(plan, rows, k, tokens, count_padding)
    counted = temporaries_of(plan, temporaries, k)
    # a plan's equal chunks (a request's row slices: hundreds at a small budget) cost the same:
    # counted once per shape where what runs them counts by shape
    known: dict | None = {} if counted.by_shape else None
    chunks = []
    previous = 0
    for c, merged in zip(plan.chunks, merged_chunks(plan.chunks)):
        held = previous if plan.logits_alive > 1 else 0
        key = (c.num_rows, c.logits_cols, c.compressed, c.alloc_rows, c.kv_tokens, c.gather, merged, held)
        memory = None if known is None else known.get(key)
        if memory is None:
            memory = chunk_memory(plan, c, held, merged, counted, count_padding)
            if known is not None:
                known[key] = memory
        chunks.append(memory)
        previous = memory.logits
    workspace, topk_out, call = buffer_bytes(plan.settings, tokens, rows, k)
    return MemoryReport(workspace, topk_out, tuple(chunks), call)


def _engine_report(plan: Plan, topk_rows: int, k: int, workspace_tokens: int, count_padding: bool) -> MemoryReport:
    """The engine's own code as replayed (``replayed_profile``): its metadata for the whole call, row_ends next
    to each chunk's logits, its zeros during the top-k, the previous chunk's logits held while
    the next are allocated (``logits_alive``) with what the logits kernel copies then (on ROCm)."""
    profile = replayed_profile(plan)
    model = plan.settings.preset
    chunks = []
    previous = 0
    for c in plan.chunks:
        logits = logits_bytes(c, plan, count_padding)
        with_logits, during_topk = chunk_path_bytes(c, profile.path)
        if plan.settings.upcast:
            with_logits += upcast_weights_bytes(c.num_rows, model.index_heads)
        held = previous if plan.logits_alive > 1 else 0
        # what the logits kernel copies to its padded rows, alive through its call (aiter's FlyDSL)
        copies = kernel_inputs_of(c.num_rows, c.alloc_rows, model.index_heads, model.head_dim,
                                  plan.settings.rules) if count_padding else 0
        chunks.append(ChunkMemory(logits, with_logits, during_topk, held=held, held_with=copies,
                                  staged=staged_bytes(c, plan, count_padding)))
        previous = logits
    workspace = workspace_path_bytes(profile, workspace_tokens, model.head_dim,
                                     model.k_bytes_per_token - model.head_dim)
    return MemoryReport(workspace, topk_buffer_bytes(topk_rows, k), tuple(chunks),
                        call=call_metadata_bytes(plan, profile.path))


def peak_bytes(plan: Plan, **kwargs) -> int:
    """Peak bytes of the indexer call: persistent buffers plus the largest chunk."""
    return memory_report(plan, **kwargs).peak


def fits(plan: Plan, free_bytes: int, **kwargs) -> bool:
    """Whether every chunk's transient bytes fit in memory free at run time."""
    return memory_report(plan, **kwargs).peak_transient <= free_bytes

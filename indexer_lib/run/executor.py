"""Run a chunk plan on tensors as a serving engine would, instrumented per chunk.

Per chunk: row/column metadata from the plan (``indexer_lib.run.metadata``), the K
of the chunk's requests gathered into a workspace from offset 0 (skipped on a
later row slice of the same requests), logits by the backend, top-k written
into a persistent ``[rows, topk]`` int32 buffer pre-filled with -1.

Memory, as the memory model counts it (``indexer_lib.memory``):
- persistent: the K workspace ``[W, D]`` fp8 + ``[W]`` fp32 and the top-k buffer;
- per chunk: ks and ke (int32 per row), the gather's slot map (int32 per
  gathered token, only when the chunk gathers), the padded logits and the
  backend's temporaries.  Everything of a chunk is freed before the next.

Column-split chunks (kv-split): several chunks score the same query rows over
consecutive KV column ranges.  Per row the executor keeps a running top-k --
float32 values (a ``[rows, k]`` transient that lives from the group's first
chunk to its last) and int32 indices (the rows of the persistent top-k buffer)
-- and merges each range's top-k into it exactly (``kernels.merge``); the range's
top-k goes to a ``[rows, k]`` int32 candidate buffer first.  Fixed-shape chunks
allocate ``[alloc_rows, W]`` logits whatever their rows.

Engine releases (``Plan.engine``).  Where the engine allocates its K buffer per
chunk (``Plan.workspace_lifetime == "chunk"``, vLLM before 0.13.0) each chunk gathers
into its own buffer, freed with the chunk; where the engine's chunk loop keeps a
chunk's logits until the next chunk's are allocated (``Plan.logits_alive == 2``,
SGLang), so does the executor.

Workspace size.  vLLM reserves ``plan.workspace_tokens`` (40 x max_model_len,
825 MiB for DeepSeek-V3.2) once.  On cuda and meta that is what we allocate, so
measurements and traces describe the engine.  On the CPU it would cost 825 MiB
of RAM for nothing, so by default we allocate only the largest chunk's N; the
result says which size was used and the memory model takes it as
``workspace_tokens``.  Either way every gather writes from offset 0.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from .inputs import IndexerInputs, input_shapes
from .kernels import Backend, get_backend
from .kernels.merge import merge_running_topk
from .metadata import chunk_windows, column_windows, kv_slots
from ..plan import Chunk, Plan, merged_chunks
from ..presets import get_model


@dataclass
class ChunkRun:
    """What one chunk did."""

    index: int
    rows: int
    width: int  # logits columns (N, a KV prefix, or max_seqlen_k)
    kv_tokens: int
    gather: bool
    compressed: bool
    logits_bytes: int  # the padded logits allocation, read from the tensor's storage
    metadata_bytes: int  # ks, ke and (when gathering) the slot map
    seconds: float  # wall time, synchronised on CUDA
    cuda_max_allocated: int | None = None  # torch.cuda.max_memory_allocated during the chunk
    cuda_reserved: int | None = None  # torch.cuda.memory_reserved after the chunk
    traced_peak: int | None = None  # live bytes at the chunk's peak (set by the tracer)
    kv_start: int = 0  # first workspace column scored (column-split chunks)
    merged: bool = False  # its top-k was merged into the rows' running top-k

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class ExecutionResult:
    topk_buffer: torch.Tensor  # [topk_rows, k] int32, persistent
    num_rows: int  # M of the step
    topk: int
    workspace_tokens: int  # tokens the K workspace was allocated with
    persistent_bytes: int  # workspace + top-k buffer
    device: str
    backend: str
    chunks: list[ChunkRun] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def indices(self) -> torch.Tensor:
        """``[M, k]`` int32 top-k of the step's rows (relative to each row's ks)."""
        return self.topk_buffer[:self.num_rows]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    # always a fresh device allocation (also on the CPU), so every device counts the same bytes
    return torch.from_numpy(array).to(device, copy=True)


def check_inputs_match(plan: Plan, inputs: IndexerInputs) -> None:
    """ValueError when the inputs were made for another batch or model than the plan."""
    if plan.batch.requests != inputs.batch.requests:
        raise ValueError(
            f"plan: made for a batch of {len(plan.batch.requests)} requests "
            f"(query_lens {list(plan.batch.query_lens)}, seq_lens {list(plan.batch.seq_lens)}), but the inputs are "
            f"for {len(inputs.batch.requests)} requests (query_lens {list(inputs.batch.query_lens)}, "
            f"seq_lens {list(inputs.batch.seq_lens)})")
    for name, (shape, dtype) in input_shapes(plan.batch, plan.model).items():
        t = getattr(inputs, name)
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"inputs.{name}: expected {dtype} {list(shape)} for {plan.model} and the plan's "
                             f"batch, got {t.dtype} {list(t.shape)}")


def _span(chunk: Chunk) -> int:
    """Workspace tokens a chunk's logits call reads: its requests' K, or the fixed
    width of a fixed-shape chunk (columns past its requests hold stale K that no
    window reads)."""
    if chunk.compressed:
        return chunk.kv_tokens
    return max(chunk.kv_tokens, chunk.kv_start + chunk.logits_cols)


def workspace_size(plan: Plan, device: torch.device, workspace_tokens: int | None = None) -> int:
    """Tokens the executor's K workspace holds: see the module docstring."""
    needed = max((_span(c) for c in plan.chunks), default=1)  # a span covers what is gathered
    if needed > plan.workspace_tokens:
        raise ValueError(f"plan: a chunk gathers or spans {needed} KV tokens, but the workspace holds "
                         f"{plan.workspace_tokens} (workspace_tokens)")
    if workspace_tokens is None:
        return needed if device.type == "cpu" else plan.workspace_tokens
    if workspace_tokens < needed:
        raise ValueError(f"workspace_tokens {workspace_tokens}: the plan gathers up to {needed} tokens")
    return workspace_tokens


class _Workspace:
    """The persistent K gather workspace; remembers whose K it holds."""

    def __init__(self, tokens: int, head_dim: int, device: torch.device):
        self.k = torch.empty((tokens, head_dim), dtype=torch.float8_e4m3fn, device=device)
        self.scale = torch.empty((tokens,), dtype=torch.float32, device=device)
        self.holds: tuple[int, int] | None = None  # requests [r0, r1) gathered last

    @property
    def nbytes(self) -> int:
        return self.k.untyped_storage().nbytes() + self.scale.untyped_storage().nbytes()


def execute(plan: Plan, inputs: IndexerInputs, backend="reference", device=None, topk: int | None = None,
            topk_rows: int | None = None, workspace_tokens: int | None = None,
            observer=None) -> ExecutionResult:
    """Run ``plan`` on ``inputs``; returns the top-k buffer and per-chunk figures.

    ``backend``: a name (``reference``, ``deepgemm``) or a Backend; a name gets
    the plan's DeepGEMM version.  ``device``: where to run (default: the inputs').
    ``topk``: k (default: the model's).  ``topk_rows``: rows of the persistent
    top-k buffer (vLLM: max_num_batched_tokens; default: the step's rows).
    ``observer``: optional object with ``chunk_start(index)`` and
    ``chunk_end(index, ChunkRun)`` (the tracer).
    """
    if plan.batch.kv_ratio != 1:
        raise ValueError(f"{plan.model}: its indexer scores {plan.batch.kv_ratio}x-compressed K, which the "
                         "executor does not compute (the plan and its memory are modelled: indexer-lab plan)")
    if plan.kind_plans or plan.settings.kind is not None:
        raise ValueError(f"{plan.model}: its indexer kinds see the step differently (K compressed by 2, "
                         "candidate consumers, each request's last rows), which the executor does not compute "
                         "(the plan and its memory are modelled: indexer-lab plan)")
    check_inputs_match(plan, inputs)
    model = get_model(plan.model)
    device = inputs.device if device is None else torch.device(device)
    if inputs.device != device:
        inputs = inputs.to(device)
    backend = get_backend(backend, deepgemm_version=plan.deepgemm_version) \
        if backend == "reference" else get_backend(backend)
    backend.check_plan(plan)
    k = model.topk if topk is None else topk
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"topk {k!r}: must be a whole number >= 1")
    rows = plan.batch.num_rows
    topk_rows = rows if topk_rows is None else topk_rows
    if topk_rows < rows:
        raise ValueError(f"topk_rows {topk_rows}: the step has {rows} rows")
    merged = check_column_groups(plan)
    if not plan.chunks and rows:
        raise ValueError(f"plan: no chunks for {rows} rows ({plan.engine} computes no logits for this "
                         "step and selects every token): nothing to execute")
    per_chunk = plan.workspace_lifetime == "chunk"
    tokens = workspace_size(plan, device, workspace_tokens)

    start = time.perf_counter()
    workspace = None if per_chunk else _Workspace(tokens, model.head_dim, device)
    out = torch.full((topk_rows, k), -1, dtype=torch.int32, device=device)
    persistent = (0 if per_chunk else workspace.nbytes) + out.untyped_storage().nbytes()
    result = ExecutionResult(out, rows, k, 0 if per_chunk else tokens, persistent, str(device), backend.name)
    group = _RunningTopk()
    call = _Call(plan, inputs, backend, out, k)
    held = [] if plan.logits_alive > 1 else None  # the previous chunk's logits, where the engine keeps them
    for i, chunk in enumerate(plan.chunks):
        if observer is not None:
            observer.chunk_start(i)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        t0 = time.perf_counter()
        last = i + 1 == len(plan.chunks) or _rows_of(plan.chunks[i + 1]) != _rows_of(chunk)
        run = _run_chunk(call, i, chunk, _Workspace(_span(chunk), model.head_dim, device) if per_chunk else workspace,
                         group if merged[i] else None, last, held)
        _sync(device)
        run.seconds = time.perf_counter() - t0
        if device.type == "cuda":
            run.cuda_max_allocated = torch.cuda.max_memory_allocated(device)
            run.cuda_reserved = torch.cuda.memory_reserved(device)
        result.chunks.append(run)
        if observer is not None:
            observer.chunk_end(i, run)
    _sync(device)
    result.seconds = time.perf_counter() - start
    return result


def _rows_of(chunk: Chunk) -> tuple[int, int]:
    return chunk.token_start, chunk.token_end


def check_column_groups(plan: Plan) -> list[bool]:
    """Which chunks are column ranges of a row group (``plan.merged_chunks``); ValueError
    unless each group is consecutive, of one request, full layout, with ranges in order."""
    merged = merged_chunks(plan.chunks)
    seen: set[tuple[int, int]] = set()
    previous = None
    for i, (c, m) in enumerate(zip(plan.chunks, merged)):
        rows = _rows_of(c)
        if not m:
            if c.kv_start:
                raise ValueError(f"chunk {i}: kv_start {c.kv_start} but no other chunk scores its rows")
            previous = None
            continue
        if c.num_requests != 1 or c.compressed:
            raise ValueError(f"chunk {i}: a column-split chunk must hold one request in the full "
                             f"layout (requests {list(c.requests)}, compressed {c.compressed})")
        if previous is not None and _rows_of(previous) == rows:
            if c.kv_start != previous.kv_start + previous.logits_cols:
                raise ValueError(f"chunk {i}: column range starts at {c.kv_start}, the previous "
                                 f"one ended at {previous.kv_start + previous.logits_cols}")
        else:
            if rows in seen or c.kv_start != 0:
                raise ValueError(f"chunk {i}: the column ranges of rows {list(rows)} must be "
                                 "consecutive chunks starting at column 0")
            seen.add(rows)
        previous = c
    return merged


class _RunningTopk:
    """The float32 running values of the row group being merged (indices: the top-k buffer)."""

    def __init__(self):
        self.rows: tuple[int, int] | None = None
        self.values: torch.Tensor | None = None


class _Call(NamedTuple):
    """What every chunk of one indexer call shares."""

    plan: Plan
    inputs: IndexerInputs
    backend: Backend
    out: torch.Tensor  # the top-k output buffer
    k: int


def _run_chunk(call: _Call, i: int, chunk: Chunk, workspace: _Workspace, group: _RunningTopk | None = None,
               last: bool = True, held: list | None = None) -> ChunkRun:
    """One chunk; every tensor it makes is a local, freed when it returns (the running
    values of a column group live until the group's last chunk; with ``held``, the
    logits live until the next chunk's logits are allocated)."""
    plan, inputs, backend, out, k = call
    device = out.device
    t0, t1 = chunk.token_start, chunk.token_end
    if group is not None and group.rows != (t0, t1):
        group.rows = (t0, t1)
        group.values = torch.full((chunk.num_rows, k), -math.inf, dtype=torch.float32, device=device)
    host_ks, host_ke = chunk_windows(plan.batch, chunk)
    if group is not None:
        host_ks, host_ke = column_windows(host_ks, host_ke, chunk.kv_start, chunk.logits_cols)
    ks = _device_tensor(host_ks, device)
    ke = _device_tensor(host_ke, device)
    metadata = ks.untyped_storage().nbytes() + ke.untyped_storage().nbytes()
    n = chunk.kv_tokens
    if chunk.gather:
        slots = _device_tensor(kv_slots(plan.batch, chunk), device)
        if slots.shape[0] != n:
            raise ValueError(f"chunk {i}: kv_tokens {n} but its requests hold {slots.shape[0]} tokens")
        metadata += slots.untyped_storage().nbytes()
        # a gather kernel: workspace rows [0, n) from the cache slots, fp8 moved as bytes
        torch.index_select(inputs.k_cache.view(torch.uint8), 0, slots,
                           out=workspace.k.view(torch.uint8)[:n])
        torch.index_select(inputs.k_cache_scale, 0, slots, out=workspace.scale[:n])
        workspace.holds = chunk.requests
    elif workspace.holds != chunk.requests:
        raise ValueError(f"chunk {i}: skips the gather but the workspace holds requests "
                         f"{workspace.holds}, not {chunk.requests}")
    hints = {"host_windows": (host_ks, host_ke)}
    if chunk.kv_start:
        hints["kv_start"] = chunk.kv_start
    if chunk.alloc_rows is not None:
        hints["alloc_rows"] = chunk.alloc_rows
    rows = out[t0:t1]
    # a column range's own top-k goes to candidates first, then into the running top-k
    target = rows if group is None else torch.full((chunk.num_rows, k), -1, dtype=torch.int32,
                                                   device=device)
    span = _span(chunk)
    logits = backend.logits(inputs.q[t0:t1], workspace.k[:span], workspace.scale[:span],
                            inputs.weights[t0:t1], ks, ke, chunk.logits_cols, chunk.compressed, **hints)
    if held is not None:
        held[:] = [logits]  # drops the previous chunk's logits only now, as the engine's loop does
    hints.pop("kv_start", None)
    hints.pop("alloc_rows", None)
    result = backend.topk(logits, ks, ke, k, chunk.compressed, out=target, **hints)
    if result is not target:  # a backend that allocated its own result
        target.copy_(result)
    if group is not None:
        # ranges of one request start at workspace column 0 = its ks: a logits column
        # c of the range is index kv_start + c relative to ks
        merge_running_topk(group.values, rows, logits, target, chunk.kv_start)
        if last:
            group.rows = group.values = None
    return ChunkRun(i, chunk.num_rows, chunk.logits_cols, n, chunk.gather, chunk.compressed,
                    logits.untyped_storage().nbytes(), metadata, 0.0, kv_start=chunk.kv_start,
                    merged=group is not None)

"""Run a chunk plan on tensors as a serving engine would, instrumented per chunk.

Per chunk: row/column metadata from the plan (``indexer_lib.metadata``), the K
of the chunk's requests gathered into a workspace from offset 0 (skipped on a
later row slice of the same requests), logits by the backend, top-k written
into a persistent ``[rows, topk]`` int32 buffer pre-filled with -1.

Memory, as the memory model counts it (``indexer_lib.memory``):
- persistent: the K workspace ``[W, D]`` fp8 + ``[W]`` fp32 and the top-k buffer;
- per chunk: ks and ke (int32 per row), the gather's slot map (int32 per
  gathered token, only when the chunk gathers), the padded logits and the
  backend's temporaries.  Everything of a chunk is freed before the next.

Workspace size.  vLLM reserves ``plan.workspace_tokens`` (40 x max_model_len,
825 MiB for DeepSeek-V3.2) once.  On cuda and meta that is what we allocate, so
measurements and traces describe the engine.  On the CPU it would cost 825 MiB
of RAM for nothing, so by default we allocate only the largest chunk's N; the
result says which size was used and the memory model takes it as
``workspace_tokens``.  Either way every gather writes from offset 0.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .inputs import IndexerInputs
from .kernels import Backend, get_backend
from .metadata import chunk_windows, kv_slots
from .plan import Chunk, Plan
from .shapes import get_model


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
            f"(query_lens {plan.batch.query_lens}, seq_lens {plan.batch.seq_lens}), but the inputs are "
            f"for {len(inputs.batch.requests)} requests (query_lens {inputs.batch.query_lens}, "
            f"seq_lens {inputs.batch.seq_lens})")
    model = get_model(plan.model)
    rows, tokens = plan.batch.num_rows, plan.batch.num_kv_tokens
    expected = {
        "q": ((rows, model.index_heads, model.head_dim), torch.float8_e4m3fn),
        "weights": ((rows, model.index_heads), torch.float32),
        "k_cache": ((tokens, model.head_dim), torch.float8_e4m3fn),
        "k_cache_scale": ((tokens,), torch.float32),
    }
    for name, (shape, dtype) in expected.items():
        t = getattr(inputs, name)
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"inputs.{name}: expected {dtype} {list(shape)} for {plan.model} and the plan's "
                             f"batch, got {t.dtype} {list(t.shape)}")


def workspace_size(plan: Plan, device: torch.device, workspace_tokens: int | None = None) -> int:
    """Tokens the executor's K workspace holds: see the module docstring."""
    needed = max((c.kv_tokens for c in plan.chunks if c.gather), default=1)
    if needed > plan.workspace_tokens:
        raise ValueError(f"plan: a chunk gathers {needed} KV tokens, but the workspace holds "
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
    check_inputs_match(plan, inputs)
    model = get_model(plan.model)
    device = inputs.device if device is None else torch.device(device)
    if inputs.device != device:
        inputs = inputs.to(device)
    if not isinstance(backend, Backend):
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
    for i, c in enumerate(plan.chunks):
        if c.kv_start:
            raise ValueError(f"chunk {i}: column-split chunks (kv_start {c.kv_start}) are not supported")
    tokens = workspace_size(plan, device, workspace_tokens)

    start = time.perf_counter()
    workspace = _Workspace(tokens, model.head_dim, device)
    out = torch.full((topk_rows, k), -1, dtype=torch.int32, device=device)
    result = ExecutionResult(out, rows, k, tokens, workspace.nbytes + out.untyped_storage().nbytes(),
                             str(device), backend.name)
    for i, chunk in enumerate(plan.chunks):
        if observer is not None:
            observer.chunk_start(i)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        t0 = time.perf_counter()
        run = _run_chunk(i, plan, chunk, inputs, backend, workspace, out, k)
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


def _run_chunk(i: int, plan: Plan, chunk: Chunk, inputs: IndexerInputs, backend: Backend,
               workspace: _Workspace, out: torch.Tensor, k: int) -> ChunkRun:
    """One chunk; every tensor it makes is a local, freed when it returns."""
    device = out.device
    host_ks, host_ke = chunk_windows(plan.batch, chunk)
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
    t0, t1 = chunk.token_start, chunk.token_end
    hints = {"host_windows": (host_ks, host_ke)}
    logits = backend.logits(inputs.q[t0:t1], workspace.k[:n], workspace.scale[:n],
                            inputs.weights[t0:t1], ks, ke, chunk.logits_cols, chunk.compressed, **hints)
    rows = out[t0:t1]
    result = backend.topk(logits, ks, ke, k, chunk.compressed, out=rows, **hints)
    if result is not rows:  # a backend that allocated its own result
        rows.copy_(result)
    return ChunkRun(i, chunk.num_rows, chunk.logits_cols, n, chunk.gather, chunk.compressed,
                    logits.untyped_storage().nbytes(), metadata, 0.0)

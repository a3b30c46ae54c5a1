"""The ``trace`` mode: the executor's own peak bytes, without the memory.

The real executor (``executor.execute``) runs under a ``TorchDispatchMode`` that
sees every tensor an aten op returns.  A tensor whose storage is new and on
the traced device counts its storage's bytes until the storage dies (a weak
reference finalizer: CPython frees it the moment the last tensor or view goes).
On the ``meta`` device nothing is stored or computed, so a full-scale step
(one 64K prompt, 8,192 rows x 327,680 KV tokens) traces in a fraction of a
second per strategy.

What it counts: storages the executor and the backend create (workspace, top-k
buffer, metadata, logits, tiles).  Not counted: the inputs (the engine's q,
weights and KV cache exist before the indexer runs), kernels' internal scratch
that never becomes a tensor, and the CUDA caching allocator's rounding.
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .inputs import IndexerInputs, make_inputs
from ..plan import Plan
from .executor import ChunkRun, ExecutionResult, execute


class AllocationTracker(TorchDispatchMode):
    """Live bytes and their peak on one device type, following allocations and frees."""

    def __init__(self, device_type: str = "meta", record_events: bool = False):
        super().__init__()
        self.device_type = device_type
        # ("malloc", key, bytes) / ("free", key) in order, for the allocator model
        self.events: list[tuple] | None = [] if record_events else None
        self.live: dict[int, int] = {}  # storage id -> bytes
        self.current = 0
        self.peak = 0
        self.allocations = 0
        self.chunk_peak = 0  # peak live bytes since the current chunk started

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # storages the op was given (views, in-place and out= results reuse them)
        given = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs))
                 if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == self.device_type:
                self._track(t, given)
        return out

    def _track(self, t: torch.Tensor, given: set[int]) -> None:
        storage = t.untyped_storage()
        key = storage._cdata  # the StorageImpl, shared by every view of it
        if key in self.live or key in given:
            return
        nbytes = storage.nbytes()
        self.live[key] = nbytes
        if self.events is not None:
            self.events.append(("malloc", key, nbytes))
        self.current += nbytes
        self.allocations += 1
        self.peak = max(self.peak, self.current)
        self.chunk_peak = max(self.chunk_peak, self.current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key)
        if self.events is not None:
            self.events.append(("free", key))

    # the executor's observer hooks
    def chunk_start(self, index: int) -> None:
        self.chunk_peak = self.current

    def chunk_end(self, index: int, run: ChunkRun) -> None:
        run.traced_peak = self.chunk_peak


@dataclass
class TraceResult:
    peak_bytes: int  # live-bytes peak of the whole call, persistent buffers included
    persistent_bytes: int  # workspace + top-k buffer
    chunk_transient: list[int]  # per chunk: its peak minus the persistent bytes
    allocations: int  # storages created on the traced device
    seconds: float  # wall time of the traced run
    execution: ExecutionResult = field(repr=False)
    events: list[tuple] | None = field(default=None, repr=False)  # record_events=True

    @property
    def peak_transient(self) -> int:
        return max(self.chunk_transient, default=0)


def trace(plan: Plan, topk_rows: int | None = None, backend="reference", topk: int | None = None,
          device="meta", inputs: IndexerInputs | None = None, seed: int = 0,
          record_events: bool = False) -> TraceResult:
    """Run ``plan`` through the executor under the allocation tracker.

    ``device="meta"`` (default) costs no memory; another device runs for real
    (inputs drawn from ``seed`` unless given) and follows the same allocations.
    ``record_events``: keep the malloc/free stream (``allocator.replay`` reads it).
    On meta the reference backend runs each distinct tile shape once, so repeated
    same-size tile allocations are missing from the stream (a caching allocator
    serves them from the block the previous one freed).
    """
    device = torch.device(device)
    if inputs is None:
        inputs = make_inputs(plan.batch, plan.model, seed=seed, device=device)
    tracker = AllocationTracker(device.type, record_events)
    start = time.perf_counter()
    with tracker:
        result = execute(plan, inputs, backend=backend, device=device, topk=topk,
                         topk_rows=topk_rows, observer=tracker)
    seconds = time.perf_counter() - start
    transient = [run.traced_peak - result.persistent_bytes for run in result.chunks]
    return TraceResult(tracker.peak, result.persistent_bytes, transient, tracker.allocations,
                       seconds, result, tracker.events)


def trace_peak_bytes(plan: Plan, topk_rows: int | None = None, backend="reference",
                     topk: int | None = None) -> int:
    """Peak bytes of the executor running ``plan`` (persistent buffers included), traced on meta."""
    return trace(plan, topk_rows=topk_rows, backend=backend, topk=topk).peak_bytes

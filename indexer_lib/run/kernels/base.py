"""The interface every logits + top-k backend follows.

A backend computes one chunk's logits the way DeepGEMM's ``fp8_mqa_logits``
does (a ``[m, width]`` fp32 tensor whose row stride is padded like the DeepGEMM
version it follows) and a per-row top-k over ``[ks, ke)`` with indices relative
to ``ks``, padded with -1, ties broken towards the lower index.

The executor (``indexer_lib.run.executor``) calls, per chunk::

    backend.check_plan(plan)                                   # once per plan
    logits = backend.logits(q, k, k_scale, weights, ks, ke, width, compressed, **hints)
    backend.topk(logits, ks, ke, topk, compressed, out=out_rows, **hints)

Column-split chunks (kv-split) add ``kv_start=s``: k and k_scale are still the
workspace from row 0, the backend scores columns ``[s, s + width)`` and ks/ke are
windows in those columns (``metadata.column_windows``; empty where a row ends
before ``s``).  Fixed-shape chunks add ``alloc_rows=R``: the logits allocation
has R rows (before DeepGEMM's alignment) although only the first m are computed.
A backend says it takes them with ``supports_column_range`` / ``supports_alloc_rows``.

``hints`` holds ``host_windows=(ks, ke)``: the same windows as int32 numpy
arrays (the reference backend tiles by them; on the meta device the device
tensors hold no values).  ``out_rows`` is the chunk's slice of the persistent
top-k buffer, already filled with -1.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from ...plan import Chunk, Plan, PlanSettings, Strategy, get_strategy, merged_chunks


class Backend(ABC):
    #: name used to select the backend (``reference``, ``deepgemm``, ...)
    name: str = ""
    #: DeepGEMM version whose padding rules the logits allocation follows
    deepgemm_version: str = ""
    #: takes ``kv_start`` (column ranges of kv-split chunks)
    supports_column_range: bool = False
    #: takes ``alloc_rows`` (fixed-shape chunks' padded logits rows)
    supports_alloc_rows: bool = False

    def check_plan(self, plan: Plan) -> None:
        """ValueError when this backend cannot run ``plan`` as it was planned
        (its logits would not be padded like the plan's DeepGEMM version, or it
        cannot score a column range or pad the rows the plan asks for)."""
        if self.deepgemm_version and plan.deepgemm_version != self.deepgemm_version:
            raise ValueError(
                f"plan padded for DeepGEMM {plan.deepgemm_version}, but backend {self.name!r} follows "
                f"{self.deepgemm_version}: make the plan with deepgemm_version={self.deepgemm_version!r}")
        self.check_chunk_features(plan)

    def strategy(self, name: str) -> Strategy:
        """The strategy as this backend runs it (its build's layouts)."""
        return get_strategy(name)

    def plan_settings(self, model: str) -> PlanSettings:
        """Plan settings whose plans match this backend: its DeepGEMM build."""
        return PlanSettings(model, deepgemm_version=self.deepgemm_version)

    def check_chunk_features(self, plan: Plan) -> None:
        if not self.supports_column_range and any(merged_chunks(plan.chunks)):
            raise ValueError(f"backend {self.name!r} cannot score a KV column range: "
                             f"plan {plan.strategy!r} has column-split chunks")
        if not self.supports_alloc_rows and any(c.alloc_rows is not None for c in plan.chunks):
            raise ValueError(f"backend {self.name!r} cannot pad the logits rows: "
                             f"plan {plan.strategy!r} has fixed-shape chunks")

    @abstractmethod
    def logits(self, q, k, k_scale, weights, ks, ke, width: int, compressed: bool = False, **hints):
        """Logits of one chunk.

        q ``[m, H, D]`` float8_e4m3fn, k ``[n, D]`` float8_e4m3fn, k_scale ``[n]`` float32,
        weights ``[m, H]`` float32, ks/ke ``[m]`` int32 (workspace columns).
        Full layout: returns ``[m, width]`` with column j = workspace column j.
        Compressed layout: column c of row i = workspace column ks[i] + c.
        Values outside a row's window are unspecified.
        """

    @abstractmethod
    def topk(self, logits, ks, ke, k: int, compressed: bool = False, out=None, **hints):
        """``[m, k]`` int32: indices of the k largest logits of each row's window,
        relative to ks; -1 where the window has fewer than k columns; equal
        values: the lower index wins; sorted by value, descending.

        ``out``: an ``[m, k]`` int32 tensor already filled with -1 to write
        into and return (the executor's persistent top-k buffer); None: allocate.
        """

    def temporaries_bytes(self, plan: Plan, chunk: Chunk, topk: int) -> int:
        """Peak bytes of temporaries this backend holds while it runs ``chunk`` of
        ``plan``, beyond the logits, the chunk metadata and the persistent
        buffers (the memory model adds them)."""
        return 0

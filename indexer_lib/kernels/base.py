"""The interface every logits + top-k backend follows.

A backend computes one chunk's logits the way DeepGEMM's ``fp8_mqa_logits``
does (a ``[m, width]`` fp32 tensor whose row stride is padded like the DeepGEMM
version it follows) and a per-row top-k over ``[ks, ke)`` with indices relative
to ``ks``, padded with -1, ties broken towards the lower index.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from ..plan import Chunk
from ..shapes import ModelPreset


class Backend(ABC):
    #: name used to select the backend (``reference``, ``deepgemm``, ...)
    name: str = ""
    #: DeepGEMM version whose padding rules the logits allocation follows
    deepgemm_version: str = ""

    @abstractmethod
    def logits(self, q, k, k_scale, weights, ks, ke, width: int, compressed: bool = False):
        """Logits of one chunk.

        q ``[m, H, D]`` float8_e4m3fn, k ``[n, D]`` float8_e4m3fn, k_scale ``[n]`` float32,
        weights ``[m, H]`` float32, ks/ke ``[m]`` int32 (workspace columns).
        Full layout: returns ``[m, width]`` with column j = workspace column j.
        Compressed layout: column c of row i = workspace column ks[i] + c.
        Values outside a row's window are unspecified.
        """

    @abstractmethod
    def topk(self, logits, ks, ke, k: int, compressed: bool = False):
        """``[m, k]`` int32: indices of the k largest logits of each row's window,
        relative to ks; -1 where the window has fewer than k columns; equal
        values: the lower index wins; sorted by value, descending."""

    def temporaries_bytes(self, chunk: Chunk, model: ModelPreset, topk: int) -> int:
        """Bytes of temporaries this backend allocates for ``chunk`` beyond the
        logits and the chunk metadata (the memory model adds them)."""
        return 0

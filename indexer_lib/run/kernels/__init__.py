"""Logits + top-k backends, chosen by name.

Backends are imported only when asked for: importing this package needs no
torch, and a backend whose module or dependencies are missing (``deepgemm``
without a GPU build) does not break the others.
"""
from __future__ import annotations

import importlib

from ...checks import unknown_name
from .base import Backend

# name -> (module in this package, class); modules are imported lazily by get_backend
BACKENDS: dict[str, tuple[str, str]] = {
    "reference": (".reference", "ReferenceBackend"),
    "deepgemm": (".deepgemm", "DeepGemmBackend"),
}


def get_backend(name, **options) -> Backend:
    """A backend instance by name (``options`` go to its constructor), or an instance as is."""
    if isinstance(name, Backend):
        return name
    if name not in BACKENDS:
        raise unknown_name("backend", "backend", name, BACKENDS)
    module_name, class_name = BACKENDS[name]
    try:
        module = importlib.import_module(module_name, __name__)
    except ImportError as e:
        raise ValueError(f"backend {name!r} is not available here: {e}") from e
    cls = getattr(module, class_name)
    return cls(**options)


__all__ = ["BACKENDS", "Backend", "get_backend"]

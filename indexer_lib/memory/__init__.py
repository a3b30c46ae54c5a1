"""Layer 4, memory: the exact bytes a plan needs on the GPU, without a GPU.

- ``model``: ``memory_report`` (persistent buffers, and per chunk the padded logits,
  metadata and the backend's temporaries), ``peak_bytes``, ``fits``, and ``shapes_peak``
  (the same peak from a plan's distinct chunk shapes, ``plan.plan_shapes``; ``ShapesPeak``
  for many plans of one set of settings);
- ``tiling``, ``topk_bytes``: the temporaries of the reference backend's tiles and of
  the window top-k, by formula (the tracer checks them against real allocations);
- ``allocator``: a model of PyTorch's CUDA caching allocator (reserved vs allocated).

DeepGEMM's padding rules, which the planners need too, sit below every layer in
``indexer_lib.padding``.
"""
from .model import (DEFAULT_BACKEND, INT32_BYTES, ChunkMemory, MemoryReport, backend_temporaries,
                    deepgemm_temporaries_bytes, fits, logits_bytes, memory_report, metadata_bytes,
                    padded_inputs_bytes, peak_bytes, running_topk_bytes, SHAPE_BACKENDS, ShapesPeak,
                    shapes_peak, topk_buffer_bytes, workspace_bytes)

__all__ = [
    "DEFAULT_BACKEND", "INT32_BYTES", "ChunkMemory", "MemoryReport", "backend_temporaries",
    "deepgemm_temporaries_bytes", "fits", "logits_bytes", "memory_report", "metadata_bytes",
    "padded_inputs_bytes", "peak_bytes", "running_topk_bytes", "SHAPE_BACKENDS", "ShapesPeak", "shapes_peak",
    "topk_buffer_bytes", "workspace_bytes",
]

"""Layer 4, memory: the exact bytes a plan needs on the GPU, without a GPU.

- ``model``: ``memory_report`` (persistent buffers, and per chunk the padded logits,
  metadata and the temporaries of what runs it), ``peak_bytes``, ``fits``;
- ``chunk_bytes``: a chunk's transient bytes, each term written once, for one chunk or arrays of
  them (``ChunkBytes``: from a chunk's shape);
- ``steps``: ``StepsMemory``, arrays of steps planned at once into their peaks;
- ``tiling``, ``topk_bytes``: the temporaries of the reference backend's tiles and of
  the window top-k, by formula (the tracer checks them against real allocations);
- ``engine_path``: what an engine release's own path allocates (replayed from its code);
- ``allocator``: a model of PyTorch's CUDA caching allocator (reserved vs allocated).

DeepGEMM's padding rules, which the planners need too, sit below every layer in
``indexer_lib.padding``.
"""
from .chunk_bytes import ChunkBytes
from .steps import StepPeaks, StepsMemory
from .model import (FROM_SETTINGS, NAMED_TEMPORARIES, ChunkMemory, MemoryReport, Temporaries,
                    buffer_bytes, chunk_memory, deepgemm_temporaries_bytes, fits, logits_bytes, memory_report,
                    metadata_bytes, padded_inputs_bytes, peak_bytes, running_topk_bytes, temporaries_of,
                    topk_buffer_bytes, workspace_bytes)

__all__ = [
    "ChunkBytes", "StepPeaks", "StepsMemory", "FROM_SETTINGS", "NAMED_TEMPORARIES", "ChunkMemory", "MemoryReport", "Temporaries",
    "buffer_bytes", "chunk_memory", "deepgemm_temporaries_bytes", "fits", "logits_bytes", "memory_report",
    "metadata_bytes", "padded_inputs_bytes", "peak_bytes", "running_topk_bytes", "temporaries_of",
    "topk_buffer_bytes", "workspace_bytes",
]

# a multi-kind plan (DeepSeek-V4.1) names the kind whose plan has the highest transient peak
from ..plan.make import set_kind_peak  # noqa: E402

set_kind_peak(lambda plan: memory_report(plan).peak_transient)

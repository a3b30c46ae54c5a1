"""Layer 4, memory: the exact bytes a plan needs on the GPU, without a GPU.

- ``model``: ``memory_report`` (persistent buffers, and per chunk the padded logits,
  metadata and the temporaries of what runs it), ``peak_bytes``, ``fits``;
- ``chunk_bytes``: a chunk's transient bytes, each term written once, for one chunk or arrays of
  them (``ChunkBytes``: from a chunk's shape);
- ``steps``: ``StepsMemory``, arrays of steps planned at once into their peaks;
- ``planning``: ``make_plan`` and ``plan_at`` for any model (a multi-kind model's plan is the
  kind with the highest transient peak);
- ``tiling``, ``topk_bytes``: the temporaries of the reference backend's tiles and of
  the window top-k, by formula (the tracer checks them against real allocations);
- ``replayed``: what an engine release's own code allocates around the logits, as replayed;
- ``allocator``: a model of PyTorch's CUDA caching allocator (reserved vs allocated); ``events``: a
  step's allocations in the executor's order, from the memory model's bytes, for it to replay;
- ``decode``: a decode step's paged logits, as the release's decode path asks for them;
- ``verdict``: ``first_past_free``, which of a step's lines first asks for more than is free (the
  ledger's verdict and a sweep's rows both read it).

DeepGEMM's padding rules, which the planners need too, sit below every layer in
``indexer_lib.padding``.
"""
from .chunk_bytes import ChunkBytes
from .decode import decode_logits_bytes, decode_logits_cols, decode_step_bytes
from .planning import make_plan, plan_at
from .steps import StepPeaks, StepsMemory
from .verdict import NO_LINE, first_past_free
from .model import (FROM_SETTINGS, NAMED_TEMPORARIES, ChunkMemory, MemoryReport, Temporaries,
                    buffer_bytes, chunk_memory, deepgemm_temporaries_bytes, fits, logits_bytes, memory_report,
                    metadata_bytes, padded_inputs_bytes, peak_bytes, running_topk_bytes, temporaries_of,
                    topk_buffer_bytes, workspace_bytes)

__all__ = [
    "ChunkBytes", "decode_logits_bytes", "decode_logits_cols", "decode_step_bytes", "StepPeaks", "StepsMemory", "make_plan", "plan_at", "FROM_SETTINGS", "NAMED_TEMPORARIES", "ChunkMemory", "MemoryReport", "Temporaries",
    "buffer_bytes", "chunk_memory", "deepgemm_temporaries_bytes", "fits", "logits_bytes", "memory_report",
    "metadata_bytes", "padded_inputs_bytes", "peak_bytes", "running_topk_bytes", "temporaries_of",
    "topk_buffer_bytes", "workspace_bytes", "NO_LINE", "first_past_free",
]

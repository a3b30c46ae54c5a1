"""The one-shot H200 measurement (``scripts/h200_check.sh``), and its CPU dry run.

Stages, each bounded in time and isolated (a stage that fails is recorded with
its error and the next one runs):

0. ``probe``: what DeepGEMM was found, and the padding it really allocates
   (row stride and rows of tiny calls, against ``indexer_lib.padding``); the
   first calls' time (JIT compilation) is recorded apart;
1. ``correctness``: deepgemm against reference on fresh random inputs for
   several shapes: relative difference of the logits inside each row's window,
   equality of the top-k sets, and the GPU top-k against the reference top-k on
   the same logits (that one must agree exactly);
2. ``memory``: representative steps x every strategy: measured peak
   (``max_memory_allocated`` after ``reset_peak_memory_stats``) next to the
   memory model's prediction;
3. ``timing``: per strategy and budget, CUDA events around the executor, median
   of repeats after warm-up; chunk count next to time (the per-chunk overhead);
4. ``frontier``: a small OOM frontier under emulated free memory (a ballast
   tensor leaves X GiB free; ``torch.OutOfMemoryError`` caught per point)
   next to the predicted one;
5. ``reserved``: ``memory_reserved`` and segment count across the steps of a
   long prompt prefilled in slices, for vllm, causal and fixed-shape, next to the
   caching-allocator model's prediction (``indexer_lib.study.reserved``).

Outputs under ``--out``: ``h200_check.json`` (provenance, stage status, the
summary) and one CSV per stage; a short table is printed last.  ``--dry-run``:
reference backend on the CPU, tiny shapes, the same stages and files (CUDA-only
readings are empty and say why), so CI runs it.

One module per stage (``probe``, ``correctness``, ``memory``, ``timing``,
``frontier``, ``reserved``); ``config`` holds the sizes, ``driver`` runs them.
"""
from .common import is_oom
from .config import STAGES, STRATEGIES, Config, Step, dry_run_config, h200_config
from .driver import STAGE_FUNCS, main, run, table
from .provenance import provenance

__all__ = ["STAGES", "STAGE_FUNCS", "STRATEGIES", "Config", "Step", "dry_run_config", "h200_config",
           "is_oom", "main", "provenance", "run", "table"]

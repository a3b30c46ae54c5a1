"""Layer 5, the time model: what a plan's kernels cost on a GPU, and what a budget adds to a prompt's time.

- ``work``: each chunk's work (its rows' windows, DeepGEMM's query blocks and CTA tiles);
- ``features``: what a plan's time depends on (chunks, gathers, useful and allocated logits);
- ``kernel_rates``: each kernel's time from its work, constants fitted to published kernel
  timings or labelled assumed, per GPU;
- ``model``: ``TimeModel``, a plan's modelled time kernel by kernel (scaled to ``data/h200/``
  where measured rows exist), and the chunk-overhead tables;
- ``ttft``: what a budget adds to time to first token and per output token through a schedule.
"""
from .features import chunk_useful_elements, plan_features
from .model import TimeModel, chunk_count_check, load_measured, overhead_table
from .ttft import added_time
from .work import chunk_work

__all__ = ["chunk_useful_elements", "plan_features", "TimeModel", "chunk_count_check", "load_measured",
           "overhead_table", "added_time", "chunk_work"]

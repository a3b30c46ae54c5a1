"""Layer 2, the engines: one profile per vLLM, SGLang and TensorRT-LLM release, as data.

- ``profiles``: ``get_engine("vllm==0.15.1")``, every known release, the facts of a
  release (chunker, workspace, budget rule, DeepGEMM build and padding, layout,
  top-k path, metadata, profile-run reservation, scheduler defaults) and their sources;
- ``budget``: the logits budget as each release computes it, call after call;
- ``scheduler``: the scheduler each release serves with by default, and what differs from it;
- ``dp_attention``: SGLang's DP attention, what one of its ranks runs (its sizes, the refusals);
- ``gpus``: what the GPU changes in each release (scheduler defaults by device memory; the
  GPUs whose indexer path is not modelled, refused with the reason).

The profiles live in ``data/engines/``; the planners (``plan``) read them.
"""
from .budget import (SGLANG_MEM_FRACTION_STATIC, EngineBudget, process_budget, profile_run_logits_bytes,
                     sglang_static_budget)
from .dp_attention import check_dp
from .gpus import check_gpu, decode_graph_max_bs, gpu_refusal, planned_on, scheduler_gpu_defaults
from .profiles import (DEFAULT_ENGINE, ENGINES, EngineProfile, compressed_kv_engines, engine_names, engines_for, get_engine, latest,
                       pooled_kv_engines, qsa_engines, replayed_engines)
from .scheduler import SCHEDULER_SETTINGS, not_default, not_default_text, release_scheduler, scheduler_defaults

__all__ = ["DEFAULT_ENGINE", "ENGINES", "SGLANG_MEM_FRACTION_STATIC", "EngineBudget", "EngineProfile",
           "SCHEDULER_SETTINGS", "check_dp", "check_gpu", "decode_graph_max_bs", "planned_on", "compressed_kv_engines", "engines_for", "gpu_refusal", "engine_names", "get_engine", "latest", "not_default", "not_default_text",
           "pooled_kv_engines", "process_budget", "profile_run_logits_bytes", "qsa_engines", "release_scheduler", "replayed_engines",
           "scheduler_defaults", "scheduler_gpu_defaults", "sglang_static_budget"]

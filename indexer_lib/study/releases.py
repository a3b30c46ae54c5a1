"""What each engine release does on the field's deployments: its own chunker at its
default setting, every step of the schedule, the worst step's bytes against the memory free.

The deployments are ``data/field/deployments.csv`` (GLM-5-FP8 on 8 x H200 at concurrency
48-64 x ISL 10240 on ``vllm serve``'s defaults; ``--max-num-batched-tokens 32768 --max-num-seqs 16``
at ISL 16384); a scheduler setting a deployment leaves blank is each release's own default.
vLLM releases plan at their default ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` (none before
0.19.0); SGLang releases at the budget their own rule measures with the deployment's free
memory as the first reading (``mem_fraction_static`` as SGLang sets it on an H200, about
0.9).  Every number is modelled.
"""
from __future__ import annotations

from ..engines import get_engine, not_default_text, process_budget, profile_run_logits_bytes, release_scheduler
from ..plan import PlanSettings
from ..refdata import number, read_rows
from ..presets import GIB, MIB, free_bytes_from_gib, get_gpu, get_model
from ..workload import ClosedLoopWorkload
from ..search.worst_step import Schedule, prefill_batches, worst_step

# one release per era: before the budget, its first release, the vendored DeepGEMMs, the
# compressed widths; SGLang without a budget, with a per-call reading, with a cached one
ERA_RELEASES = ("vllm==0.12.0", "vllm==0.18.1", "vllm==0.19.1", "vllm==0.29.0", "vllm==0.32.0",
                "vllm==0.33.0", "sglang==0.5.5.post3", "sglang==0.5.12.post1", "sglang==0.5.23")


def deployments() -> dict[str, dict]:
    """The field's deployments by name, numbers parsed (concurrency: a list)."""
    out = {}
    for r in read_rows("field", "deployments.csv"):
        d = {k: (v if k in ("deployment", "what", "model", "gpu", "source", "concurrency") else number(v))
             for k, v in r.items()}
        d["concurrency"] = [int(c) for c in r["concurrency"].split()]
        out[r["deployment"]] = d
    return out


def deployment_scheduler(d: dict) -> dict:
    """The scheduler settings a deployment (or a reported case) gives; a blank one is the
    release's default (None here)."""
    return {k: (None if d.get(k) is None else int(d[k]))
            for k in ("max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold")}


def release_rows(deployment: str, releases=ERA_RELEASES, free_gib: float | None = None) -> list[dict]:
    """One row per release x concurrency of a deployment: the worst step's transient peak,
    its chunks and logits, and whether it fits the memory free (modelled).  ``unreserved_gib``:
    how much of that peak the release's profile run did not reserve (it sizes the KV cache
    around one chunk's logits, while two chunks' are alive at once), which must come out of
    the headroom the KV cache leaves."""
    d = deployments()[deployment]
    free_gib = d["free_gib"] if free_gib is None else free_gib
    free = free_bytes_from_gib(free_gib)
    model = d["model"]
    schedules = {}  # (concurrency, scheduler) -> schedule: releases with the same defaults share one
    rows = []
    for name in releases:
        profile = get_engine(name)
        # the deployment's settings where it gives them, the release's defaults elsewhere
        config = release_scheduler(profile, get_model(model).kv_block, d["gpu"], **deployment_scheduler(d))
        budget = process_budget(profile, free, get_gpu(d["gpu"]).capacity_bytes, rocm=get_gpu(d["gpu"]).rocm)
        for conc in d["concurrency"]:
            if (conc, config) not in schedules:
                schedules[conc, config] = Schedule(prefill_batches(ClosedLoopWorkload(conc, d["isl"], d["osl"]), config))
            w = worst_step(schedules[conc, config], "engine", budget,
                           PlanSettings(model, profile, temporaries="deepgemm", gpu=d["gpu"]),
                           topk_rows=config.max_num_batched_tokens)
            rows.append({
                "deployment": deployment, "engine": name, "concurrency": conc, "isl": d["isl"],
                "not_default": not_default_text(profile, config, d["gpu"]),
                "budget_mib": None if budget is None else budget / MIB,
                "worst_step": w.worst_step, "worst_rows": w.worst_rows, "worst_kv_tokens": w.worst_kv_tokens,
                "worst_chunks": w.worst_chunks, "max_chunks": w.max_chunks,
                "peak_transient_gib": w.peak_transient_bytes / GIB,
                "profile_run_logits_gib": profile_run_logits_bytes(profile) / GIB,
                # none when the profile run reserved more than the worst step needs
                "unreserved_gib": max(0, w.peak_transient_bytes - profile_run_logits_bytes(profile)) / GIB,
                "free_gib": free_gib,
                "oom": w.peak_transient_bytes > free, "mode": "model",
            })
    return rows


def release_table(deployment: str, releases=ERA_RELEASES, free_gib: float | None = None):
    import pandas as pd

    return pd.DataFrame(release_rows(deployment, releases, free_gib))

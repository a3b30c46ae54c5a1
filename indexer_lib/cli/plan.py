"""``indexer-lab plan``: split one step batch into chunks and print the plan (or its JSON)."""
from __future__ import annotations

import json

from ..engines.rocm import rocm_setting
from ..memory import memory_report
from ..plan import release_path
from ..presets import format_bytes
from .common import add_batch_options, add_server_options, plan_from_args, size_text, static_budget_note, verdict, verdict_code, verdict_line
from .exits import epilog


def register(subparsers) -> None:
    what = "split one step batch into chunks and print the plan (with --free-gib: whether it fits)"
    p = subparsers.add_parser("plan", help=what, description=what,
                              epilog=epilog("the plan was made and, with --free-gib, the step fits",
                                            "with --free-gib: the step runs out of memory (OOM)"))
    add_batch_options(p)
    add_server_options(p)
    p.set_defaults(func=cmd_plan)


def plan_json(plan, report) -> dict:
    return {
        "strategy": plan.strategy,
        "engine": plan.engine,
        "model": plan.model,
        "deepgemm_version": plan.deepgemm_version,
        "padded_budget": plan.padded,
        "budget_bytes": plan.budget_bytes,
        "workspace_tokens": plan.workspace_tokens,
        "num_chunks": plan.num_chunks,
        "peak_bytes": report.peak,
        "peak_transient_bytes": report.peak_transient,
        "workspace_lifetime": plan.workspace_lifetime,
        "call_bytes": report.call,
        "logits_alive": plan.logits_alive,
        "chunks": [c.to_json() for c in plan.chunks],
    }


def cmd_plan(args) -> int:
    plan = plan_from_args(args)
    report = memory_report(plan)
    v = verdict(plan, args)
    kinds = layer_kinds_json(plan, report)
    note = static_budget_note(args)
    if args.json:
        print(json.dumps({**plan_json(plan, report), **v.to_json(), "largest_logits_bytes": plan.largest_logits_bytes,
                          "layer_kinds": kinds, "peak_layer_kind": plan.layer_kind or kinds[0]["name"],
                          "gpu": args.gpu,
                          "unverified": list(plan.settings.preset.unverified),
                          "gpu_unverified": list(plan.settings.gpu_preset.unverified),  # facts of data/gpus/
                          **({"budget_note": note} if note else {})}))
        return verdict_code(v)
    on = f" on {plan.engine}" if plan.engine else ""
    kernel = ("its own QSA kernel, no DeepGEMM" if plan.settings.preset.qsa else
              f"aiter's {release_path(plan.settings).rocm_kernel}, {plan.deepgemm_version}" if plan.settings.gpu_preset.rocm else
              f"DeepGEMM {plan.deepgemm_version}")
    if plan.settings.v41_path == "torch":
        budget = "budget none (torch scores, rows capped by 1 GiB of bf16 per-head scores; no DeepGEMM)"
    elif plan.budget_bytes is None:
        budget = f"budget none ({kernel})"
    else:
        counted = "padded" if plan.padded else "unpadded, M x N x 4"
        budget = f"budget {size_text(plan.budget_bytes)} ({counted}; {kernel})"
    print(f"{plan.strategy}{on}, {plan.model}: {plan.num_chunks} chunks, {budget}, "
          f"peak {format_bytes(report.peak)} ({format_bytes(report.peak_transient)} transient)")
    packed_past = sum(c.over_budget and c.num_requests > 1 and c.kv_tokens > plan.workspace_tokens
                      for c in plan.chunks)
    over = sum(c.over_budget for c in plan.chunks) - packed_past
    if over:  # a budget below what one row (or the workspace) needs: said, not only flagged per chunk
        print(f"over budget: {over:,} of {plan.num_chunks:,} chunks hold more than the budget allows, "
              "which no split of them meets (below one row's logits, or past the K workspace)")
    if packed_past:  # vLLM 0.20.0-0.31.0 on compressed K: the chunker's limit is ratio times the buffer
        print(f"past the K buffer: {packed_past:,} of {plan.num_chunks:,} chunks pack more K entries than the "
              f"{plan.workspace_tokens:,}-entry buffer holds ({plan.engine} packs against the workspace before its "
              "division by the compression ratio); their logits are as wide as the buffer, and the release "
              "gathers the rest of their K past its end")
    preset = plan.settings.preset
    (kind,) = preset.indexing_kinds
    entries = f", K in entries of {kind.compress_ratio} tokens" if kind.compress_ratio != 1 else ""
    rows = f", each request's last {kind.replay_rows} rows" if kind.replay_rows else ""
    sets = "; it sets the step's peak, and this is its plan" if plan.kind_plans else ""
    print(f"{preset.name}: layer kind {kind.name} ({kind.index_heads} heads x {kind.head_dim}, top-{kind.topk}"
          f"{entries}{rows}) on {kind.indexer_layers} of {preset.num_layers} layers; each of them allocates this "
          "plan in turn" + sets + (f"; unverified: {', '.join(preset.unverified)}" if preset.unverified else ""))
    for k in kinds if plan.kind_plans else ():
        print(f"  kind {k['name']}: {k['indexer_layers']} indexer layers, {k['rows']} rows x {k['kv']} K "
              f"{'entries' if k['compress_ratio'] != 1 else 'tokens'}, {k['num_chunks']} chunks, largest logits "
              f"{format_bytes(k['largest_logits_bytes'])}, peak {format_bytes(k['peak_bytes'])}"
              + ("  <- the step's peak" if k["name"] == plan.layer_kind else ""))
    print(persistent_line(plan, report))
    gpu = plan.settings.gpu_preset
    if gpu.name != "h200":  # a plan reads the GPU's capacity only (its bandwidth is for the time model)
        print(f"GPU {gpu.name} ({gpu.arch}): {gpu.capacity_gib:.2f} GiB as torch reports it (data/gpus/{gpu.name}.json)"
              + ("; unverified" if "capacity_bytes" in gpu.unverified else ""))
        setting = rocm_setting(plan.settings.profile, gpu)
        if setting:
            print(f"served with {setting}")
    if not plan.chunks:
        print(f"no logits: {plan.engine} selects every token of this step (its longest sequence fits the top-k)")
    print(f"{'#':>4} {'requests':>11} {'rows':>15} {'tokens':>15} {'kv':>8} {'cols':>8} "
          f"{'logits':>11}  gather  over")
    for i, c in enumerate(plan.chunks):
        print(f"{i:>4} {str(list(c.requests)):>11} {str(list(c.rows)):>15} "
              f"{str([c.token_start, c.token_end]):>15} {c.kv_tokens:>8} "
              f"{str(c.logits_cols) + ('c' if c.compressed else ''):>8} "
              f"{format_bytes(c.logits_bytes):>11}  {'yes' if c.gather else 'no ':>6}  "
              f"{'YES' if c.over_budget else '-'}")
    for line in (padding_note(plan), note and f"budget: {note}"):
        if line:
            print(line)
    print("ledger (modelled; docs/design.md#the-ledger):")
    for line in v.text_lines() + [verdict_line(v)]:
        if line:
            print(line)
    return verdict_code(v)


def persistent_line(plan, report) -> str:
    """What the peak holds beyond the step's transients: the K workspace (tokens and bytes) and the
    top-k output, reserved once."""
    entries = "entries" if plan.settings.preset.kv_ratio != 1 else "tokens"
    if plan.workspace_lifetime == "persistent" and plan.workspace_tokens:
        workspace = f"K workspace {plan.workspace_tokens:,} {entries}, {format_bytes(report.workspace)}"
    else:  # gathered per chunk or per call: counted with the chunk or the call
        workspace = f"K gathered per {plan.workspace_lifetime}, no workspace reserved"
    topk = f"top-k output {format_bytes(report.topk_buffer)}" if report.topk_buffer else "top-k output per call"
    return f"persistent {format_bytes(report.persistent)}: {workspace}; {topk}"


def layer_kinds_json(plan, report) -> list[dict]:
    """The model's layer kinds that compute an indexer, each with what its layers allocate; the
    step's peak is the worst over them (one layer's logits are freed before the next layer runs).
    A model whose kinds see the step differently (DeepSeek-V4.1) has a plan per kind
    (``Plan.kind_plans``), each with its chunks; the others have one such kind."""
    pairs = plan.kind_plans or ((None, plan),)
    out = []
    for _, p in pairs:
        r = report if p is plan or not plan.kind_plans else memory_report(p)
        (k,) = p.settings.preset.indexing_kinds if plan.kind_plans else (plan.settings.preset.main_kind,)
        entry = {"name": k.name, "layers": len(k.layers), "indexer_layers": k.indexer_layers,
                 "index_heads": k.index_heads, "topk": k.topk, "compress_ratio": k.compress_ratio,
                 "candidates": k.candidates, "replay_rows": k.replay_rows,
                 "rows": p.batch.num_rows, "kv": p.batch.num_kv_tokens,
                 "num_chunks": p.num_chunks, "largest_logits_bytes": p.largest_logits_bytes,
                 "peak_bytes": r.peak, "peak_transient_bytes": r.peak_transient, "logits_alive": p.logits_alive}
        if plan.kind_plans:
            entry["chunks"] = [c.to_json() for c in p.chunks]
            if p.settings.v41_path == "torch":  # the bf16 per-head scores each chunk makes first
                entry["per_head_scores_bytes"] = max((c.num_rows * k.index_heads * c.logits_cols * 2
                                                      for c in p.chunks), default=0)
        out.append(entry)
    return out


def padding_note(plan) -> str | None:
    """Why a chunk can allocate more than an unpadded budget and still not be over it."""
    if plan.budget_bytes is None or plan.padded:
        return None
    above = [c.logits_bytes for c in plan.chunks if c.logits_bytes > plan.budget_bytes and not c.over_budget]
    if not above:
        return None
    who = plan.engine if plan.strategy == "engine" and plan.engine else "this strategy"
    if plan.settings.preset.qsa:
        return (f"{len(above)} chunk(s) allocate more than the budget (up to {format_bytes(max(above))}): {who}'s "
                "QSA path allocates one workspace of max(budget, block-table columns x 4) per call (vLLM) or "
                "rounds a chunk's rows up to 128 / H (SGLang) (docs/design.md#models)")
    return (f"{len(above)} chunk(s) allocate more than the budget (up to {format_bytes(max(above))}) and are "
            f"not over it: {who} counts a chunk as M x N x 4 bytes, without DeepGEMM's padding of its rows "
            "and columns (docs/design.md#deepgemms-padding)")

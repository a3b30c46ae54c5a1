"""``indexer-lab deploy``: a server's flags and a workload in; the indexer's memory over the run out.

    indexer-lab deploy --model glm-5 --engine vllm==0.33.0 --gpu-memory-utilization 0.92 \\
        --max-model-len 131072 --speculative-tokens 1 --workload 64x10240x512

The ledger (docs/design.md#the-ledger): what the indexer reserves at boot and the KV cache that
takes, the worst prefill and decode steps of the whole schedule, the caching allocator's high
water over the run, and one verdict against the memory free when a step runs, derived from the
server's flags (or --free-gib, named as given).  Every number is modelled.  Exit status 1: a line
of the ledger does not fit; the others as every subcommand's (``cli.exits``).
"""
from __future__ import annotations

import json

from ..engines import get_engine
from ..ledger.buffers import decode_budget_note
from ..ledger.deployment import Server, deployment_ledger, what_ifs
from ..plan.logits_buffer import KINDS
from ..presets import format_bytes
from ..sweep.deployment import Deployment
from ..sweep.scheduler_settings import SchedulerSettings
from ..workload.lengths import mix_text
from . import exits
from .auto import parse_workload
from .common import (UsageError, add_gpu_option, add_model_option, engine_arg, finite_float, fraction,
                     verdict_code, verdict_line)
from .exits import epilog
from .options import add_setting_options


def register(subparsers) -> None:
    what = "the indexer's memory over a deployment's life, from the server's flags and a workload (modelled)"
    p = subparsers.add_parser("deploy", help=what, description=what, epilog=epilog(
        "every line of the ledger fits the memory free when a step runs",
        "a line of the ledger does not fit (the line marked OOM says which)"))
    add_model_option(p)
    p.add_argument("--engine", default=get_engine(None).name, type=engine_arg,
                   help="the release the server runs (default: the latest vLLM, %(default)s)")
    add_gpu_option(p, "its capacity, the release's scheduler defaults and the free memory follow it")
    p.add_argument("--workload", required=True,
                   help="CONCURRENCYxISLxOSL[xSHARED_PREFIX][:r=R][:mix=SHARExLENGTH][:seed=S], as auto takes it "
                        "(required)")
    p.add_argument("--strategy", default="engine",
                   help="how the indexer's prefill is split: the release's own chunker (engine, default) or one of "
                        "the project's strategies, as what a patched engine would do")
    p.add_argument("--budget-mb", type=finite_float,
                   help="vLLM: VLLM_SPARSE_INDEXER_MAX_LOGITS_MB as the server sets it (default: the release's); "
                        "the project's strategies: their budget")
    add_setting_options(p, SchedulerSettings, Deployment, skip=("workload_source", "mem_fraction_static"))
    p.add_argument("--mem-fraction-static", type=fraction,
                   help="SGLang: the server's --mem-fraction-static (default: 0.9, SGLang's choice on an H200)")
    p.add_argument("--max-model-len", type=int,
                   help="the server's --max-model-len, which sizes the K workspace and the decode logits "
                        "(default: the model's)")
    p.add_argument("--free-gib", type=finite_float,
                   help="the memory free when a step runs, instead of deriving it from the server's flags (named "
                        "as given wherever shown)")
    p.add_argument("--expandable-segments", action="store_true",
                   help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (default: off, PyTorch's default)")
    p.add_argument("--workspace-tokens", type=int, metavar="N",
                   help="the K workspace in tokens (entries of compressed K), as a patched server would size it "
                        "(default: the release's rule at --max-model-len)")
    p.add_argument("--cuda-graph-backend-prefill", choices=("breakable", "full", "disabled"),
                   help="SGLang: the prefill CUDA graph backend as the server sets it (default: off for DeepSeek-V4, "
                        "SGLang's rule); breakable or full captures the C4 logits at the context width")
    p.add_argument("--cuda-graph-prefill-max-context", type=int, metavar="TOKENS",
                   help="SGLang: the context width its prefill CUDA graph captures (default: the model's context)")
    p.add_argument("--logits-buffer", choices=KINDS,
                   help="a what-if prefill logits buffer over the release's own path (default: the release's, a new "
                        "allocation per launch): fixed-width (vllm-project/vllm#58068, open) or pooled "
                        "(sgl-project/sglang#37660's AMD FP4 rule)")
    p.add_argument("--what-if", action="store_true",
                   help="also run the ledger under each setting users ask about (expandable segments, a 64 MiB "
                        "logits budget, a K workspace sized to max_num_seqs x max_model_len, a prefill CUDA graph "
                        "bounded to the workload's longest context, fixed-width and pooled prefill logits) and show "
                        "what each frees and costs")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=cmd_deploy)


def cmd_deploy(args) -> int:
    from tqdm import tqdm

    workload = parse_workload(args.workload)
    server = Server(args.model, args.engine, args.gpu, args.tp, args.gpu_memory_utilization, args.mem_fraction_static,
                    args.max_model_len, *(one_value(args, name) for name in SCHEDULER_FLAGS),
                    args.async_scheduling, args.speculative_tokens, args.kv_cache_tokens, args.kv_cache_dtype,
                    args.budget_mb, args.expandable_segments, args.indexer_tp_shard_min_rows, args.workspace_tokens,
                    args.cuda_graph_backend_prefill in ("breakable", "full"), args.cuda_graph_prefill_max_context,
                    args.dp, args.logits_buffer)
    with tqdm(desc="deploy: the ledger over the schedule", unit=" steps", disable=None, leave=False) as bar:
        d = deployment_ledger(server, workload, args.strategy, args.free_gib, bar)
    ledger, profile, model = d.run.ledger, d.settings.profile, d.settings.preset
    others = []
    if args.what_if:
        for name, changed in what_ifs(server, model, workload.max_prompt_len + workload.osl)[1:]:
            with tqdm(desc=f"deploy: {name}", unit=" steps", disable=None, leave=False) as bar:
                others.append((name, deployment_ledger(changed, workload, args.strategy, args.free_gib, bar)))
    if args.json:
        print(json.dumps({
            "model": model.name, "engine": profile.name, "gpu": d.settings.gpu, "tp": args.tp, "dp": args.dp,
            "strategy": args.strategy, "budget_bytes": d.budget_bytes, "max_model_len": d.max_model_len,
            "expandable_segments": args.expandable_segments, "logits_buffer": args.logits_buffer,
            "workload": {"concurrency": workload.concurrency, "isl": workload.isl, "osl": workload.osl,
                         "shared_prefix": workload.shared_prefix, "random_range_ratio": workload.random_range_ratio,
                         "mix": mix_text(workload.mix), "seed": workload.seed},
            "not_default": d.not_default, **ledger.to_json(),
            "kv_cache_tokens": (d.kv.tokens if d.kv is not None else d.scheduler.num_kv_blocks * d.scheduler.block_size)
            or None, "kv_cache_derived": d.kv.phrase() if d.kv is not None else None,
            "boot_kv_tokens": d.boot_kv_tokens, "prefill_steps": d.run.prefill_steps,
            "decode_steps": d.run.decode_steps, "allocator_high_water_bytes": d.run.allocator.high_water,
            "allocator_fragmented": d.run.allocator.fragmented, "chunks": d.run.chunks,
            **({"what_ifs": [what_if_json(name, o) for name, o in [("as given", d)] + others],
                "decode_budget": decode_budget_note()} if args.what_if else {})}))
        return verdict_code(ledger)
    label = f" ({workload.label})" if workload.label else ""
    ranks = f", DP attention {args.dp} ranks (one planned)" if args.dp != 1 else ""
    print(f"{model.name} on {profile.name}, {d.settings.gpu} x TP {args.tp}{ranks}, workload {args.workload}{label}, "
          f"{args.strategy} strategy (modelled):")
    own = "" if args.max_model_len is not None else " (the model's)"
    print(f"  settings: {'not the release default: ' + d.not_default if d.not_default else 'the release defaults'}"
          f"; max_model_len {d.max_model_len:,}{own}")
    if d.kv is not None:
        print(f"  KV cache: {d.kv.phrase()}; the boot lines below take {d.boot_kv_tokens:,} tokens of it")
    print(f"  {d.run.prefill_steps:,} prefill steps, {d.run.decode_steps:,} with decodes; logits budget "
          f"{'none' if d.budget_bytes is None else format_bytes(d.budget_bytes)}")
    print("ledger (modelled; docs/design.md#the-ledger):")
    for line in ledger.text_lines():
        print(line)
    print(verdict_line(ledger, over_run=True))
    if others:
        print_what_ifs(d, others)
    return verdict_code(ledger)


def what_if_json(name: str, d) -> dict:
    oom = d.run.ledger.oom_line
    return {"what_if": name, "boot_bytes": d.run.ledger.boot_bytes, "boot_kv_tokens": d.boot_kv_tokens,
            "needed_bytes": d.run.ledger.needed_bytes, "allocator_high_water_bytes": d.run.allocator.high_water,
            "chunks": d.run.chunks, "free_bytes": d.free.bytes, "verdict": d.run.ledger.verdict,
            "oom_line": None if oom is None else oom.name}


def print_what_ifs(base, others) -> None:
    """Each what-if next to the server as given: what it frees (boot, KV, the run's need) and what
    it costs (logits calls over the run's prefill steps)."""
    print("what-ifs (modelled; each the whole run again with one setting changed):")
    print(f"  {'setting':<52} {'boot':>10} {'needs':>10} {'allocator':>10} {'chunks':>8}  verdict")
    for name, d in [("as given", base)] + others:
        print(f"  {name:<52} {format_bytes(d.run.ledger.boot_bytes):>10} {format_bytes(d.run.ledger.needed_bytes):>10} "
              f"{format_bytes(d.run.allocator.high_water):>10} {d.run.chunks:>8,}  {d.run.ledger.verdict}")
    print(f"  {decode_budget_note()}")


SCHEDULER_FLAGS = ("max_num_seqs", "max_num_batched_tokens", "long_prefill_token_threshold")


def one_value(args, name: str):
    """A scheduler flag's one value (the options take lists, as the frontier's axes do)."""
    value = getattr(args, name)
    if value is None or isinstance(value, int):
        return value
    if len(value) != 1:
        raise UsageError(f"--{name.replace('_', '-')}: deploy takes one server, one value")
    return value[0]


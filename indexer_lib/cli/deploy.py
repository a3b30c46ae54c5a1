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

from ..engines import get_engine, process_budget, profile_run_logits_bytes
from ..engines.kv_capacity import deployment_kv_cache
from ..ledger import free_from_flags, given_free, run_ledger
from ..plan import PlanSettings, get_strategy
from ..presets import GIB, budget_bytes_from_mb, check_within_gpu, format_bytes, free_bytes_from_gib
from ..sweep.deployment import Deployment
from ..sweep.scheduler_settings import SchedulerSettings
from ..workload.lengths import mix_text
from ..workload.sources import scheduled_steps
from . import exits
from .auto import parse_workload, scheduler_from_args
from .common import UsageError, add_gpu_option, add_model_option, engine_arg, finite_float, fraction
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
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=cmd_deploy)


def cmd_deploy(args) -> int:
    from tqdm import tqdm

    settings = PlanSettings(args.model, args.engine, temporaries="deepgemm", gpu=args.gpu)
    profile, model = settings.profile, settings.preset
    workload = parse_workload(args.workload)
    max_model_len = model.max_model_len if args.max_model_len is None else args.max_model_len
    if not 1 <= max_model_len <= model.max_model_len:
        raise UsageError(f"--max-model-len {max_model_len}: must be in [1, {model.max_model_len}] ({model.name}'s)")
    if workload.max_prompt_len + workload.osl > max_model_len:
        raise UsageError(f"--workload {args.workload!r}: prompts of up to {workload.max_prompt_len} tokens plus "
                         f"{workload.osl} output tokens, past --max-model-len {max_model_len}: the server refuses them")
    tokens = settings.workspace_at(max_model_len)
    if tokens is not None:
        settings = settings.where(workspace_tokens=tokens)
    if args.mem_fraction_static is not None and profile.engine != "sglang":
        raise UsageError(f"--mem-fraction-static is SGLang's: {profile.name} is not SGLang")
    if args.gpu_memory_utilization is not None and profile.engine != "vllm":
        raise UsageError(f"--gpu-memory-utilization is vLLM's: {profile.name} is not vLLM")
    if args.budget_mb is not None:
        check_within_gpu("budget_mb", budget_bytes_from_mb(args.budget_mb), settings.gpu, f"--budget-mb {args.budget_mb:g}")
    strategy = get_strategy(args.strategy)
    scheduler, differs = scheduler_from_args(args, settings)
    kv = deployment_kv_cache(args.kv_cache_tokens, model.name, profile, settings.gpu, args.tp,
                             args.mem_fraction_static if profile.engine == "sglang" else args.gpu_memory_utilization,
                             args.kv_cache_dtype, args.speculative_tokens)
    drafts = args.speculative_tokens
    worst_decode = min(scheduler.max_num_seqs * (1 + drafts), scheduler.max_num_batched_tokens)
    own_vllm = strategy.own_build and profile.engine == "vllm"
    knob = args.budget_mb if own_vllm else None
    if args.free_gib is not None:
        check_within_gpu("free_gib", free_bytes_from_gib(args.free_gib), settings.gpu, f"--free-gib {args.free_gib:g}")
        free = given_free(args.free_gib)
    else:
        reserved = profile_run_logits_bytes(profile, knob, model, worst_decode, max_model_len)
        free = free_from_flags(profile, settings.gpu, reserved, args.gpu_memory_utilization, args.mem_fraction_static)
    budget = deploy_budget(strategy, settings, args, free.bytes)
    steps = list(scheduled_steps(workload, scheduler))
    with tqdm(total=len(steps), desc="deploy: the ledger over the schedule", unit=" steps", file=None,
              disable=None, leave=False) as bar:
        result = run_ledger(steps, strategy, budget, settings, free, max_model_len, scheduler.max_num_batched_tokens,
                            drafts, knob, worst_decode, args.expandable_segments, bar.update)
    ledger = result.ledger
    kv_tokens = kv.tokens if kv is not None else scheduler.num_kv_blocks * scheduler.block_size
    boot_kv_tokens = ledger.boot_bytes // kv.bytes_per_token if kv is not None else None
    if args.json:
        print(json.dumps({
            "model": model.name, "engine": profile.name, "gpu": settings.gpu, "tp": args.tp, "strategy": strategy.name,
            "budget_bytes": budget, "max_model_len": max_model_len, "expandable_segments": args.expandable_segments,
            "workload": {"concurrency": workload.concurrency, "isl": workload.isl, "osl": workload.osl,
                         "shared_prefix": workload.shared_prefix, "random_range_ratio": workload.random_range_ratio,
                         "mix": mix_text(workload.mix), "seed": workload.seed},
            "scheduler_not_default": differs, **ledger.to_json(),
            "kv_cache_tokens": kv_tokens or None, "kv_cache_derived": kv.phrase() if kv is not None else None,
            "boot_kv_tokens": boot_kv_tokens, "prefill_steps": result.prefill_steps,
            "decode_steps": result.decode_steps, "allocator_high_water_bytes": result.allocator.high_water,
            "allocator_fragmented": result.allocator.fragmented}))
        return verdict_code(ledger)
    label = f" ({workload.label})" if workload.label else ""
    print(f"{model.name} on {profile.name}, {settings.gpu} x TP {args.tp}, workload {args.workload}{label}, "
          f"{strategy.name} strategy (modelled):")
    print(f"  scheduler: {'not the release default: ' + differs if differs else 'the ' + profile.name + ' defaults'}"
          f"; max_model_len {max_model_len:,}{'' if args.max_model_len is not None else ' (the model' + chr(39) + 's)'}")
    if kv is not None:
        print(f"  KV cache: {kv.phrase()}; the boot lines below take {boot_kv_tokens:,} tokens of KV")
    print(f"  {result.prefill_steps:,} prefill steps, {result.decode_steps:,} with decodes; logits budget "
          f"{'none' if budget is None else format_bytes(budget)}")
    print("ledger (modelled; docs/design.md#the-ledger):")
    for line in ledger.text_lines():
        print(line)
    print(verdict_phrase(ledger))
    return verdict_code(ledger)


def deploy_budget(strategy, settings, args, free_bytes: int) -> int | None:
    """The logits budget the run plans with: the release's own (its knob at --budget-mb for vLLM,
    SGLang's measured from the free memory) or a strategy's --budget-mb."""
    profile = settings.profile
    if strategy.own_build:
        kwargs = {} if args.mem_fraction_static is None else {"mem_fraction_static": args.mem_fraction_static}
        return process_budget(profile, free_bytes, settings.gpu_preset.capacity_bytes,
                              value=args.budget_mb if profile.engine == "vllm" else None,
                              compressed=settings.preset.kv_ratio != 1, **kwargs)
    if args.budget_mb is None and strategy.budget_source(profile) != "none":
        raise UsageError(f"--strategy {strategy.name}: give its --budget-mb")
    return strategy.budget_bytes(args.budget_mb, free_bytes / GIB, settings, args.mem_fraction_static)


def verdict_code(ledger) -> int:
    return exits.NEGATIVE if ledger.verdict == "oom" else exits.DONE


def verdict_phrase(ledger) -> str:
    line = ledger.oom_line
    free = f"{format_bytes(ledger.free_bytes)} free when a step runs ({ledger.free_source})"
    if line is None:
        return f"fits: every line fits {free}; the most any asks for is {format_bytes(ledger.needed_bytes)}"
    return f"OOM: {line.name} needs {format_bytes(line.bytes)} ({line.detail}), against {free}"

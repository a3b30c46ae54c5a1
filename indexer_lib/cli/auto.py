"""``indexer-lab auto``: the value of an engine release's own knob with the least modelled
indexer time over a workload mix and no OOM at any step, printed as a line one can deploy.

    indexer-lab auto --model glm-5 --free-gib 2.63 --workload 64x10240x512 --workload 8x65536x64

A workload is ``CONCURRENCYxISLxOSL`` (optionally ``xSHARED_PREFIX``), then optionally its prompt
lengths: ``:r=0.5`` (vLLM bench's --random-range-ratio: each prompt's length drawn from
ISL x [0.5, 1.5]), ``:mix=0.01x131072`` (1% of the prompts, rounded up, at 131,072 tokens in the
same schedule, the rest at ISL) and ``:seed=S`` (of those draws, default 0).  Prints a line
naming the model, release, GPU and memory free, then the deployable line, the margin to the OOM
frontier at the worst step and where the time model's constants come from.  The engine is the
latest vLLM unless ``--engine`` names another release.  The line comes from the release's own
chunker and its own peak (two chunks' logits alive); ``--strategies`` adds ours, printed as what
a patched engine could do, never as a setting.  Every number is modelled.  Exit status 1: no
value of the release's knob fits, with or without ``--strategies`` (what a patched engine could
do is still printed where it fits); the others as every subcommand's (``cli.exits``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..engines import DEFAULT_ENGINE, SGLANG_MEM_FRACTION_STATIC, get_engine, not_default_text
from ..plan import PlanSettings
from . import exits
from .common import (UsageError, add_gpu_option, add_model_option, engine_arg, finite_float, fraction, number_list,
                     str_list, working)
from .exits import epilog
from .options import add_setting_options, part_from_args
from ..presets import GIB, MIB, budget_bytes_from_mb, check_within_gpu, free_bytes_from_gib
from ..sweep.deployment import Deployment
from ..sweep.scheduler_settings import SchedulerSettings
from ..workload import ClosedLoopWorkload
from ..workload.lengths import mix_text


WORKLOAD_SYNTAX = ("CONCURRENCYxISLxOSL[xSHARED_PREFIX][:r=R][:mix=SHARExLENGTH[+...]][:seed=S][:warm], "
                   "e.g. 64x10240x512 or 64x10240x512:r=0.5 or 64x2048x512:mix=0.01x131072 or 64x10240x64:warm")


def parse_workload(text: str) -> ClosedLoopWorkload:
    """A workload as the command line writes it: the closed loop, then its prompt lengths: ``r=R``
    (vLLM bench's --random-range-ratio: each prompt drawn from ISL x [1 - R, 1 + R]), ``mix=`` (a
    share of the prompts at another length, in the same schedule) and ``seed=`` (of both draws)."""
    head, *options = text.strip().lower().split(":")
    parts = head.split("x")
    if len(parts) not in (3, 4):
        raise UsageError(f"--workload {text!r}: expected {WORKLOAD_SYNTAX}")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--workload {text!r}: every field must be a whole number ({WORKLOAD_SYNTAX})") from None
    lengths = {}
    for option in options:
        if option == "warm" and "warm_cache" not in lengths:  # every prompt cached before the run
            lengths["warm_cache"] = True
            continue
        key, eq, value = option.partition("=")
        name = {"r": "random_range_ratio", "mix": "mix", "seed": "seed"}.get(key)
        if not eq or name is None or name in lengths:
            raise UsageError(f"--workload {text!r}: {option!r} is not r=R, mix=SHARExLENGTH, seed=S or warm "
                             "(each at most once)")
        try:
            lengths[name] = value if name == "mix" else (float(value) if name == "random_range_ratio" else int(value))
        except ValueError:
            raise UsageError(f"--workload {text!r}: {option!r}: not a number") from None
    try:
        return ClosedLoopWorkload(*values, **lengths)
    except ValueError as e:
        raise UsageError(f"--workload {text!r}: {e}") from None


def register(subparsers) -> None:
    from ..study.auto import DEFAULT_BUDGETS_MB

    what = "choose the fastest setting of an engine release's own knob that never OOMs over a workload mix (modelled)"
    p = subparsers.add_parser("auto", help=what, description=what, epilog=epilog(
        "a value of the release's knob fits: the line under the header is the one to deploy",
        "no value of the release's knob fits, with or without --strategies (the line under the header "
        "says why; what a patched engine could do is still printed where it fits)"))
    add_model_option(p)
    p.add_argument("--free-gib", type=finite_float,
                   help="memory free for the indexer's transients at run time, on the release's default setting "
                        "(GiB; default: derived from the server's flags, vLLM's --gpu-memory-utilization or SGLang's "
                        "--mem-fraction-static at their defaults unless given, as deploy derives it: "
                        "docs/design.md#the-ledger)")
    p.add_argument("--workload", action="append", required=True,
                   help="CONCURRENCYxISLxOSL[xSHARED_PREFIX], then optionally its prompt lengths: :r=R (vLLM "
                        "bench's --random-range-ratio, lengths drawn from ISL x [1 - R, 1 + R]), "
                        ":mix=SHARExLENGTH[+...] (that share of the prompts at that length in the same "
                        "schedule, the rest at ISL), :seed=S; e.g. 64x10240x512:r=0.5, 64x2048x512:mix=0.01x131072. "
                        "Repeat for several workloads, each its own schedule (required)")
    p.add_argument("--strategies", type=str_list,
                   help="our budgeted strategies to weigh on the engine too, comma-separated, shown as what a "
                        "patched engine could do (the deploy line is always the engine's own knob; default: none)")
    p.add_argument("--budgets-mb", type=number_list,
                   help="logits budgets in MiB to try, comma-separated: the values of vLLM's and TensorRT-LLM's "
                        "knob (SGLang's is a fraction of free memory, tried at its own values) and of --strategies "
                        f"(default: {','.join(map(str, DEFAULT_BUDGETS_MB))} and the release's default, which "
                        "auto keeps unless a value beats it by more than its time's band)")
    # the scheduler's and the deployment's settings, as the frontier takes them (the steps come from
    # the simulator; SGLang's memory fraction below, at its own default)
    add_setting_options(p, SchedulerSettings, Deployment, skip=("workload_source", "mem_fraction_static"))
    p.add_argument("--deepgemm-version",
                   help="--strategies on this DeepGEMM build instead of the engine's (default: the engine's)")
    p.add_argument("--engine", default=DEFAULT_ENGINE, type=engine_arg,
                   help="tune this engine release's own knob (vllm==0.19.0: VLLM_SPARSE_INDEXER_MAX_LOGITS_MB; "
                        "sglang==0.5.23: SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION; trtllm==1.4.0rc4: "
                        "TLLM_INDEXER_MQA_LOGITS_ELEM_BUDGET, the --budgets-mb as fp32 elements; default: the latest vLLM, "
                        f"{get_engine(DEFAULT_ENGINE).name}); --strategies adds ours on it")
    add_gpu_option(p, "the release's scheduler defaults and SGLang's budget cap follow its memory")
    p.add_argument("--mem-fraction-static", type=fraction, default=SGLANG_MEM_FRACTION_STATIC,
                   help="SGLang: the server's --mem-fraction-static, which caps its budget "
                        f"(default {SGLANG_MEM_FRACTION_STATIC}: SGLang's own choice on an H200)")
    p.add_argument("--data-dir", default=None,
                   help="measured H200 tables that fit the time model (default: the repository's "
                        "data/h200/; none there: the published figures)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=cmd_auto)


def cmd_auto(args) -> int:
    from ..study.auto import NothingFits, recommend
    from ..timemodel.model import MEASURED_DIR, TimeModel

    settings, workloads, strategies = checked_inputs(args)
    scheduler, differs = scheduler_from_args(args, settings)
    free = None
    if args.free_gib is None:  # what the server's flags leave a step (the release's default knob)
        free = derived_free(args, settings, scheduler)
        args.free_gib = free.bytes / GIB
    shown = Shown(settings, differs, args.workload, workloads, args.free_gib, free)
    try:
        with working(f"auto: each candidate's worst step over {len(workloads)} workload(s)"):
            rec = recommend(workloads, args.free_gib, settings, scheduler, strategies, tuple(args.budgets_mb),
                            TimeModel.from_data(args.data_dir or MEASURED_DIR), args.mem_fraction_static)
    except NothingFits as nothing:  # not even a patched engine fits: a negative answer, exit 1
        if args.json:
            print(json.dumps({**shown.json(), "deploy": None, "why_none": f"none: {nothing}", "deployable": None,
                              "patched": None, "margin_bytes": None, "time_source": nothing.time_source,
                              "candidates": nothing.candidates, "fitting": 0}))
        else:
            print(shown.header())
            print(f"none: {nothing}")
            shown.print_tail(nothing.time_source, 0, nothing.candidates)
        return exits.NEGATIVE
    if args.json:
        print(json.dumps({
            **shown.json(),
            "deploy": rec.deploy_line if rec.deployable else None, "why_none": None if rec.deployable else rec.deploy_line,
            "deployable": _candidate_json(rec.deployable), "patched": _candidate_json(rec.patched),
            "default_kept_over": _candidate_json(rec.within_band), "default_note": rec.default_note,
            "margin_bytes": rec.margin_bytes if rec.deployable else None, "time_source": rec.time_source,
            "candidates": len(rec.candidates), "fitting": sum(c.fits for c in rec.candidates)}))
    else:
        print_recommendation(rec, shown)
    return exits.DONE if rec.deployable else exits.NEGATIVE


def checked_inputs(args):
    """(plan settings, workloads, strategies) from the options, each refused in one line where bad."""
    from ..plan import GIVEN_BUDGET, get_strategy
    from ..study.auto import DEFAULT_BUDGETS_MB

    settings = PlanSettings(args.model, args.engine, args.deepgemm_version, temporaries="deepgemm", gpu=args.gpu)
    if args.budgets_mb is None:  # the release's own default among them, the value to beat
        own = None if settings.profile is None else settings.profile.default_budget_mb
        args.budgets_mb = sorted(set(DEFAULT_BUDGETS_MB) | ({own} if own is not None else set()))
    if args.free_gib is not None:
        if not args.free_gib > 0:
            raise UsageError(f"--free-gib {args.free_gib}: must be > 0")
        check_within_gpu("free_gib", free_bytes_from_gib(args.free_gib), settings.gpu, f"--free-gib {args.free_gib:g}")
    for mb in args.budgets_mb:
        check_within_gpu("budget_mb", budget_bytes_from_mb(mb), settings.gpu, f"--budgets-mb {mb:g}")
    workloads = [parse_workload(w) for w in args.workload]
    longest = settings.preset.max_model_len
    for text, w in zip(args.workload, workloads):
        if w.max_prompt_len > longest:  # vLLM refuses a prompt longer than max_model_len
            raise UsageError(f"--workload {text!r}: prompts of up to {w.max_prompt_len} tokens, more than "
                             f"{settings.model}'s max_model_len {longest}")
    strategies = None
    if args.strategies:
        chosen = [get_strategy(s) for s in args.strategies]
        if any(s.own_build or s.budget_source(None) != GIVEN_BUDGET for s in chosen):
            raise UsageError(f"--strategies {','.join(args.strategies)}: auto chooses among budgeted strategies "
                             "(the engine's own chunker: --engine)")
        strategies = tuple(s.name for s in chosen)
    if args.tp < 1:
        raise UsageError(f"--tp {args.tp}: must be a whole number >= 1")
    return settings, workloads, strategies


def derived_free(args, settings, scheduler):
    """The memory free when a step runs, from the server's flags (``ledger.free``): the release's
    profile run reserving its default knob's logits."""
    from ..ledger.free import server_free

    return server_free(settings, None, scheduler.most_decode_tokens, None, args.gpu_memory_utilization,
                       args.mem_fraction_static if settings.profile.engine == "sglang" else None)


def scheduler_from_args(args, settings):
    """(the scheduler the workloads run on, the settings given that differ from the release's)."""
    from ..engines.kv_capacity import deployment_kv_cache

    # the deployment's settings as the frontier takes them; SGLang's fraction is auto's own option
    # (default 0.9), which sizes its budget and cache below
    deployment = part_from_args(Deployment, args).where(mem_fraction_static=None)
    deployment.check_engines((settings.engine,))
    # the share of the GPU the release gives weights and KV: vLLM's utilization, SGLang's static fraction
    share = (args.mem_fraction_static if settings.profile.engine == "sglang" and args.kv_cache_tokens == "auto"
             else args.gpu_memory_utilization)
    if args.free_gib is None and args.kv_cache_tokens != "auto":
        share = None  # the utilization sizes the free memory here (derived_free), not a KV cache
    kv_cache = deployment_kv_cache(args.kv_cache_tokens, settings.model, settings.profile, settings.gpu, args.tp,
                                   share, args.kv_cache_dtype, args.speculative_tokens)
    (scheduler,) = part_from_args(SchedulerSettings, args).configs(
        settings.engine, settings.preset.kv_block, settings.gpu, args.speculative_tokens,
        kv_cache.tokens if kv_cache else args.kv_cache_tokens, args.dp)
    why = deployment.tp_refusal(settings.engine, scheduler)
    if why:
        raise UsageError(f"--tp {args.tp}: {why}")
    differs = "; ".join(filter(None, [not_default_text(settings.profile, scheduler, settings.gpu, kv_cache),
                                      *deployment.not_default(settings.engine),
                                      f"tp={args.tp}" if args.tp != 1 else ""]))
    return scheduler, differs


@dataclass(frozen=True)
class Shown:
    """What every answer of auto names: the model, release and GPU, the memory free, the
    scheduler settings that differ from the release's and the workloads."""

    settings: PlanSettings
    differs: str
    texts: list[str]  # the workloads as given
    workloads: list[ClosedLoopWorkload]
    free_gib: float
    free: object = None  # ledger.FreeMemory where the free memory was derived from the server's flags

    def header(self) -> str:
        n = len(self.workloads)
        return (f"{self.settings.model} on {self.settings.engine} ({self.settings.gpu}), {self.free_gib:g} GiB free, "
                f"{n} workload{'s' if n != 1 else ''} (modelled):")

    def print_tail(self, time_source: str, fitting: int, candidates: int) -> None:
        if self.free is not None:
            print(f"  free memory: {self.free.source}" + "".join(f"; assumed: {a}" for a in self.free.assumptions))
        print(f"  time: {time_source}")
        scheduler = f"not the release default: {self.differs}" if self.differs else f"the {self.settings.engine} defaults"
        print(f"  scheduler: {scheduler}")
        print(f"  {fitting} of {candidates} candidates fit")
        mixed = [f"{text} ({w.label}, seed {w.seed}: one schedule)" for text, w in zip(self.texts, self.workloads)
                 if not w.homogeneous]
        if mixed:
            print(f"  prompt lengths: {'; '.join(mixed)}")

    def json(self) -> dict:
        return {"model": self.settings.model, "engine": self.settings.engine, "gpu": self.settings.gpu,
                "free_bytes": free_bytes_from_gib(self.free_gib) if self.free is None else self.free.bytes,
                "free_source": f"--free-gib {self.free_gib:g}, given" if self.free is None else self.free.source,
                "scheduler_not_default": self.differs,
                "workloads": [{"concurrency": w.concurrency, "isl": w.isl, "osl": w.osl,
                               "shared_prefix": w.shared_prefix, "random_range_ratio": w.random_range_ratio,
                               "mix": mix_text(w.mix), "seed": w.seed} for w in self.workloads]}


def print_recommendation(rec, shown: Shown) -> None:
    """The header, the line to deploy (or why there is none), and what it rests on."""
    print(shown.header())
    print(rec.deploy_line)
    if rec.default_note:
        print(f"  {rec.default_note}")
    d = rec.deployable
    if d is not None:
        from ..timemodel.model import STAND_IN

        whose = ", another GPU's time standing in: see time below" if STAND_IN in rec.time_source else ""
        print(f"  {d.label}: {d.total_ms:.1f} ms indexer time over the mix (modelled{whose}), {d.total_chunks} chunks")
        print(f"  margin to the OOM frontier: {rec.margin_bytes / MIB:.0f} MiB "
              f"(worst step needs {d.needs_bytes / MIB:.0f} MiB of {rec.free_bytes / MIB:.0f} MiB free)")
    if rec.patched is not None and (d is None or rec.patched.total_ms < d.total_ms):
        print(f"  {rec.patched_line}")
    shown.print_tail(rec.time_source, sum(c.fits for c in rec.candidates), len(rec.candidates))


def _candidate_json(c) -> dict | None:
    if c is None:
        return None
    return {"strategy": c.strategy, "engine": c.engine, "setting": c.setting, "budget_mb": c.budget_mb,
            "padded_budget": c.padded, "total_ms_modelled": c.total_ms, "total_chunks": c.total_chunks,
            "total_ms_band": [c.total_low_ms, c.total_high_ms], "is_default": c.is_default,
            "worst_step_bytes": c.peak_transient_bytes,
            "reservation_shortfall_bytes": c.reservation_shortfall_bytes}

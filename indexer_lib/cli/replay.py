"""``indexer-lab replay``: run a vLLM release's own indexer prefill on the meta device for one
step (or its profile run alone) and print its peak next to the memory model's."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict

from ..checks import BadValue
from ..engines import DEFAULT_ENGINE, check_gpu, get_engine, replayed_engines, scheduler_defaults
from ..run.replay import replay_profile_run, replay_steps
from ..presets import MIB, check_within_gpu, format_bytes, get_model
from ..workload import StepBatch
from . import exits
from .common import MAX_STEP_ROWS, UsageError, add_gpu_option, add_model_option, check_seq_lens, engine_arg, int_list, working
from .exits import epilog


def register(subparsers) -> None:
    what = "run a vLLM release's own indexer code on the meta device for one step"
    p = subparsers.add_parser("replay", help=what, description=what,
                              epilog=epilog("the step (or the profile run) was replayed"))
    p.add_argument("--engine", default=DEFAULT_ENGINE, type=engine_arg,
                   help="a vLLM release whose code is installed (vllm==0.33.0 in .venv; "
                        f"{', '.join(n for n in replayed_engines() if n != get_engine(DEFAULT_ENGINE).name)} "
                        f"from scripts/install_engines.sh; default {get_engine(DEFAULT_ENGINE).name})")
    add_model_option(p)
    p.add_argument("--query-lens", type=int_list,
                   help="each request's new tokens in this step, comma-separated (required unless --profile-run)")
    p.add_argument("--seq-lens", type=int_list,
                   help="each request's length with them, comma-separated (required unless --profile-run)")
    p.add_argument("--budget-mb", type=int,
                   help="VLLM_SPARSE_INDEXER_MAX_LOGITS_MB, whole MiB (default: the release's)")
    p.add_argument("--max-num-batched-tokens", type=int, default=None,
                   help="rows of the engine's top-k output buffer (default: the release's on --gpu, "
                        "8192 on an H200)")
    add_gpu_option(p, "the release's max_num_batched_tokens on it; a GPU on which the release's indexer "
                      "path differs from the replayed one is refused")
    p.add_argument("--profile-run", action="store_true",
                   help="replay only the dummy forward: what vLLM reserves for the indexer at start-up")
    p.add_argument("--allocations", action="store_true",
                   help="list every allocation (size, shape, dtype, the vLLM line, allocated, freed)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=cmd_replay)


def cmd_replay(args) -> int:
    try:
        return _replay(args)
    except RuntimeError as e:  # the engine's code failed to run: one line, not a traceback
        print(f"indexer-lab replay: {e}", file=sys.stderr)
        return exits.FAILED


def _replay(args) -> int:
    gpu = check_gpu(args.engine, args.gpu)  # the replay runs the path the release takes on an sm90 GPU
    profile = get_engine(args.engine)
    if gpu.cuda_family == 100 and profile.sm100_logits != "float32":
        raise BadValue("gpu", f"GPU {gpu.name!r}: {profile.name} replays its sm90 path (fp32 logits) on the meta "
                              "device, while on this GPU DeepGEMM returns bf16 logits that the release copies to fp32 "
                              "(as_fp32_logits); replay on an sm90 GPU and plan on this one")
    get_model(args.model)  # a known model, before the release's code starts
    if args.budget_mb is not None:
        if args.budget_mb < 1:
            raise UsageError(f"--budget-mb {args.budget_mb}: must be a whole number of MiB >= 1")
        check_within_gpu("budget_mb", args.budget_mb * MIB, args.gpu, f"--budget-mb {args.budget_mb}")
    if args.max_num_batched_tokens is not None and not 1 <= args.max_num_batched_tokens <= MAX_STEP_ROWS:
        raise UsageError(f"--max-num-batched-tokens {args.max_num_batched_tokens}: must be in 1..{MAX_STEP_ROWS:,}")
    if args.max_num_batched_tokens is None:
        args.max_num_batched_tokens = scheduler_defaults(args.engine, args.gpu)["max_num_batched_tokens"]
    if args.profile_run:
        if args.query_lens or args.seq_lens:
            raise UsageError("--profile-run replays the dummy forward alone: drop --query-lens/--seq-lens")
        with working(f"replaying {args.engine}'s profile run (its code starts in a process of its own)"):
            r = replay_profile_run(args.engine, args.model, args.budget_mb, args.max_num_batched_tokens)
        if args.json:
            print(json.dumps(asdict(r)))
            return 0
        print(f"{r.engine} profile run, {r.model}: peak {format_bytes(r.peak_bytes)} "
              f"(modelled {format_bytes(r.modelled_peak_bytes)}), reserved after it "
              f"{format_bytes(r.reserved_bytes)} (modelled {format_bytes(r.modelled_reserved_bytes)}), "
              f"difference {r.modelled_peak_bytes - r.peak_bytes} bytes")
        return 0
    if not args.query_lens or not args.seq_lens:
        raise UsageError("give --query-lens and --seq-lens (one value per request), or --profile-run")
    if len(args.query_lens) != len(args.seq_lens):
        raise UsageError(f"--query-lens has {len(args.query_lens)} values and --seq-lens "
                         f"{len(args.seq_lens)}: one of each per request")
    check_seq_lens(args.seq_lens, args.model)
    StepBatch.from_lengths(args.query_lens, args.seq_lens)  # every length a whole number, no query past its sequence
    with working(f"replaying {args.engine}'s indexer on the step (its code starts in a process of its own)"):
        (r,) = replay_steps(args.engine, args.model, [(args.query_lens, args.seq_lens)], args.budget_mb,
                            args.max_num_batched_tokens, record=args.allocations)
    if args.json:
        out = r.to_row()
        out.update(chunks=[list(c) for c in r.chunks], logits_calls=[list(s) for s in r.logits_calls],
                   logits_allocated_bytes=list(r.logits_allocated_bytes),
                   profile_run_peak_bytes=r.profile_run_peak_bytes,
                   persistent_bytes=r.persistent_bytes)
        if args.allocations:
            out["allocations"] = list(r.allocations)
        print(json.dumps(out))
        return 0
    budget = "none" if r.budget_mb is None else f"{r.budget_mb} MiB"
    print(f"{r.engine}, {r.model}, {len(r.query_lens)} requests, {sum(r.query_lens)} rows x "
          f"{sum(r.seq_lens)} KV tokens, budget {budget}: {len(r.chunks)} chunks, replayed peak "
          f"{format_bytes(r.peak_bytes)} ({r.peak_bytes} bytes), modelled {r.modelled_peak_bytes} bytes, "
          f"difference {r.difference_bytes} bytes")
    print(f"  persistent {format_bytes(r.persistent_bytes)} (top-k buffer and workspace), chunk metadata "
          f"{format_bytes(r.metadata_bytes)}; the profile run peaked at "
          f"{format_bytes(r.profile_run_peak_bytes)}: step peak minus that = "
          f"{r.peak_bytes - r.profile_run_peak_bytes} bytes (what the KV-cache sizing did not see, if > 0)")
    for shape, nbytes in zip(r.logits_calls, r.logits_allocated_bytes):
        print(f"  logits {shape[0]} x {shape[1]}: {format_bytes(nbytes)} allocated")
    print(f"  {plan_difference(r, args.max_num_batched_tokens)}")
    if args.allocations:
        print(f"  {'bytes':>14} {'shape':>18} {'dtype':>8} {'alloc':>6} {'freed':>6}  by")
        for a in r.allocations:
            freed = "-" if a["freed"] is None else a["freed"]
            print(f"  {a['bytes']:>14} {str(a['shape']):>18} {a['dtype']:>8} {a['allocated']:>6} "
                  f"{freed:>6}  {a['by']}")
    return 0


def plan_difference(r, max_num_batched_tokens: int) -> str:
    """What ``indexer-lab plan`` shows for the same step, and why it differs from the replay:
    plan adds the project's reference executor's temporaries where the replay runs the engine's
    own path, and sizes the top-k buffer by the step's rows."""
    from ..memory import make_plan, memory_report
    from ..plan import PlanSettings
    from ..presets import MIB
    from ..workload import StepBatch

    batch = StepBatch.from_lengths(list(r.query_lens), list(r.seq_lens))
    budget = None if r.budget_mb is None else r.budget_mb * MIB
    plan = make_plan(batch, "engine", budget, PlanSettings(r.model, r.engine))
    shown = memory_report(plan).peak
    ours = shown - memory_report(plan, temporaries=None).peak
    engine = (memory_report(plan, topk_rows=max_num_batched_tokens, temporaries="replay").peak
              - memory_report(plan, topk_rows=max_num_batched_tokens, temporaries=None).peak)
    return (f"indexer-lab plan shows {format_bytes(shown)} ({shown} bytes) for this step: it adds the "
            f"project's reference executor's temporaries ({format_bytes(ours)}) where the engine's own path "
            f"adds {format_bytes(engine)}, and sizes the top-k buffer by the step's {batch.num_rows} rows, "
            f"the engine's by max_num_batched_tokens ({max_num_batched_tokens})")

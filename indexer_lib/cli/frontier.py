"""``indexer-lab frontier``: the OOM frontier by model over a grid, written as a table."""
from __future__ import annotations

import time

from ..engines.budget import SGLANG_MEM_FRACTION_STATIC
from ..plan import MEASURED_BUDGET, NO_BUDGET, get_strategy
from ..study.grid import Grid, same_budget
from ..workload import WORKLOAD_SOURCES
from .common import (UsageError, add_gpu_option, add_scheduler_arguments, engine_arg, finite_float, fraction, int_list,
                     number_list, str_list)


def register(subparsers) -> None:
    g = Grid()
    f = subparsers.add_parser("frontier", help="model the OOM frontier over a grid; write a table")
    f.add_argument("--model", default=g.model)
    f.add_argument("--concurrency", type=int_list, default=list(g.concurrency))
    f.add_argument("--isl", type=int_list, default=None,
                   help="prompt lengths (default: 2048 up to the model's max_model_len, "
                        f"{', '.join(map(str, g.isl))} for {g.model})")
    f.add_argument("--osl", type=int, default=g.osl[0])
    f.add_argument("--budget-mb", type=number_list, default=list(g.budget_mb))
    f.add_argument("--strategy", type=str_list, default=list(g.strategy))
    f.add_argument("--free-gib", type=number_list, default=list(g.free_gib))
    f.add_argument("--shared-prefix", type=int, default=g.shared_prefix[0])
    f.add_argument("--random-range-ratio", type=finite_float, default=g.random_range_ratio[0], metavar="R",
                   help="vLLM bench's random dataset: each prompt's length drawn uniformly from "
                        "[ISL x (1 - R), ISL x (1 + R)], R in [0, 1) (default 0: every prompt at ISL); "
                        "a point whose longest prompt passes max_model_len is skipped")
    f.add_argument("--mix", default=g.mix[0], metavar="SHARExLENGTH[+...]",
                   help="a share of the prompts at another length, in the same schedule: 0.1x131072 puts "
                        "ceil(0.1 x prompts) prompts at 131,072 tokens, the rest at the ISL axis' value")
    f.add_argument("--seed", type=int, default=g.length_seed,
                   help="seed of the length draws and of where a mix's prompts fall (default 0, vLLM bench's)")
    add_scheduler_arguments(f)
    f.add_argument("--deepgemm-version", default=g.deepgemm_version,
                   help="default: the --engine release's; another version: our strategies on that build")
    f.add_argument("--no-padding", action="store_true")
    f.add_argument("--workload-source", default=g.workload_source, choices=WORKLOAD_SOURCES,
                   help="step batches from the built-in simulator or vLLM's own scheduler "
                        "(needs vLLM: bash scripts/install_vllm.sh)")
    f.add_argument("--engine", default="vllm", type=engine_arg,
                   help="plan on this engine release (vllm==0.19.0, sglang==0.5.23; default: the latest "
                        f"vLLM, {g.engine[0]}); --strategy engine is its own chunker")
    add_gpu_option(f, "each release's scheduler defaults on it, SGLang's budget cap from its memory")
    f.add_argument("--mem-fraction-static", type=fraction, default=None,
                   help="SGLang: the server's --mem-fraction-static, which caps the logits budget SGLang "
                        "measures (f x (1 - it) x the GPU's memory) and, with --kv-cache-tokens auto, sizes its "
                        f"KV cache (default {SGLANG_MEM_FRACTION_STATIC}: SGLang's own choice on an H200)")
    f.add_argument("--temporaries", default="deepgemm", choices=("deepgemm", "reference", "none"),
                   help="whose per-chunk temporaries the peaks count: the H200 path (deepgemm, default), "
                        "the CPU reference executor, or none (logits and metadata only)")
    f.add_argument("--workers", type=int, default=1,
                   help="processes to spread the workloads over (0: one per CPU; default 1)")
    f.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help="compute the workloads on Ray (pip install -e \".[cluster]\"): alone, a local "
                        "instance (or RAY_ADDRESS); 'auto', the cluster this node joined; ray://HOST:10001")
    f.add_argument("--out", default="results/frontier/frontier.csv",
                   help="table to write (.csv or .parquet)")
    f.set_defaults(func=cmd_frontier)


def cmd_frontier(args) -> int:
    from ..study.executors import Local, Ray
    from ..study.results import check_table_path, write_table  # pandas only for this command
    from ..study.sweep import model_rows, to_frame

    check_table_path(args.out)  # before the work, so a bad path loses nothing
    if args.workers < 0:
        raise UsageError(f"--workers {args.workers}: must be >= 0 (0: one per CPU)")
    if args.isl is not None:
        for isl in args.isl:
            if args.shared_prefix > isl:
                raise UsageError(f"--shared-prefix {args.shared_prefix} > --isl {isl}: "
                                 "the shared prefix is part of the prompt")
    if args.ray is not None and args.workers != 1:
        raise UsageError("--ray and --workers: Ray spreads the workloads itself; give one of them")
    grid = Grid(
        model=args.model, concurrency=args.concurrency, isl=args.isl, osl=args.osl, budget_mb=args.budget_mb,
        strategy=args.strategy, free_gib=args.free_gib, shared_prefix=args.shared_prefix,
        random_range_ratio=args.random_range_ratio, mix=args.mix, length_seed=args.seed,
        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
        long_prefill_token_threshold=args.long_prefill_token_threshold, async_scheduling=args.async_scheduling,
        speculative_tokens=args.speculative_tokens, kv_cache_tokens=args.kv_cache_tokens, tp=args.tp,
        gpu_memory_utilization=args.gpu_memory_utilization, kv_cache_dtype=args.kv_cache_dtype,
        mem_fraction_static=args.mem_fraction_static,
        deepgemm_version=args.deepgemm_version, padded=not args.no_padding,
        workload_source=args.workload_source, engine=args.engine,
        temporaries=None if args.temporaries == "none" else args.temporaries, gpu=args.gpu,
    )
    executor = Ray(args.ray or None) if args.ray is not None else Local(args.workers or None)
    start = time.perf_counter()
    rows = list(model_rows(grid, executor))
    elapsed = time.perf_counter() - start
    path = write_table(to_frame(rows), args.out)
    print_frontier_summary(rows, grid)
    print(f"{len(rows)} points (modelled) in {elapsed:.1f} s -> {path}")
    return 0


def print_frontier_summary(rows: list[dict], grid: Grid) -> None:
    """Per strategy and budget: the largest ISL without OOM at each concurrency."""
    (engine,) = grid.engine
    differs = grid.not_default()
    lengths = lengths_phrase(grid)
    for free in grid.free_gib:
        print(f"{grid.model} on {engine}, {free} GiB free (modelled): largest ISL without OOM, per concurrency")
        if lengths:
            print(f"prompt lengths: {lengths}")
        print(f"scheduler: {'not the release default: ' + differs if differs else 'the release defaults'}")
        print(f"{'strategy':>12} {'budget':>8} " + " ".join(f"{c:>7}" for c in grid.concurrency))
        for strategy in grid.strategy:
            label = budget_label(strategy, engine, grid.model)
            for budget in grid.budgets(engine, strategy):
                cells = []
                for conc in grid.concurrency:
                    ok = [r["isl"] for r in rows
                          if r["free_gib"] == free and r["strategy"] == strategy
                          and same_budget(r["budget_mb"], budget) and r["concurrency"] == conc and not r["oom"]]
                    cells.append(f"{max(ok):>7}" if ok else f"{'OOM':>7}")
                print(f"{strategy:>12} {label or f'{budget:g}M':>8} " + " ".join(cells))


def lengths_phrase(grid: Grid) -> str:
    """How the grid's prompt lengths vary, for a summary line ('' when every prompt is at ISL)."""
    parts = [f"drawn from ISL x [1 - {r:g}, 1 + {r:g}] (vLLM bench's random range ratio)"
             for r in grid.random_range_ratio if r]
    parts += [f"mix {m} (share x length; the rest at ISL)" for m in grid.mix if m]
    return "; ".join(parts) + (f", seed {grid.length_seed}" if parts else "")


def budget_label(strategy: str, engine: str, model: str | None = None) -> str | None:
    """How a strategy's budget reads when it does not follow the grid's budget_mb axis (SGLang
    0.5.12-0.5.20 on a compressed-K model: its C4 path reads none; TensorRT-LLM's kpool path none)."""
    from ..engines import get_engine
    from ..shapes import get_model

    profile = get_engine(engine)
    if get_strategy(strategy).own_build and model is not None and profile.one_call_for(get_model(model)):
        return "none"
    source = get_strategy(strategy).budget_source(profile)
    return {NO_BUDGET: "none", MEASURED_BUDGET: "measured"}.get(source)

"""``indexer-lab frontier``: the OOM frontier by model over a grid, written as a table."""
from __future__ import annotations

import time

from ..plan import MEASURED_BUDGET, NO_BUDGET, get_strategy
from ..presets import format_bytes
from ..workload.simulator import WARM_CACHE
from ..sweep.grid import Grid, same_budget
from .common import UsageError
from .exits import epilog
from .options import add_setting_options, grid_from_args


def register(subparsers) -> None:
    what = "model the OOM frontier over a grid; write a table"
    f = subparsers.add_parser("frontier", help=what, description=what, epilog=epilog(
        "the table was written; points that run out of memory are rows of it, not a failure (the map is "
        "the answer: --free-gib is an axis, not a verdict)"))
    add_setting_options(f, *Grid.PARTS.values())  # one option per setting of the grid
    f.add_argument("--workers", type=int, default=1,
                   help="processes to spread the workloads over (0: one per CPU; default 1)")
    f.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help="compute the workloads on Ray (pip install -e \".[cluster]\"): alone, a local "
                        "instance (or RAY_ADDRESS); 'auto', the cluster this node joined; ray://HOST:10001")
    f.add_argument("--out", default="results/frontier/frontier.csv",
                   help="table to write (.csv or .parquet; default: %(default)s); its journal (OUT.journal) stays beside it, "
                        "so the same command again resumes an interrupted run and recomputes nothing "
                        "for a finished one")
    f.add_argument("--replace", action="store_true",
                   help="replace a file at --out that is not this grid's table (another grid's, or a "
                        "file indexer-lab did not write); without it such a file is refused and left as it is")
    f.set_defaults(func=cmd_frontier)


def cmd_frontier(args) -> int:
    from ..sweep.executors import Local, Ray
    from ..sweep.frontier import frontier_table  # pandas only for this command
    from ..sweep.results import check_table_path
    from ..sweep.store import StoreBusy, StoreError

    check_table_path(args.out, name="--out")  # before the work, so a bad path loses nothing
    if args.workers < 0:
        raise UsageError(f"--workers {args.workers}: must be >= 0 (0: one per CPU)")
    if args.isl is not None:
        for isl in args.isl:
            if args.shared_prefix > isl:
                raise UsageError(f"--shared-prefix {args.shared_prefix} > --isl {isl}: "
                                 "the shared prefix is part of the prompt")
    if args.ray is not None and args.workers != 1:
        raise UsageError("--ray and --workers: Ray spreads the workloads itself; give one of them")
    grid = grid_from_args(args)
    executor = Ray(args.ray or None) if args.ray is not None else Local(args.workers or None)
    start = time.perf_counter()
    try:
        table = frontier_table(grid, args.out, executor, replace=args.replace)
    except StoreBusy as e:
        raise UsageError(str(e)) from None
    except StoreError as e:  # not this grid's table: the user decides
        raise UsageError(f"{e}; --replace replaces it") from None
    elapsed = time.perf_counter() - start
    for note in table.notes:
        print(note)
    if table.kept:
        print(f"{table.kept} tasks read from {table.journal}, {table.computed} computed")
    print_frontier_summary(table.rows, grid)
    print(f"{len(table.rows)} points (modelled) in {elapsed:.1f} s -> {table.path}")
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
        if grid.warm_cache:  # not the default cold cache: said wherever the numbers are
            print(f"prefix cache: {WARM_CACHE}")
        print(f"scheduler: {'not the release default: ' + differs if differs else 'the release defaults'}")
        print(verdict_rule([r for r in rows if r["free_gib"] == free], engine))
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


def verdict_rule(rows: list[dict], engine: str) -> str:
    """The rule a table's verdicts follow (the ledger's step lines, for the summary above it), and
    how often the decode line is the one that fails."""
    decodes = [r for r in rows if r.get("decode_bytes") is not None]
    if not decodes:
        decode = f"no decode line ({engine}'s decode path for this model is not read)"
    else:
        worst = max(decodes, key=lambda r: r["decode_bytes"])
        failed = sum(r.get("oom_line") == "decode" for r in rows)
        decode = (f"the worst decode step's paged logits (up to {format_bytes(worst['decode_bytes'])}, "
                  f"{worst['worst_decode_tokens']:,} decode tokens at the model's max_model_len)"
                  + (f", the failing line at {failed} point(s)" if failed else ""))
    return (f"verdict: OOM where the worst prefill step's transient peak or {decode} exceeds the free memory "
            "(the caching allocator over a run: indexer-lab deploy)")


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
    from ..presets import get_model

    profile = get_engine(engine)
    if get_strategy(strategy).own_build and model is not None and profile.one_call_for(get_model(model)):
        return "none"
    source = get_strategy(strategy).budget_source(profile)
    return {NO_BUDGET: "none", MEASURED_BUDGET: "measured"}.get(source)

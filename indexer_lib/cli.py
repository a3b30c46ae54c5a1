"""``indexer-lab`` command line: plan one step, or map the frontier by model.

Bad input ends with one line naming the value and the rule, exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

from .frontier import FrontierGrid, format_bytes, frontier_rows
from .memory import memory_report
from .padding import DEEPGEMM_RULES, DEFAULT_DEEPGEMM_VERSION
from .plan import STRATEGIES, make_plan
from .shapes import MODELS, budget_bytes_from_mb
from .workload import WORKLOAD_SOURCES, StepBatch

# modules that add a subcommand with ``register(subparsers)``; each sets ``func``
EXTRA_COMMANDS = ("indexer_lib.cli_run", "indexer_lib.cli_auto")


class UsageError(ValueError):
    """Bad command-line input: reported as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr (no usage block), exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def int_list(text: str) -> list[int]:
    values = []
    for item in text.split(","):
        item = item.strip()
        try:
            values.append(int(item))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not a whole number") from None
    return values


def number_list(text: str) -> list[float]:
    values = []
    for item in text.split(","):
        try:
            v = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not a number") from None
        values.append(int(v) if v.is_integer() else v)
    return values


def str_list(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def add_batch_options(p: argparse.ArgumentParser) -> None:
    """The options that describe one step batch and how it is split (plan, run)."""
    p.add_argument("--strategy", default="vllm", help=f"one of {', '.join(STRATEGIES)}")
    p.add_argument("--budget-mb", type=float, help="logits budget in MiB (fractions allowed)")
    p.add_argument("--budget-bytes", type=int, help="logits budget in bytes")
    p.add_argument("--workspace-tokens", type=int, help="K gather workspace (default 40 x max_model_len)")
    p.add_argument("--query-lens", type=int_list, required=True, help="comma-separated, one per request")
    p.add_argument("--seq-lens", type=int_list, required=True, help="comma-separated, one per request")
    p.add_argument("--model", default="deepseek-v3.2", help=f"one of {', '.join(MODELS)}")
    p.add_argument("--deepgemm-version", default=DEFAULT_DEEPGEMM_VERSION,
                   help=f"padding rules: one of {', '.join(DEEPGEMM_RULES)}")
    p.add_argument("--no-padding", action="store_true",
                   help="budget with vLLM's unpadded M x N x 4 arithmetic")
    p.add_argument("--compressed", action="store_true",
                   help="causal: DeepGEMM's compressed max_seqlen_k rows")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def budget_from_args(args) -> int | None:
    if args.budget_mb is not None and args.budget_bytes is not None:
        raise UsageError("--budget-mb and --budget-bytes: give one of them, not both")
    if args.budget_bytes is not None:
        if args.budget_bytes <= 0:
            raise UsageError(f"--budget-bytes {args.budget_bytes}: must be > 0")
        return args.budget_bytes
    if args.budget_mb is not None:
        return budget_bytes_from_mb(args.budget_mb)
    if args.strategy == "n-only":
        return None
    return budget_bytes_from_mb(512)  # vLLM's default VLLM_SPARSE_INDEXER_MAX_LOGITS_MB


def plan_from_args(args):
    batch = StepBatch.from_lengths(args.query_lens, args.seq_lens)
    options = {"compressed": True} if args.compressed else {}
    if args.compressed and args.strategy != "causal":
        raise UsageError(f"--compressed applies to the causal strategy, not {args.strategy!r}")
    return make_plan(batch, args.strategy, budget_from_args(args), args.workspace_tokens,
                     args.model, args.deepgemm_version, padded=not args.no_padding, **options)


def plan_json(plan, report) -> dict:
    return {
        "strategy": plan.strategy,
        "model": plan.model,
        "deepgemm_version": plan.deepgemm_version,
        "padded_budget": plan.padded,
        "budget_bytes": plan.budget_bytes,
        "workspace_tokens": plan.workspace_tokens,
        "num_chunks": plan.num_chunks,
        "peak_bytes": report.peak,
        "peak_transient_bytes": report.peak_transient,
        "chunks": [c.to_json() for c in plan.chunks],
    }


def cmd_plan(args) -> int:
    plan = plan_from_args(args)
    report = memory_report(plan)
    if args.json:
        print(json.dumps(plan_json(plan, report)))
        return 0
    budget = "none" if plan.budget_bytes is None else format_bytes(plan.budget_bytes)
    print(f"{plan.strategy}: {plan.num_chunks} chunks, budget {budget} "
          f"({'padded' if plan.padded else 'unpadded'} DeepGEMM {plan.deepgemm_version}), "
          f"peak {format_bytes(report.peak)} ({format_bytes(report.peak_transient)} transient)")
    print(f"{'#':>4} {'requests':>11} {'rows':>15} {'tokens':>15} {'kv':>8} {'cols':>8} "
          f"{'logits':>11}  gather  over")
    for i, c in enumerate(plan.chunks):
        print(f"{i:>4} {str(list(c.requests)):>11} {str(list(c.rows)):>15} "
              f"{str([c.token_start, c.token_end]):>15} {c.kv_tokens:>8} {c.logits_cols:>8} "
              f"{format_bytes(c.logits_bytes):>11}  {'yes' if c.gather else 'no ':>6}  "
              f"{'YES' if c.over_budget else '-'}")
    return 0


def cmd_frontier(args) -> int:
    from .results import check_table_path, write_table  # pandas only for this command

    check_table_path(args.out)  # before the work, so a bad path loses nothing
    grid = FrontierGrid(
        model=args.model, concurrency=tuple(args.concurrency), isl=tuple(args.isl),
        osl=args.osl, budget_mb=tuple(args.budget_mb), strategy=tuple(args.strategy),
        free_gib=tuple(args.free_gib), shared_prefix=args.shared_prefix,
        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        deepgemm_version=args.deepgemm_version, padded=not args.no_padding,
        workload_source=args.workload_source,
    )
    for isl in grid.isl:
        if grid.shared_prefix > isl:
            raise UsageError(f"--shared-prefix {grid.shared_prefix} > --isl {isl}: "
                             "the shared prefix is part of the prompt")
    start = time.perf_counter()
    rows = list(frontier_rows(grid))
    elapsed = time.perf_counter() - start
    path = write_table(rows, args.out)
    print_frontier_summary(rows, grid)
    print(f"{len(rows)} points (modelled) in {elapsed:.1f} s -> {path}")
    return 0


def print_frontier_summary(rows: list[dict], grid: FrontierGrid) -> None:
    """Per strategy and budget: the largest ISL without OOM at each concurrency."""
    for free in grid.free_gib:
        print(f"{grid.model}, {free} GiB free (modelled): largest ISL without OOM, per concurrency")
        print(f"{'strategy':>12} {'budget':>8} " + " ".join(f"{c:>7}" for c in grid.concurrency))
        for strategy in grid.strategy:
            budgets = grid.budget_mb[:1] if strategy == "n-only" else grid.budget_mb
            for budget in budgets:
                cells = []
                for conc in grid.concurrency:
                    ok = [r["isl"] for r in rows
                          if r["free_gib"] == free and r["strategy"] == strategy
                          and r["budget_mb"] == budget and r["concurrency"] == conc and not r["oom"]]
                    cells.append(f"{max(ok):>7}" if ok else f"{'OOM':>7}")
                label = "none" if strategy == "n-only" else f"{budget:g}M"
                print(f"{strategy:>12} {label:>8} " + " ".join(cells))


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="indexer-lab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="split one step batch into chunks and print the plan")
    add_batch_options(p)
    p.set_defaults(func=cmd_plan)

    g = FrontierGrid()
    f = sub.add_parser("frontier", help="model the OOM frontier over a grid; write a table")
    f.add_argument("--model", default=g.model)
    f.add_argument("--concurrency", type=int_list, default=list(g.concurrency))
    f.add_argument("--isl", type=int_list, default=list(g.isl))
    f.add_argument("--osl", type=int, default=g.osl)
    f.add_argument("--budget-mb", type=number_list, default=list(g.budget_mb))
    f.add_argument("--strategy", type=str_list, default=list(g.strategy))
    f.add_argument("--free-gib", type=number_list, default=list(g.free_gib))
    f.add_argument("--shared-prefix", type=int, default=g.shared_prefix)
    f.add_argument("--max-num-batched-tokens", type=int, default=g.max_num_batched_tokens)
    f.add_argument("--max-num-seqs", type=int, default=g.max_num_seqs)
    f.add_argument("--long-prefill-token-threshold", type=int, default=g.long_prefill_token_threshold)
    f.add_argument("--deepgemm-version", default=g.deepgemm_version)
    f.add_argument("--no-padding", action="store_true")
    f.add_argument("--workload-source", default=g.workload_source, choices=WORKLOAD_SOURCES,
                   help="step batches from the built-in simulator or vLLM's own scheduler "
                        "(needs vLLM: bash scripts/install_vllm.sh)")
    f.add_argument("--out", default="results/frontier/frontier.csv",
                   help="table to write (.csv or .parquet)")
    f.set_defaults(func=cmd_frontier)

    for name in EXTRA_COMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed one usage line
        return int(e.code or 0)
    try:
        return args.func(args)
    except ValueError as e:  # UsageError and the library's ValueErrors: one line, exit 2
        print(f"indexer-lab {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""``indexer-lab plan``: split one step batch into chunks and print the plan (or its JSON)."""
from __future__ import annotations

import json

from ..memory import memory_report
from ..study.frontier import format_bytes
from .common import add_batch_options, plan_from_args


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="split one step batch into chunks and print the plan")
    add_batch_options(p)
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
    if args.json:
        print(json.dumps(plan_json(plan, report)))
        return 0
    budget = "none" if plan.budget_bytes is None else format_bytes(plan.budget_bytes)
    on = f" on {plan.engine}" if plan.engine else ""
    print(f"{plan.strategy}{on}: {plan.num_chunks} chunks, budget {budget} "
          f"({'padded' if plan.padded else 'unpadded'} DeepGEMM {plan.deepgemm_version}), "
          f"peak {format_bytes(report.peak)} ({format_bytes(report.peak_transient)} transient)")
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
    return 0

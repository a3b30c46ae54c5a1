"""``indexer-lab time``: a step's modelled indexer time per kernel, chunk and layer."""
from __future__ import annotations

import json

from ..checks import BadValue
from ..timemodel import kernel_rates
from ..timemodel.model import TimeModel
from ..memory import memory_report
from .common import add_batch_options, plan_from_args, verdict, verdict_code, verdict_line
from .exits import epilog


def register(subparsers) -> None:
    what = "a step's modelled indexer time per kernel, chunk and layer (the same step arguments as plan)"
    p = subparsers.add_parser("time", help=what, description=what,
                              epilog=epilog("the step was timed and, with --free-gib, it fits",
                                            "with --free-gib: the step runs out of memory (OOM)"))
    add_batch_options(p)
    p.set_defaults(func=cmd_time)


def time_json(plan, t, tm: TimeModel) -> dict:
    low, high = t.bounds_us()
    return {
        "mode": "model", "time_model": tm.source, "gpu": tm.gpu, "model": plan.model, "engine": plan.engine,
        "strategy": plan.strategy, "budget_bytes": plan.budget_bytes, "num_chunks": plan.num_chunks,
        "chunks": [c.to_json() for c in t.chunks],
        "total_us": round(t.total_us, 3), "low_us": round(low, 3), "high_us": round(high, 3),
        "bound": t.bound, "host_us": round(t.host_us, 3),
        "indexer_layers": t.indexer_layers, "step_us": round(t.step_us, 3),
        "assumed": kernel_rates.assumed_constants(),
    }


def cmd_time(args) -> int:
    plan = plan_from_args(args)
    tm = TimeModel.from_data(gpu=args.gpu)
    try:
        t = tm.plan_time(plan)
    except ValueError as e:  # a GPU the kernels cannot be timed on
        raise BadValue("gpu", str(e)) from None
    v = verdict(plan, args)  # as plan gives it
    if args.json:
        print(json.dumps({**time_json(plan, t, tm), **v.to_json()}))
        return verdict_code(v)
    low, high = t.bounds_us()
    on = f" on {plan.engine}" if plan.engine else ""
    print(f"{plan.strategy}{on}, {plan.model} on {tm.gpu}: {plan.num_chunks} chunk{'s' if plan.num_chunks != 1 else ''}, one layer "
          f"{t.total_us:,.1f} us (band {low:,.1f}-{high:,.1f}; {t.bound}-bound), "
          f"{t.indexer_layers} indexer layers {t.step_us / 1e3:,.2f} ms (modelled)")
    kernels = [k for k in kernel_rates.KERNELS if any(k in c.kernels for c in t.chunks)]
    print(f"{'#':>4} " + " ".join(f"{k + ' us':>11}" for k in kernels) + f" {'total us':>11} {'host us':>9}")
    for i, c in enumerate(t.chunks):
        print(f"{i:>4} " + " ".join(f"{c.kernels.get(k, 0.0):>11,.1f}" for k in kernels)
              + f" {c.gpu_us:>11,.1f} {c.host_us:>9,.1f}")
    print(f"time model: {tm.source}; assumed: {', '.join(kernel_rates.assumed_constants())}")
    line = verdict_line(v)
    if line:
        print(line)
    return verdict_code(v)

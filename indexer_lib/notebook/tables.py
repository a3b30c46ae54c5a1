"""Tables and sentences the notebooks show, save and summarise (Markdown included)."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..memory import memory_report, plan_at
from ..plan import BASELINE, PlanSettings
from ..presets import GIB, free_bytes_from_gib
from ..timemodel.model import plan_features


FRACTION_WORDS = ("error", "overhead", "share")  # a column of fractions, unless its name gives a unit


def markdown_table(frame, floatfmt: str = ".3g") -> str:
    """A pipe table a design document can paste (no extra dependency), as people read numbers:
    ``floatfmt``'s significant digits without e-notation (1,024, not 1.02e+03), a ``*_bytes`` column
    in MiB, a fraction column (error, overhead, share) in percent, and a budget column's missing or
    -1 value as "none" (a strategy without a budget)."""
    digits = int(floatfmt.strip(".g") or 3)
    cols, columns = [], []
    for c in frame.columns:
        name = str(c)
        kind = ("bytes" if name.endswith("_bytes") else
                "fraction" if "(" not in name and any(w in name for w in FRACTION_WORDS) else
                "")
        cols.append({"bytes": f"{name.removesuffix('_bytes')} (MiB)", "fraction": f"{name} (%)"}.get(kind, name))
        columns.append(kind)

    budgets = ["budget" in str(c) for c in frame.columns]

    def cell(v, kind, budget):
        if budget and (v is None or v == -1 or (isinstance(v, float) and math.isnan(v))):
            return "none"
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or (not kind and isinstance(v, numbers.Integral)):
            return str(v)
        v = v / 2**20 if kind == "bytes" else 100 * v if kind == "fraction" else v
        return plain_number(float(v), digits)

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(cell(v, kind, b) for v, kind, b in zip(row, columns, budgets)) + " |")
    return "\n".join(lines)


def plain_number(v: float, digits: int = 3) -> str:
    """``v`` to ``digits`` significant digits (trailing zeros dropped), never in e-notation: 1,024;
    0.0123; 2.63."""
    if math.isnan(v):
        return ""
    if v == 0 or math.isinf(v):
        return "0" if v == 0 else str(v)
    decimals = min(12, max(0, digits - 1 - math.floor(math.log10(abs(v)))))
    text = f"{round(v, decimals):,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text  # 64, not 64.0


def per_budget(frame, index, values: str):
    """``values`` with one column per budget (MiB); a strategy that reads no budget (its rows'
    budget_mb is NaN) has its one value in the column "none"."""
    budgets = frame["budget_mb"]
    columns = [f"{b:g}" for b in sorted(budgets.dropna().unique())] + (["none"] if budgets.isna().any() else [])
    labelled = frame.assign(budget_mb=[("none" if b != b else f"{b:g}") for b in budgets])
    return labelled.pivot_table(index=index, columns="budget_mb", values=values,
                                aggfunc="first").reindex(columns=columns)


def _k(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens >= 1024 and tokens % 1024 == 0 else str(tokens)


def frontier_sentence(frame, budget_mb: float = 512, strategy: str = "vllm") -> str:
    """Line 1 of the summary: the budgeted strategy's reach, and where no budget OOMs."""
    model, free = frame["model"].iloc[0], float(frame["free_gib"].iloc[0])
    data = frame[(frame["free_gib"] == free) & (frame["mode"] == "model")]
    engine = data["engine"].iloc[0] if "engine" in data.columns and len(data) else ""
    if engine:
        data = data[data["engine"] == engine]
    cmax, imax = data["concurrency"].max(), data["isl"].max()
    from .plots import lengths_of

    lengths = lengths_of(data)
    parts = [f"{model}{' on ' + engine if engine else ''}, {free:g} GiB free"
             f"{', ' + lengths if lengths else ''} (modelled):"]
    budgeted = data[(data["strategy"] == strategy) & (data["budget_mb"] == budget_mb)]
    if len(budgeted):
        if not budgeted["oom"].any():
            parts.append(f"`{strategy}` at {budget_mb:g} MiB never OOMs up to concurrency "
                         f"{cmax} x ISL {_k(imax)};")
        else:
            parts.append(f"`{strategy}` at {budget_mb:g} MiB OOMs {oom_limit(budgeted)};")
    unbudgeted = data[data["strategy"] == BASELINE]
    if len(unbudgeted):
        if unbudgeted["oom"].any():
            parts.append(f"without a budget it OOMs {oom_limit(unbudgeted)}.")
        else:
            parts.append("without a budget nothing in the grid OOMs.")
    return " ".join(parts)


def oom_limit(rows) -> str:
    """Where a strategy's OOMs begin over a concurrency x ISL grid, saying what sets the limit: per
    concurrency the shortest input length that OOMs (one ISL at every concurrency: the input length
    sets it; else the first OOM at the lowest and at the highest concurrency that has one)."""
    oom = rows[rows["oom"]].sort_values(["concurrency", "isl"])
    first_isl = oom.groupby("concurrency")["isl"].min()
    suffix = _failing(oom.iloc[0])
    if len(first_isl) == rows["concurrency"].nunique() and first_isl.nunique() == 1:
        return f"from ISL {_k(int(first_isl.iloc[0]))} at every concurrency (the input length sets the limit){suffix}"
    low, high = first_isl.index.min(), first_isl.index.max()
    text = f"from concurrency {low} x ISL {_k(int(first_isl[low]))}"
    if high != low:
        text += f" to concurrency {high} x ISL {_k(int(first_isl[high]))}"
    return text + suffix


def _failing(row) -> str:
    """Where the ledger's decode line, not the prefill step, is what fails (a row's ``oom_line``)."""
    return " (its decode step's paged logits)" if row.get("oom_line") == "decode" else ""


def step_strategy_table(steps: dict, strategies, budget_mb: float, settings: PlanSettings,
                        free_gib: float | None = None):
    """Strategies side by side on the same steps (modelled): peak incl. padding (the settings'
    temporaries), allocated vs useful logits, chunks, gathers, the published time model's time."""
    import pandas as pd

    from ..timemodel.model import TimeModel

    tm = TimeModel.published().for_gpu(settings.gpu)
    rows = []
    for name, batch in steps.items():
        for s in strategies:
            plan = plan_at(batch, s, budget_mb, settings)
            f = plan_features(plan)
            peak = memory_report(plan).peak_transient
            rows.append({
                "step": name, "strategy": s,
                "budget": "none" if plan.budget_bytes is None else f"{budget_mb:g} MiB",
                "engine": plan.engine or "", "deepgemm_version": plan.deepgemm_version,
                "rows (M)": batch.num_rows, "kv tokens (N)": batch.num_kv_tokens,
                "peak_transient_bytes": peak, "peak GiB (incl. padding)": peak / GIB,
                "allocated_logits_bytes": f["allocated_logits_bytes"],
                "useful_logits_bytes": f["useful_logits_bytes"],
                "allocated / useful": f["allocated_logits_bytes"] / f["useful_logits_bytes"],
                "chunks": f["chunks"], "gathers": f["gathers"], "time_ms": tm.features_ms(f),
                "time_source": tm.source,
                "fits": None if free_gib is None else peak <= free_bytes_from_gib(free_gib),
                "mode": "model",
            })
    return pd.DataFrame(rows)


def strategy_sentence(table, step: str) -> str:
    """Line 3 of the summary: which strategy allocates least on one step."""
    rows = table[table["step"] == step].sort_values("peak_transient_bytes")
    best = rows.iloc[0]
    others = ", ".join(f"`{r['strategy']}` {r['peak GiB (incl. padding)']:.2f} GiB"
                       for _, r in rows.iloc[1:].iterrows())
    cost = ""
    if "time_ms" in rows:  # the lowest peak is bought with chunks: say what they cost
        fastest = rows.loc[rows["time_ms"].idxmin()]
        cost = (" at the fastest time" if best["time_ms"] <= fastest["time_ms"] else
                f" at +{100 * (best['time_ms'] / fastest['time_ms'] - 1):.0f}% time against the fastest "
                f"(`{fastest['strategy']}`, {fastest['chunks']} chunk{'s' if fastest['chunks'] != 1 else ''})")
    return (f"On the step \"{step}\" at {best['budget']}: `{best['strategy']}` peaks lowest, "
            f"{best['peak GiB (incl. padding)']:.2f} GiB incl. padding in {best['chunks']} "
            f"chunks{cost} (modelled); {others}.")


def budget_payoff(table, free_gib: float, max_overhead: float):
    """Per step and strategy: the largest budget that fits ``free_gib``, the smallest
    budget whose time overhead stays within ``max_overhead`` (below it, a smaller
    budget stops paying), and whether one budget does both."""
    import pandas as pd

    free = free_bytes_from_gib(free_gib)
    rows = []
    for (step, strategy), g in table.groupby(["step", "strategy"], sort=False):
        if strategy == BASELINE:
            continue
        g = g.sort_values("budget_mb")
        fitting = g[g["peak_transient_bytes"] <= free]
        cheap = g[g["overhead"] <= max_overhead]
        best = fitting["budget_mb"].max() if len(fitting) else math.nan
        floor = cheap["budget_mb"].min() if len(cheap) else math.nan
        at_best = g[g["budget_mb"] == best]
        rows.append({
            "step": step, "strategy": strategy,
            "largest budget that fits (MiB)": best,
            f"smallest budget within {max_overhead:.0%} overhead (MiB)": floor,
            "overhead at the fitting budget": float(at_best["overhead"].iloc[0]) if len(at_best) else math.nan,
            "time source": ", ".join(sorted(set(g["time_source"]))),
            "verdict": ("fits and pays" if best == best and floor == floor and best >= floor
                        else "fits, but chunking costs more than the limit" if best == best
                        else "does not fit at any budget listed"),
        })
    return pd.DataFrame(rows)


def overhead_sentence(payoff, table, max_overhead: float) -> str:
    """Line 2 of the summary: chunk counts and where budgets stop paying."""
    worst = table.sort_values("chunks").iloc[-1]
    # every strategy with that many chunks there (the figure draws them as one line)
    tied = table[(table["step"] == worst["step"]) & (table["budget_mb"] == worst["budget_mb"])
                 & (table["chunks"] == worst["chunks"])]
    names = [f"`{s}`" for s in dict.fromkeys(tied["strategy"])]
    who = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    floors = payoff.iloc[:, 3].dropna()
    source = ", ".join(sorted(set(table["time_source"])))
    return (f"Chunks: up to {worst['chunks']} per step ({who} at "
            f"{worst['budget_mb']:g} MiB on \"{worst['step']}\", +{100 * worst['overhead']:.1f}% "
            f"{source} time); budgets stop paying below {floors.max():g} MiB "
            f"(>{max_overhead:.0%} overhead) on the hardest step."
            if len(floors) else f"Chunks: up to {worst['chunks']} per step ({source} time).")


def measured_overhead(rows):
    """Measured sweep rows as chunk-overhead rows: per workload and strategy, time vs
    the same workload's unsplit (``n-only``) time, with the modelled time beside it."""
    import pandas as pd

    out = []
    for (model, conc, isl), g in rows.groupby(["model", "concurrency", "isl"]):
        base = g[g["strategy"] == BASELINE]["time_ms"]
        base_model = g[g["strategy"] == BASELINE]["model_time_ms"]
        if base.empty:
            continue
        step = f"{model} c{conc} x ISL {_k(int(isl))} (worst step)"
        for r in g.itertuples(index=False):
            common = {"step": step, "strategy": r.strategy, "budget_mb": r.budget_mb,
                      "chunks": r.worst_chunks, "gathers": r.worst_gathers,
                      "peak_transient_bytes": r.peak_transient_bytes}
            out.append({**common, "time_ms": r.time_ms, "overhead": r.time_ms / base.iloc[0] - 1,
                        "time_source": "measured"})
            out.append({**common, "time_ms": r.model_time_ms,
                        "overhead": r.model_time_ms / base_model.iloc[0] - 1,
                        "time_source": "modelled"})
    return pd.DataFrame(out)

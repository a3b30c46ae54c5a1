"""Notebook 02's time figures: the published checks, each step's time per kernel with its band,
and what each budget adds to time to first token (all modelled, and titled so)."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from . import style

# one colour per kernel, from the figures' colour-blind-safe palette
KERNEL_COLOURS = {"gather": style.PALETTE[6], "logits": style.PALETTE[0], "clean": style.PALETTE[1],
                  "topk": style.PALETTE[2]}


def published_checks(checks) -> Figure:
    """Modelled against published time per published kernel timing, error in percent."""
    rows = list(checks)
    fig = style.figure(0.28 * len(rows) + 1.6)
    ax = fig.subplots()
    y = np.arange(len(rows))[::-1]
    errors = [100 * r["error"] for r in rows]
    colours = [KERNEL_COLOURS[r["kernel"]] for r in rows]
    ax.barh(y, errors, color=colours)
    held = [(yi, 100 * r["held_out_error"]) for yi, r in zip(y, rows) if r.get("held_out_error") is not None]
    if held:
        ax.scatter([h for _, h in held], [yi for yi, _ in held], marker="o", facecolors="none",
                   edgecolors="black", s=18, zorder=3)
    ax.axvspan(-10, 10, color="#dddddd", zorder=0)
    ax.axvline(0, color="black", linewidth=0.8)
    # the published time in the row's label: beside a bar it would sit under the hollow circles
    ax.set_yticks(y, [f"{r['kernel']} ({r['gpu']}) {r['shape']}: {r['published_us']:g} us" for r in rows], fontsize=7)
    ax.set_xlabel("modelled / published - 1 (%)")
    lim = max(15.0, max(abs(e) for e in errors + [h for _, h in held]) + 3)
    ax.set_xlim(-lim, lim)
    handles = [Patch(color=c, label=k) for k, c in KERNEL_COLOURS.items() if any(r["kernel"] == k for r in rows)]
    handles.append(Patch(color="#dddddd", label="within 10%"))
    if held:
        handles.append(Line2D([], [], marker="o", linestyle="none", markerfacecolor="none",
                              markeredgecolor="black", label="fitted without\nthis row"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)
    style.title(fig, "The time model against every published kernel timing",
                "fitted to DeepGEMM's test on an H200 and vLLM's top-k on an H20; the other rows checks "
                "on the GPU each was published on")
    return fig


def kernel_breakdown(table, strategy: str, model: str, engine: str, gpu: str) -> Figure:
    """One layer's modelled indexer time per kernel, per budget, one panel per step; whiskers: the
    band of the published checks; a black tick: the host's time to issue the kernels, and where it
    is the longer, a hatched bar up to it (the layer lasts the host's time)."""
    rows = table[table["strategy"] == strategy]
    steps = list(dict.fromkeys(rows["step"]))
    fig = style.figure(2.0 * len(steps) + 1.4)
    axes = fig.subplots(len(steps), 1, squeeze=False)[:, 0]
    kernels = [k for k in KERNEL_COLOURS if f"{k}_ms" in rows and rows[f"{k}_ms"].sum() > 0]
    for ax, step in zip(axes, steps):
        r = rows[rows["step"] == step].sort_values("budget_mb")
        x = np.arange(len(r))
        bottom = np.zeros(len(r))
        for k in kernels:
            ax.bar(x, r[f"{k}_ms"], bottom=bottom, color=KERNEL_COLOURS[k], label=k, width=0.7)
            bottom = bottom + r[f"{k}_ms"].to_numpy()
        ax.errorbar(x, r["time_ms"], yerr=[r["time_ms"] - r["time_low_ms"], r["time_high_ms"] - r["time_ms"]],
                    fmt="none", ecolor="black", capsize=3, linewidth=0.8, label="band (published checks)")
        ax.scatter(x, r["host_ms"], marker="_", s=200, color="black", label="host, issuing the kernels")
        host = (r["bound"] == "host").to_numpy() if "bound" in r else r["host_ms"].to_numpy() > bottom
        if host.any():  # the layer lasts as long as the host: its kernels' bar is not the layer's time
            ax.bar(x[host], r["host_ms"].to_numpy()[host], width=0.7, fill=False, edgecolor="black", hatch="//",
                   linewidth=0.8, label="host-bound: the layer lasts the host's time")
        ax.set_xticks(x, [style.size_label(mb / 1024) for mb in r["budget_mb"]])
        ax.set_ylabel("ms per layer", fontsize=8)
        chunks = ", ".join(str(int(c)) for c in r["chunks"])
        ax.set_title(f"{step} (chunks: {chunks})", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    axes[-1].set_xlabel("logits budget")
    handles, labels = axes[0].get_legend_handles_labels()
    style.legend_below(fig, handles, labels, ncol=3)
    style.title(fig, f"Where a step's indexer time goes, kernel by kernel: {strategy}, one layer on {gpu}",
                style.context(model, engine, mode="modelled"))
    return fig


def ttft_cost(rows, model: str, engine: str, gpu: str, workload: str) -> Figure:
    """Added time to first token (p50, p90) and per output token against the budget, per strategy."""
    import pandas as pd

    data = pd.DataFrame(rows)
    fig = style.figure(6.0)
    top, bottom = fig.subplots(2, 1, sharex=True)
    looks = style.series_styles(dict.fromkeys(data["strategy"]))
    for strategy, r in data.groupby("strategy", sort=False):
        r = r.sort_values("budget_mb")
        colour, marker = looks[strategy]["color"], looks[strategy]["marker"]
        top.plot(r["budget_mb"], r["added_ttft_p50_ms"], marker=marker, color=colour, label=f"{strategy} p50")
        top.plot(r["budget_mb"], r["added_ttft_p90_ms"], marker=marker, linestyle="--", color=colour,
                 markerfacecolor="none", label=f"{strategy} p90")
        bottom.plot(r["budget_mb"], r["added_per_output_token_ms"], marker=marker, color=colour, label=strategy)
    style.mib_ticks(bottom.xaxis, sorted(set(data["budget_mb"])))
    bottom.set_xlabel("logits budget")
    top.set_ylabel("added time to first token (ms)")
    bottom.set_ylabel("added time per output token (ms)")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        style.legend_right(ax)
    style.title(fig, f"What the budget adds to users' latency on {gpu}: the indexer only, against one chunk",
                f"{workload}; {style.context(model, engine, mode='modelled')}")
    return fig

"""Figures from sweep and step tables: one question per figure, its answer in the title.

Each figure's title is the question it answers; axes carry units; colour maps
are perceptually uniform and readable in grey (cividis); modelled data are
dashed lines with hollow markers, measured data solid lines with filled
markers, and the legend says which.  Functions return a matplotlib ``Figure``
(no pyplot state); ``save`` writes PNG (150 dpi) and SVG with the parameters
in the file name and the metadata.
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..plan import BASELINE, NO_BUDGET, get_strategy
from . import style

CMAP = "cividis"
GIB = 2**30
# how each mode is drawn: line style, marker fill, legend word
STYLE = {
    "model": {"linestyle": "--", "markerfacecolor": "none", "word": "modelled"},
    "trace": {"linestyle": ":", "markerfacecolor": "none", "word": "traced"},
    "measure": {"linestyle": "-", "markerfacecolor": None, "word": "measured"},
}


def mode_word(mode: str) -> str:
    return STYLE[mode]["word"]


def _line_style(mode: str) -> dict:
    s = STYLE[mode]
    style = {"linestyle": s["linestyle"]}
    if s["markerfacecolor"] is not None:
        style["markerfacecolor"] = s["markerfacecolor"]
    return style


def _modes_word(frame) -> str:
    return " + ".join(mode_word(m) for m in sorted(set(frame["mode"])))


def _budget_label(strategy: str, budget_mb: float | None) -> str:
    if get_strategy(strategy).budget_source(None) == NO_BUDGET:
        return "no budget"
    if budget_mb is None or budget_mb != budget_mb:  # an engine's chunker without a grid budget
        return "no grid budget"
    return f"{budget_mb:g} MiB"


def _select(frame, **equal):
    for k, v in equal.items():
        if v is not None:
            frame = frame[frame[k] == v]
    return frame


def _at_budget(frame, budget_mb: float):
    """Rows at ``budget_mb``, with the rows of strategies that read no budget (budget_mb NaN:
    one row serves every budget)."""
    budgets = frame["budget_mb"]
    return frame[budgets.isna() if budget_mb != budget_mb else (budgets == budget_mb) | budgets.isna()]


def _engine_of(frame, engine: str | None) -> str | None:
    """The engine release a figure shows: the one asked for, else the frame's first (frames
    from before engines were recorded have none)."""
    if engine is not None or "engine" not in frame.columns or frame.empty:
        return engine
    return frame["engine"].iloc[0] or None


def _on(engine: str | None) -> str:
    return f" on {engine}" if engine else ""


def scheduler_note(frame) -> str:
    """The scheduler settings of a frame's rows that differ from their release's defaults, as a
    title line ('' when every row runs the release's own scheduler): a number is never shown
    without the setting that made it."""
    if "not_default" not in getattr(frame, "columns", ()):
        return ""
    differs = [d for d in dict.fromkeys(frame["not_default"].fillna("")) if d]
    return f"\nscheduler not the release default: {'; '.join(differs)}" if differs else ""


def frontier_heatmap(frame, by: str = "budget_mb", strategy: str = "vllm",
                     budget_mb: float = 512, free_gib: float | None = None,
                     model: str | None = None, mode: str = "model", engine: str | None = None) -> Figure:
    """Worst-step transient GiB over concurrency x ISL, the free-memory line drawn,
    one panel per budget (``by="budget_mb"``) or per strategy (``by="strategy"``), for one
    engine release (default: the frame's first)."""
    model = model or frame["model"].iloc[0]
    free_gib = free_gib if free_gib is not None else float(frame["free_gib"].iloc[0])
    engine = _engine_of(frame, engine)
    data = _select(frame, model=model, free_gib=free_gib, mode=mode, engine=engine)
    if by == "budget_mb":
        data = data[data["strategy"] == strategy]
        panels = sorted(data["budget_mb"].unique())  # one NaN panel for a strategy without a budget
    elif by == "strategy":
        data = _at_budget(data, budget_mb)
        panels = [s for s in dict.fromkeys(frame["strategy"]) if s in set(data["strategy"])]
    else:
        raise ValueError(f"by {by!r}: must be 'budget_mb' or 'strategy'")
    if data.empty:
        raise ValueError(f"no {mode} rows for {model} at {free_gib} GiB free with these filters")
    concs = sorted(data["concurrency"].unique())
    isls = sorted(data["isl"].unique())
    gib = data["peak_transient_bytes"].astype(float) / GIB
    norm = LogNorm(vmin=max(gib.min(), 1e-3), vmax=max(gib.max(), 2e-3))

    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig = Figure(figsize=(max(7.0, 4.2 * ncols + 1.2), 3.4 * nrows + 1.0), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    image = None
    for ax, panel in zip(axes.flat, panels):
        grid, oom = heatmap_cells(_at_budget(data, panel) if by == "budget_mb" else data[data[by] == panel],
                                  concs, isls)
        image = ax.imshow(np.clip(grid, norm.vmin, None), origin="lower", aspect="auto",
                          cmap=CMAP, norm=norm)
        free_memory_line(ax, grid, free_gib)
        mark_oom(ax, grid, oom, norm)
        label_heatmap_axes(ax, concs, isls)
        title = (_budget_label(strategy, panel) if by == "budget_mb"
                 else heatmap_panel_title(panel, budget_mb))
        ax.set_title(title)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    bar = fig.colorbar(image, ax=axes, shrink=0.9)
    bar.set_label(f"worst-step transient peak (GiB, {mode_word(mode)})")
    fig.legend(handles=[Line2D([], [], color="red", linewidth=2,
                               label=f"free memory: {free_gib:g} GiB")],
               loc="outside lower center")
    what = f"strategy {strategy}" if by == "budget_mb" else f"budget {budget_mb:g} MiB"
    fig.suptitle(heatmap_title(model, engine, free_gib, what, mode) + scheduler_note(data))
    return fig


# the pieces of a frontier heatmap, shared with the dashboard's live one (live_heatmap)

def heatmap_cells(rows, concs, isls):
    """(worst-step transient GiB, OOM) per concurrency x ISL cell of ``rows``; NaN where none."""
    grid = np.full((len(concs), len(isls)), np.nan)
    oom = np.zeros_like(grid, dtype=bool)
    for r in rows.itertuples(index=False):
        i, j = concs.index(r.concurrency), isls.index(r.isl)
        grid[i, j] = r.peak_transient_bytes / GIB
        oom[i, j] = bool(r.oom)
    return grid, oom


def free_memory_line(ax, grid, free_gib: float):
    """The free-memory contour where it crosses the cells (else None)."""
    rows, cols = grid.shape
    if rows > 1 and cols > 1 and np.nanmin(grid) < free_gib < np.nanmax(grid):
        return ax.contour(np.arange(cols), np.arange(rows), grid, levels=[free_gib], colors="red", linewidths=2)
    return None


def mark_oom(ax, grid, oom, norm) -> list:
    """An "OOM" text on each cell that runs out of memory."""
    marks = []
    for i, j in zip(*np.nonzero(oom)):
        # dark text on light cells, light on dark: readable in grey too
        light = norm(grid[i, j]) > 0.6
        marks.append(ax.text(j, i, "OOM", ha="center", va="center", fontsize=7, fontweight="bold",
                             color="black" if light else "white"))
    return marks


def label_heatmap_axes(ax, concs, isls) -> None:
    ax.set_xticks(range(len(isls)), [f"{v // 1024}K" if v >= 1024 else str(v) for v in isls])
    ax.set_yticks(range(len(concs)), [str(v) for v in concs])
    ax.set_xlabel("input length, ISL (tokens)")
    ax.set_ylabel("concurrency (requests)")


def heatmap_panel_title(strategy: str, budget_mb: float) -> str:
    return f"{strategy} ({_budget_label(strategy, budget_mb)})"


def heatmap_title(model: str, engine: str | None, free_gib: float, what: str, mode: str) -> str:
    return (f"Where does {model}'s indexer run out of memory{_on(engine)}?\n"
            f"({free_gib:g} GiB free, {what}, {mode_word(mode)})")


def frontier_table(frame, strategy: str, free_gib: float | None = None, engine: str | None = None):
    """Largest ISL without OOM, per budget (rows) and concurrency (columns); 0: none fits."""
    free_gib = free_gib if free_gib is not None else float(frame["free_gib"].iloc[0])
    data = _select(frame, strategy=strategy, free_gib=free_gib, engine=_engine_of(frame, engine))
    if data["budget_mb"].isna().all():  # a strategy without a budget: one row, "none"
        data = data.assign(budget_mb="none")
    fits = data[~data["oom"].astype(bool)]
    table = fits.pivot_table(index="budget_mb", columns="concurrency", values="isl",
                             aggfunc="max")
    table = table.reindex(index=sorted(data["budget_mb"].unique()),
                          columns=sorted(data["concurrency"].unique()))
    return table.fillna(0).astype(int)


def frontier_curves(frame, strategy: str = "vllm", budgets_mb=None,
                    free_gib: float | None = None, model: str | None = None,
                    engine: str | None = None) -> Figure:
    """Largest ISL without OOM vs concurrency, one curve per budget (and per mode)."""
    model = model or frame["model"].iloc[0]
    free_gib = free_gib if free_gib is not None else float(frame["free_gib"].iloc[0])
    engine = _engine_of(frame, engine)
    data = _select(frame, model=model, free_gib=free_gib, engine=engine)
    fig = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.subplots()
    isls = sorted(data["isl"].unique())
    curves = [(BASELINE, None)] if BASELINE in set(data["strategy"]) else []
    budgets = budgets_mb if budgets_mb is not None else sorted(data["budget_mb"].dropna().unique())
    curves += [(strategy, b) for b in budgets]
    colours = _strategy_colours(curves)  # one colour per (strategy, budget) curve
    for (s, b), colour in colours.items():
        for mode in [m for m in ("model", "trace", "measure") if m in set(data["mode"])]:
            rows = data[(data["strategy"] == s) & (data["mode"] == mode)]
            if b is not None:
                rows = rows[rows["budget_mb"] == b]
            if rows.empty:
                continue
            concs = sorted(rows["concurrency"].unique())
            best = []
            for c in concs:
                ok = rows[(rows["concurrency"] == c) & ~rows["oom"].astype(bool)]["isl"]
                best.append(ok.max() if len(ok) else np.nan)
            label = f"{_budget_label(s, b or 0)} ({mode_word(mode)})"
            ax.plot(concs, best, marker="o", color=colour, label=label, **_line_style(mode))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_yticks(isls, [f"{v // 1024}K" if v >= 1024 else str(v) for v in isls])
    concs_all = sorted(data["concurrency"].unique())
    ax.set_xticks(concs_all, [str(c) for c in concs_all])
    ax.minorticks_off()
    ax.set_xlabel("concurrency (requests)")
    ax.set_ylabel("largest ISL without OOM (tokens)")
    ax.grid(True, alpha=0.3)
    ax.legend(title=f"{strategy} budget (missing point: every ISL OOMs)", fontsize=8,
              title_fontsize=8, loc="best")
    fig.suptitle(f"How long can prompts get before {model}'s indexer OOMs{_on(engine)}, per logits budget?\n"
                 f"({free_gib:g} GiB free, strategy {strategy}, {_modes_word(data)})" + scheduler_note(data))
    return fig


def chunk_overhead(table, measured=None, steps=None) -> Figure:
    """Chunks and time overhead vs budget, per strategy, one column per step.

    ``table``: rows of ``timemodel.overhead_table`` with a ``step`` column
    (``time_source`` "modelled"); ``measured``: the same columns, "measured".
    """
    import pandas as pd

    frames = [table] if measured is None or len(measured) == 0 else [table, measured]
    data = pd.concat(frames, ignore_index=True)
    steps = steps or list(dict.fromkeys(data["step"]))
    fig = Figure(figsize=(3.6 * len(steps) + 1, 6.4), layout="constrained")
    axes = fig.subplots(2, len(steps), squeeze=False, sharex=True)
    strategies = list(dict.fromkeys(data["strategy"]))
    colour, markers = _strategy_colours(strategies), _strategy_markers(strategies)
    for col, step in enumerate(steps):
        for source in ("modelled", "measured"):
            mode = "model" if source == "modelled" else "measure"
            rows = data[(data["step"] == step) & (data["time_source"] == source)]
            for s in strategies:
                r = rows[rows["strategy"] == s].sort_values("budget_mb")
                if r.empty:
                    continue
                kw = dict(color=colour[s], marker=markers[s], label=f"{s} ({source})",
                          **_line_style(mode))
                axes[0, col].plot(r["budget_mb"], r["chunks"], **kw)
                axes[1, col].plot(r["budget_mb"], 100 * r["overhead"], **kw)
        axes[0, col].set_title(step, fontsize=9)
        axes[0, col].set_ylabel("chunks in the step (count)")
        axes[0, col].set_xlabel("logits budget (MiB)")
        axes[0, col].set_yscale("log")
        axes[1, col].set_ylabel("time overhead vs one chunk (%)")
        axes[1, col].set_xlabel("logits budget (MiB)")
        axes[1, col].set_xscale("log", base=2)
        for ax in axes[:, col]:
            ax.grid(True, alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    for ax in axes.flat:
        for h, l in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(l, h)
    fig.legend(list(seen.values()), list(seen.keys()), loc="outside lower center",
               ncol=min(4, len(seen)), fontsize=8)
    sources = " + ".join(sorted(set(data["time_source"])))
    fig.suptitle(f"What does each smaller logits budget cost in chunks and time? ({sources} time)")
    return fig


def strategy_comparison(table, title_detail: str = "") -> Figure:
    """Strategies side by side on one step or workload: peak (padding included),
    allocated vs useful logits, chunks, gathers.  ``table``: one row per strategy
    with ``strategy, peak_transient_bytes, allocated_logits_bytes,
    useful_logits_bytes, chunks, gathers, mode``."""
    fig = Figure(figsize=(12, 3.8), layout="constrained")
    axes = fig.subplots(1, 4)
    names = list(table["strategy"])
    x = np.arange(len(names))
    cmap = matplotlib.colormaps[CMAP]
    word = _modes_word(table)
    axes[0].bar(x, table["peak_transient_bytes"] / GIB, color=cmap(0.2),
                label=f"peak incl. padding ({word})")
    axes[0].set_ylabel("worst-chunk transient peak (GiB)")
    axes[1].bar(x - 0.2, table["allocated_logits_bytes"] / GIB, 0.4, color=cmap(0.2),
                label=f"allocated ({word})")
    axes[1].bar(x + 0.2, table["useful_logits_bytes"] / GIB, 0.4, color=cmap(0.85),
                hatch="//", edgecolor="black", label=f"read by top-k ({word})")
    axes[1].set_ylabel("logits over the step (GiB)")
    axes[2].bar(x, table["chunks"], color=cmap(0.5))
    axes[2].set_ylabel("chunks (count)")
    axes[3].bar(x, table["gathers"], color=cmap(0.7))
    axes[3].set_ylabel("K gathers (count)")
    for ax in axes:
        ax.set_xticks(x, names, rotation=20)
        ax.set_xlabel("strategy")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"Which splitting strategy allocates least for the same work? {title_detail}")
    return fig


def _slug(params: dict) -> str:
    parts = []
    for k, v in params.items():
        v = ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v) \
            if isinstance(v, (list, tuple)) else (f"{v:g}" if isinstance(v, float) else str(v))
        parts.append(f"{k}-{v}")
    return re.sub(r"[^A-Za-z0-9.,_-]+", "_", "_".join(parts))[:120]


class FigureStyleError(ValueError):
    """A saved figure breaks the figure style (``figure_check``)."""


def save(fig: Figure, out_dir: str | Path, name: str, params: dict) -> list[Path]:
    """Write ``fig`` as PNG (150 dpi) and SVG; the parameters go in the file name
    (shortened) and in full in the files' metadata.  Returns the two paths.

    The figure is first held to the figure style (``figure_check``) with these parameters: a
    broken rule raises ``FigureStyleError`` naming the figure and every rule when
    ``INDEXER_LAB_STRICT_FIGURES`` is set (the main job, the tests), else warns."""
    from ..runmode import strict_figures
    from .figure_check import check_figure

    problems = check_figure(fig, params)
    if problems:
        message = f"figure {name} breaks the figure style:\n  " + "\n  ".join(problems)
        if strict_figures():
            raise FigureStyleError(message)
        warnings.warn(message, stacklevel=2)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{name}__{_slug(params)}" if params else name
    title = fig.get_suptitle() if hasattr(fig, "get_suptitle") else name
    description = json.dumps(params, sort_keys=True, default=str)
    png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
    fig.savefig(png, dpi=style.DPI, metadata={"Title": title or name, "Description": description,
                                              "Software": "indexer-lab"})
    fig.savefig(svg, metadata={"Title": title or name, "Description": description})
    return [png, svg]


def figure_png(fig: Figure, dpi: int = 100, tight: bool = True) -> bytes:
    """The figure as PNG bytes (``tight``: cropped to what is drawn)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight" if tight else None)
    return buf.getvalue()


def show_in_ipython(shell=None) -> bool:
    """Let IPython display these figures (``display(fig)``, a cell's last value) as PNG.

    The figures are made without pyplot, so IPython knows no image form for them
    unless something imported pyplot's inline backend: a notebook would show
    ``<Figure size ...>``.  Registers a PNG formatter for ``Figure`` in the running
    IPython (or ``shell``) where none exists; called on import.  Returns whether
    the shell has one now.
    """
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
        if shell is None:
            return False
    png = shell.display_formatter.formatters.get("image/png")
    if png is None:
        return False
    try:
        png.lookup_by_type(Figure)
    except KeyError:
        png.for_type(Figure, figure_png)
    return True


show_in_ipython()


def _strategy_colours(names) -> dict:
    cmap = matplotlib.colormaps[CMAP]
    names = list(dict.fromkeys(names))
    return {s: cmap(k / max(1, len(names) - 1) * 0.9) for k, s in enumerate(names)}


def _strategy_markers(names) -> dict:
    return dict(zip(dict.fromkeys(names), "osD^v<>"))


def reserved_growth(frame, title_detail: str = "") -> Figure:
    """Bytes the caching allocator reserves vs bytes allocated, step after step of a
    long prompt, per strategy.  ``frame``: rows of ``reserved.reserved_table`` (mode
    "model") and optionally measured rows (mode "measure") with the same columns
    (``strategy, context_len, reserved, peak_allocated, mode``)."""
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax_r, ax_gap = fig.subplots(1, 2)
    colours = _strategy_colours(frame["strategy"])
    markers = _strategy_markers(colours)
    for (strategy, mode), rows in frame.groupby(["strategy", "mode"], sort=False):
        rows = rows.sort_values("context_len")
        x = (rows["context_len"] + rows["query_len"]) / 1024
        word = mode_word(mode)
        kw = dict(color=colours[strategy], marker=markers[strategy], **_line_style(mode))
        ax_r.plot(x, rows["reserved"] / GIB, label=f"{strategy}: reserved ({word})", **kw)
        if "peak_allocated" in rows and rows["peak_allocated"].notna().all():
            ax_r.plot(x, rows["peak_allocated"] / GIB, color=colours[strategy], linewidth=0.8,
                      linestyle=(0, (1, 2)), label=f"{strategy}: peak allocated ({word})")
            ax_gap.plot(x, (rows["reserved"] - rows["peak_allocated"]) / GIB,
                        label=f"{strategy} ({word})", **kw)
    ax_r.set_xlabel("tokens prefilled so far (K tokens)")
    ax_r.set_ylabel("GiB")
    ax_r.set_title("reserved (lines with markers) and peak allocated (dotted)", fontsize=9)
    ax_gap.set_xlabel("tokens prefilled so far (K tokens)")
    ax_gap.set_ylabel("reserved - peak allocated (GiB)")
    ax_gap.set_title("memory the allocator holds but the step never uses", fontsize=9)
    for ax in (ax_r, ax_gap):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Does the caching allocator's reserved memory keep growing over a long prompt? "
                 f"({_modes_word(frame)}) {title_detail}")
    return fig


def policy_schedule(frame, title_detail: str = "") -> Figure:
    """Budget authorised and memory needed vs memory free, step by step, per policy.
    ``frame``: one row per policy x step with ``policy, step, free_bytes, budget_bytes,
    peak_transient_bytes, fits`` (``budget_policy.run_policy``), modelled."""
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax_b, ax_p = fig.subplots(1, 2, sharey=True)
    colours = _strategy_colours(frame["policy"])
    first = frame[frame["policy"] == frame["policy"].iloc[0]].sort_values("step")
    for ax in (ax_b, ax_p):
        ax.plot(first["step"], first["free_bytes"] / GIB, color="red", linewidth=2,
                label="memory free at the step")
    for policy, rows in frame.groupby("policy", sort=False):
        rows = rows.sort_values("step")
        budget = rows["budget_bytes"].astype(float) / GIB
        ax_b.plot(rows["step"], budget, color=colours[policy], marker="o", linestyle="--",
                  markerfacecolor="none", label=f"{policy} (modelled)")
        ax_p.plot(rows["step"], rows["peak_transient_bytes"] / GIB, color=colours[policy],
                  marker="o", linestyle="--", markerfacecolor="none", label=f"{policy} (modelled)")
        bad = rows[~rows["fits"].astype(bool)]
        if len(bad):
            ax_p.scatter(bad["step"], bad["peak_transient_bytes"] / GIB, marker="X", s=90,
                         color="black", zorder=5, label=f"{policy}: OOM, needs more than is free")
    ax_b.set_ylabel("GiB")
    ax_b.set_title("logits budget the policy authorises", fontsize=9)
    ax_p.set_title("transient peak of the step's plan (padding and temporaries included)", fontsize=9)
    for ax in (ax_b, ax_p):
        ax.set_xlabel("engine step (free memory falling as in the report)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Which budget policy authorises a chunk that no longer fits? {title_detail}")
    return fig


def auto_candidates(candidates, free_bytes: int, title_detail: str = "") -> Figure:
    """Modelled time over the workload mix vs budget, per strategy; candidates that
    would OOM at some step are drawn hollow and crossed.  ``candidates``: a DataFrame
    of ``auto.Candidate`` rows and their ``needs_bytes``.  The release's own chunker
    (``engine``) is the only one a setting deploys; the others are what a patched engine
    could do."""
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax_t, ax_m = fig.subplots(1, 2)
    colours = _strategy_colours(candidates["strategy"])
    markers = _strategy_markers(colours)
    for strategy, rows in candidates.groupby("strategy", sort=False):
        rows = rows.sort_values("budget_mb")
        kw = dict(color=colours[strategy], marker=markers[strategy], linestyle="--")
        label = (f"{rows['engine'].iloc[0]}'s own knob (deployable)" if strategy == "engine"
                 else f"{strategy} (a patched engine)")
        ax_t.plot(rows["budget_mb"], rows["total_ms"], markerfacecolor="none", label=label, **kw)
        ax_m.plot(rows["budget_mb"], rows["needs_bytes"] / GIB, markerfacecolor="none", label=label, **kw)
        bad = rows[~rows["fits"].astype(bool)]
        ax_t.scatter(bad["budget_mb"], bad["total_ms"], marker="x", color="black", zorder=5)
    # the peak panel keeps the candidates' scale: free memory moves over it (the dashboard
    # redraws only the line), and above it the legend says so
    ax_m.autoscale_view()
    low, high = ax_m.get_ylim()
    ax_m.axhline(free_bytes / GIB, color="red", linewidth=2, label=free_label(free_bytes, high))
    ax_m.set_ylim(low, high)
    ax_t.set_ylabel("indexer time over the mix (ms, modelled)")
    ax_t.set_title("x: OOM at some step", fontsize=9)
    ax_m.set_ylabel("memory the worst step needs (GiB, modelled)")
    ax_m.set_title("own knob below its default: + the profile-run reservation given up", fontsize=8)
    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("logits budget (MiB)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(auto_candidates_title(title_detail))
    return fig


def free_label(free_bytes: int, top_gib: float) -> str:
    gib = free_bytes / GIB
    return f"free: {gib:.2f} GiB" + (", above the panel: every candidate fits" if gib > top_gib else "")


def auto_candidates_title(title_detail: str = "") -> str:
    return f"The fastest budget without an OOM: the release's own knob, or a patched engine {title_detail}"


def schedule_comparison(per_step, title_detail: str = "") -> Figure:
    """The logits each step would need unchunked (M x N x 4 bytes, modelled), step by
    step, for the built-in simulator and vLLM's own scheduler.  ``per_step``: the
    table of ``workload.compare.SourceComparison.per_step``."""
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax = fig.subplots()
    styles = {"simulator": dict(color="#1f4e79", linestyle="-", linewidth=2.2),
              "vllm": dict(color="#d08c00", linestyle="--", linewidth=1.2)}
    for source, rows in per_step.groupby("source", sort=False):
        ax.plot(rows["step"], rows["m_times_n"] * 4 / GIB, label=f"{source} schedule",
                **styles.get(source, {}))
    ax.set_xlabel("engine step")
    ax.set_ylabel("unchunked logits M x N x 4 (GiB, modelled)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.suptitle(f"Does the simulator schedule the same prefill steps as vLLM? {title_detail}")
    return fig


def release_frontier(table, title_detail: str = "") -> Figure:
    """The worst step's transient peak per engine release over concurrency, against the
    memory free: where each release OOMs on a deployment.  ``table``: rows of
    ``study.releases.release_table`` (one deployment)."""
    fig = Figure(figsize=(9.0, 4.8), layout="constrained")
    ax = fig.subplots()
    engines = list(dict.fromkeys(table["engine"]))
    colours = _strategy_colours(engines)
    markers = dict(zip(engines, "osD^v<>phX*"))
    for engine in engines:
        rows = table[table["engine"] == engine].sort_values("concurrency")
        for mode in [m for m in ("model", "trace", "measure") if m in set(rows["mode"])]:
            r = rows[rows["mode"] == mode]
            ax.plot(r["concurrency"], r["peak_transient_gib"], marker=markers[engine], color=colours[engine],
                    label=f"{engine} ({mode_word(mode)})", **_line_style(mode))
            oom = r[r["oom"].astype(bool)]
            ax.scatter(oom["concurrency"], oom["peak_transient_gib"], marker="x", color="black", zorder=3)
    free = float(table["free_gib"].iloc[0])
    ax.axhline(free, color="black", linewidth=1)
    ax.annotate(f"{free:g} GiB free", (table["concurrency"].min(), free), textcoords="offset points",
                xytext=(2, 4), fontsize=8)
    ax.set_yscale("log", base=2)
    concs = sorted(table["concurrency"].unique())
    ax.set_xticks(concs, [str(c) for c in concs])
    ax.set_xlabel("concurrency (requests)")
    ax.set_ylabel("worst step: indexer transient peak (GiB)")
    ax.grid(True, alpha=0.3)
    ax.legend(title="release, default setting\n(x: OOM)", fontsize=7, title_fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    isl = int(table["isl"].iloc[0])
    fig.suptitle((f"Which releases run out of memory at ISL {isl}, and from which concurrency?\n"
                  f"{title_detail}".rstrip()) + scheduler_note(table))
    return fig


def budget_frontier(frame, free_gib: float | None = None, title_detail: str = "") -> Figure:
    """Where the OOM frontier lies over free memory x budget for long-context workloads: per
    workload (one panel per concurrency x ISL), the worst step's transient peak against the
    logits budget, one line per strategy.  A budget OOMs wherever the free memory is below
    its line, so each line is that strategy's frontier; a strategy without a budget is flat.
    ``frame``: model rows over several budgets (one free GiB); ``free_gib``: a level drawn."""
    engine = _engine_of(frame, None)
    data = _select(frame, engine=engine, mode="model")
    workloads = sorted({(int(c), int(i)) for c, i in zip(data["concurrency"], data["isl"])})
    strategies = list(dict.fromkeys(data["strategy"]))
    colours, markers = _strategy_colours(strategies), _strategy_markers(strategies)
    ncols = min(3, len(workloads))
    nrows = -(-len(workloads) // ncols)
    fig = Figure(figsize=(4.2 * ncols + 1.6, 3.4 * nrows + 1.2), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, (conc, isl) in zip(axes.flat, workloads):
        cell = data[(data["concurrency"] == conc) & (data["isl"] == isl)]
        for s in strategies:
            rows = cell[cell["strategy"] == s].sort_values("budget_mb")
            budgets = rows["budget_mb"].astype(float)
            peak = rows["peak_transient_bytes"].astype(float) / GIB
            if budgets.isna().all():  # no budget: one row, the same at every budget
                ax.axhline(peak.iloc[0], color=colours[s], linestyle="--", linewidth=1, label=s)
                continue
            ax.plot(budgets, peak, marker=markers[s], color=colours[s], markerfacecolor="none",
                    linestyle="--", label=s)
        if free_gib is not None:
            ax.axhline(free_gib, color="red", linewidth=1.5, label=f"{free_gib:g} GiB free")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ticks = sorted(set(cell["budget_mb"].dropna().astype(float)))
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=7)
        ax.set_xlabel("logits budget (MiB)")
        ax.set_ylabel("free memory needed (GiB, modelled)")
        ax.set_title(f"{conc} x ISL {isl // 1024}K")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(workloads):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, title="strategy (below a line: OOM)", title_fontsize=7)
    fig.suptitle(f"How much free memory does each budget need at long contexts{_on(engine)}? {title_detail}".rstrip()
                 + scheduler_note(data))
    return fig

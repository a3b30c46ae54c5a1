"""Figures from sweep and step tables: one question per figure, its answer in the title.

Each figure's title is the question it answers, then what its numbers depend on (model,
engine release and logits layout, free memory, scheduler); axes carry units; every figure
follows ``style`` (at most 8 inches wide, one palette, one heatmap colour scale) and ``save``
holds it to that style (``figure_check``) before writing PNG (150 dpi) and SVG with the
parameters in the file name and the metadata.  Modelled data are dashed lines with hollow
markers, measured data solid lines with filled markers, and the legend says which.
Functions return a matplotlib ``Figure`` (no pyplot state).
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

style.use()

CMAP = style.CMAP
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


def not_default_of(frame) -> str:
    """The scheduler settings of a frame's rows that differ from their release's defaults ('' when
    every row runs the release's own scheduler): a number is never shown without the setting
    that made it."""
    if "not_default" not in getattr(frame, "columns", ()):
        return ""
    return "; ".join(d for d in dict.fromkeys(frame["not_default"].fillna("")) if d)


def lengths_of(frame) -> str:
    """How the rows' prompt lengths vary, for a title ('' when every prompt is at its ISL):
    vLLM bench's range ratio R, a mix (share x length, the rest at ISL) and the seed."""
    if "random_range_ratio" not in getattr(frame, "columns", ()):
        return ""
    labels = {}
    for ratio, mix, seed in zip(frame["random_range_ratio"].tolist(), frame["mix"].fillna("").tolist(),
                                frame["length_seed"].tolist()):
        parts = ([f"R={ratio:g}"] if ratio else []) + ([f"mix {mix}"] if mix else [])
        if parts:
            labels[", ".join(parts) + f", seed {int(seed)}"] = None
    return "prompt lengths " + "; ".join(labels) if labels else ""


SAMPLE = "each point the worst step of one simulated closed loop (2 waves of prompts{})"


def sample_of(frame) -> str:
    """What a point's worst step is over: one closed loop of two waves, lengths (where they vary)
    sent in the order drawn (the rows' workloads keep the draw's order)."""
    return SAMPLE.format(", sent in the order drawn" if lengths_of(frame) else "")


def cache_of(frame) -> str:
    """The prefix cache's state when the run starts, where it is not the default cold one."""
    if "warm_cache" not in getattr(frame, "columns", ()):
        return ""
    from ..workload.simulator import WARM_CACHE

    return WARM_CACHE if frame["warm_cache"].fillna(False).astype(bool).any() else ""


def with_lengths(what: str, frame, sample: bool = True) -> str:
    """``what`` with the prompt lengths where they vary, a warm prefix cache, and (``sample``) what a
    point's worst step is over (the dashboard says it in its status line: its small figure keeps a
    short title)."""
    parts = [what] + [p for p in (lengths_of(frame), cache_of(frame), sample_of(frame) if sample else "") if p]
    return "; ".join(parts)


def frontier_heatmap(frame, by: str = "budget_mb", strategy: str = "vllm",
                     budget_mb: float = 512, free_gib: float | None = None,
                     model: str | None = None, mode: str = "model", engine: str | None = None) -> Figure:
    """Worst-step transient GiB over concurrency x ISL (each cell's value written in it where
    it fits, on the colour scale every heatmap shares), the OOM frontier drawn along the cells'
    edges, one panel per budget (``by="budget_mb"``) or per strategy (``by="strategy"``), for
    one engine release (default: the frame's first)."""
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
    norm = style.peak_norm()
    nrows, ncols = style.grid_shape(len(panels))
    fig = style.figure(2.4 * nrows + 1.6)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    image, drawn = None, []
    for ax, panel in zip(axes.flat, panels):
        grid, oom = heatmap_cells(_at_budget(data, panel) if by == "budget_mb" else data[data[by] == panel],
                                  concs, isls)
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap=style.CMAP, norm=norm)
        drawn.append((ax, grid, oom, frontier_line(ax, oom)))
        label_heatmap_axes(ax, concs, isls)
        title = (_budget_label(strategy, panel) if by == "budget_mb"
                 else heatmap_panel_title(panel, budget_mb, engine))
        every = " (every cell OOMs)" if oom.all() else ""
        ax.set_title(title + every, fontsize=style.FONT)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    style.peak_colorbar(fig, image, axes, f"worst-step transient peak ({mode_word(mode)})")
    if any(line is not None for *_, line in drawn):
        fig.legend(handles=[frontier_handle(free_gib)], loc="outside lower center")
    for ax, grid, oom, _ in drawn:  # after the layout: a value only where it fits its cell
        if not style.cell_values(fig, ax, grid, norm):
            mark_oom(ax, grid, oom, norm)
    what = (f"strategy {strategy}" + (f" ({strategy_name(strategy, engine)})" if strategy == "engine" else "")
            if by == "budget_mb" else
            f"budget {budget_mb:g} MiB" + (f"; {PATCHED}" if set(panels) - {"engine"} else ""))
    ooms = "" if data["oom"].astype(bool).any() else f"; no cell needs more than {free_gib:g} GiB"
    style.title(fig, heatmap_question(model), heatmap_title(model, engine, free_gib, with_lengths(what + ooms, data), mode,
                                                            not_default_of(data)))
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


def frontier_line(ax, oom):
    """The OOM frontier along the edges between cells that fit and cells that OOM (else None):
    the grid's cells are the points computed, so the line never crosses a cell."""
    # over the frame, as the dashboard's redraw draws it (after the cells and their frame)
    return style.cell_boundary(ax, oom, colors=style.FREE_COLOUR, linewidths=2.5, zorder=3)


def frontier_handle(free_gib: float) -> Line2D:
    return Line2D([], [], color=style.FREE_COLOUR, linewidth=2.5,
                  label=f"OOM frontier at {free_gib:g} GiB free (beyond it: OOM)")


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
    ax.set_xticks(range(len(isls)), [style.token_label(v) for v in isls])
    ax.set_yticks(range(len(concs)), [str(v) for v in concs])
    ax.set_xlabel("input length, ISL (tokens)")
    ax.set_ylabel("concurrency (requests)")


def strategy_name(strategy: str, engine: str | None = None) -> str:
    """A strategy as a figure names it: the release's own chunker by the release, the project's
    strategies as what a patched engine could do (the strategy ``vllm`` is the project's copy of
    vLLM's packing, planned on the release's build, not the release itself)."""
    if strategy == "engine":
        return f"{engine}'s own chunker" if engine else "the release's own chunker"
    return f"patched: {strategy}"


PATCHED = "patched: the project's strategy on the release's build, not what the release ships"


def heatmap_panel_title(strategy: str, budget_mb: float, engine: str | None = None) -> str:
    return f"{strategy_name(strategy, engine)} ({_budget_label(strategy, budget_mb)})"


def heatmap_question(model: str) -> str:
    return f"Where does {model}'s indexer run out of memory? (worst-step transient peak, GiB)"


def heatmap_title(model: str, engine: str | None, free_gib: float, what: str, mode: str,
                  not_default: str = "") -> str:
    line, *scheduler = style.context(model, engine, free_gib, not_default, mode_word(mode)).split("\n")
    return "\n".join([f"{line}; {what}", *scheduler])


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


def frontier_groups(frame, strategies, free_gib: float | None = None, engine: str | None = None) -> list[list[str]]:
    """``strategies`` grouped by their frontier (``frontier_table``): strategies of one group reach
    the same ISLs at every budget and concurrency, so one figure answers for them all."""
    groups: list[tuple[object, list[str]]] = []
    for s in strategies:
        table = frontier_table(frame, s, free_gib, engine)
        twin = next((g for t, g in groups if t.equals(table)), None)
        if twin is None:
            groups.append((table, [s]))
        else:
            twin.append(s)
    return [g for _, g in groups]


def frontier_curves(frame, strategy: str = "vllm", budgets_mb=None,
                    free_gib: float | None = None, model: str | None = None,
                    engine: str | None = None, same=()) -> Figure:
    """Largest ISL without OOM vs concurrency, one curve per budget (and per mode).  Curves that
    coincide are set a little apart sideways (a fixed step per curve), so that each stays visible.
    A point at the longest ISL tried is censored (the frontier lies beyond): its tick reads "≥".
    ``same``: strategies with this frontier (``frontier_groups``), named in the title."""
    model = model or frame["model"].iloc[0]
    free_gib = free_gib if free_gib is not None else float(frame["free_gib"].iloc[0])
    engine = _engine_of(frame, engine)
    data = _select(frame, model=model, free_gib=free_gib, engine=engine)
    fig = style.figure(5.2)
    ax = fig.subplots()
    isls = sorted(data["isl"].unique())
    curves = [(BASELINE, None)] if BASELINE in set(data["strategy"]) else []
    budgets = budgets_mb if budgets_mb is not None else sorted(data["budget_mb"].dropna().unique())
    curves += [(strategy, b) for b in budgets]
    looks = style.series_styles(curves)  # a colour and a marker per (strategy, budget) curve
    for k, ((s, b), look) in enumerate(looks.items()):
        dodge = 2 ** (0.035 * (k - (len(looks) - 1) / 2))  # sideways, on the log axis
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
            ax.plot(np.array(concs) * dodge, best, label=label, markersize=5, **look, **_line_style(mode))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    censored = any(np.nanmax(np.asarray(line.get_ydata(), float), initial=0) >= isls[-1] for line in ax.lines)
    ax.set_yticks(isls, [("≥" if censored and v == isls[-1] else "") + style.token_label(v) for v in isls])
    ax.set_ylim(isls[0] / 1.3, isls[-1] * 1.3)
    concs_all = sorted(data["concurrency"].unique())
    ax.set_xticks(concs_all, [str(c) for c in concs_all])
    ax.minorticks_off()
    ax.set_xlabel("concurrency (requests)")
    ax.set_ylabel("largest ISL without OOM (tokens)")
    ax.grid(True, alpha=0.3)
    top = style.token_label(isls[-1])
    style.legend_below(fig, ncol=4, title=f"{strategy} budget; no point: every ISL OOMs; "
                                          + (f"≥{top}: no OOM at the longest ISL tried ({top}), the frontier lies beyond"
                                             if censored else f"the top row ({top}) is the longest ISL tried"))
    also = f" ({' and '.join(same)}: the same frontier)" if same else ""
    style.title(fig, f"How long can prompts get before {model}'s indexer OOMs, per {strategy} logits budget?{also}",
                with_lengths(style.context(model, engine, free_gib, not_default_of(data), _modes_word(data)), data))
    return fig


def chunk_overhead(table, measured=None, steps=None) -> Figure:
    """Chunks and time overhead vs budget, per strategy, one row of panels per step.

    ``table``: rows of ``timemodel.overhead_table`` with a ``step`` column
    (``time_source`` "modelled"); ``measured``: the same columns, "measured".
    """
    import pandas as pd

    frames = [table] if measured is None or len(measured) == 0 else [table, measured]
    data = pd.concat(frames, ignore_index=True)
    steps = steps or list(dict.fromkeys(data["step"]))
    fig = style.figure(2.1 * len(steps) + 1.6)
    axes = fig.subplots(len(steps), 2, squeeze=False, sharex=True)
    strategies = list(dict.fromkeys(data["strategy"]))
    looks = style.series_styles(strategies)
    for row, step in enumerate(steps):
        for source in ("modelled", "measured"):
            mode = "model" if source == "modelled" else "measure"
            rows = data[(data["step"] == step) & (data["time_source"] == source)]
            for s in strategies:
                r = rows[rows["strategy"] == s].sort_values("budget_mb")
                if r.empty:
                    continue
                kw = dict(label=f"{s} ({source})", markersize=4, **looks[s], **_line_style(mode))
                axes[row, 0].plot(r["budget_mb"], r["chunks"], **kw)
                axes[row, 1].plot(r["budget_mb"], 100 * r["overhead"], **kw)
        axes[row, 0].set_ylabel("chunks (count)")
        style.count_axis(axes[row, 0].yaxis, log=True)
        axes[row, 1].set_ylabel("time overhead (%)")
        for ax in axes[row]:
            ax.grid(True, alpha=0.3)
    budgets = sorted(set(data["budget_mb"].astype(float)))
    for ax in axes[-1]:
        style.mib_ticks(ax.xaxis, budgets if len(budgets) <= 5 else budgets[::2])
        ax.set_xlabel("logits budget")
    style.legend_below(fig, ncol=4)  # before lines drawn under others go: every series keeps its entry
    for row, step in enumerate(steps):  # lines drawn under others, named above their panel
        chunks, time = (style.merge_identical(ax, show=False) for ax in axes[row])
        axes[row, 0].set_title(step + (f"\nsame chunks: {'; '.join(chunks)}" if chunks else ""),
                               fontsize=style.FONT - 1, loc="left")
        if time:
            axes[row, 1].set_title(f"same time: {'; '.join(time)}", fontsize=style.FONT - 1, loc="right")
    sources = " + ".join(sorted(set(data["time_source"])))
    engine = _engine_of(table, None)
    model = table["model"].iloc[0] if "model" in table else None
    style.title(fig, f"What does each smaller logits budget cost in chunks and time? ({sources} time)",
                style.context(model, engine) + "; time overhead: against the step in one chunk")
    return fig


def strategy_comparison(table, title_detail: str = "") -> Figure:
    """Strategies side by side on one step or workload, as horizontal bars with their values:
    peak (padding included; a log scale, so one large peak does not flatten the others),
    allocated vs useful logits, chunks, gathers.  ``table``: one row per strategy with
    ``strategy, peak_transient_bytes, allocated_logits_bytes, useful_logits_bytes, chunks,
    gathers, mode`` (and ``engine``)."""
    names = list(table["strategy"])
    fig = style.figure(0.7 * len(names) + 2.8)
    axes = fig.subplots(2, 2, sharey=True).flat
    y = np.arange(len(names))
    word = _modes_word(table)
    small = style.FONT - 2
    peak = table["peak_transient_bytes"] / GIB
    bars = axes[0].barh(y, peak, color=style.PALETTE[5])
    axes[0].bar_label(bars, [style.size_label(v) for v in peak], fontsize=small, padding=2)
    axes[0].set_xlabel(f"worst-chunk transient peak, padding included ({word})")
    style.gib_axis(axes[0].xaxis, log=False, ticks=3)  # linear: a bar's length is its size
    axes[0].set_xlim(0, peak.max() * 1.35)  # room for the values
    allocated, useful = table["allocated_logits_bytes"] / GIB, table["useful_logits_bytes"] / GIB
    axes[1].barh(y - 0.2, allocated, 0.4, color=style.PALETTE[0], label=f"logits allocated ({word})")
    axes[1].barh(y + 0.2, useful, 0.4, color=style.PALETTE[1], hatch="//", edgecolor="black",
                 label=f"logits read by top-k ({word})")
    axes[1].set_xlabel("logits over the step (GiB)")
    axes[1].set_xlim(0, max(allocated.max(), useful.max()) * 1.1)
    slower = _time_over_fastest(table)
    for ax, column, what in ((axes[2], "chunks", "chunks (count)"), (axes[3], "gathers", "K gathers (count)")):
        counts = table[column].astype(int)
        bars = ax.barh(y, counts, color=style.PALETTE[2])
        labels = [str(v) for v in counts] if column != "chunks" or slower is None else \
            [f"{v}, {t}" for v, t in zip(counts, slower)]
        ax.bar_label(bars, labels, fontsize=small, padding=2)
        ax.set_xlabel(what)
        style.count_axis(ax.xaxis)
        ax.set_xlim(0, max(1, counts.max()) * (1.6 if column == "chunks" and slower is not None else 1.2))
    if slower is not None:
        axes[2].set_title("beside each bar: modelled time against the fastest strategy here", fontsize=small)
    for ax in axes:
        ax.set_yticks(y, names)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].invert_yaxis()  # the first strategy on top (the panels share their y axis)
    axes[0].set_ylabel("strategy")
    axes[2].set_ylabel("strategy")
    style.legend_below(fig, ncol=2)
    engine = _engine_of(table, None)
    layout = f"{engine}: {style.layout_of(engine)}" if engine else ""
    style.title(fig, "Which splitting strategy allocates least for the same work?", title_detail.strip(" \n"),
                layout)
    return fig


def _time_over_fastest(table):
    """Each row's modelled time against the table's fastest ('+94% time', 'fastest'), or None where
    the table carries no time: fewer bytes bought with chunks is said with what the chunks cost."""
    if "time_ms" not in table or table["time_ms"].isna().any():
        return None
    fastest = table["time_ms"].min()
    slower = [100 * (t / fastest - 1) for t in table["time_ms"]]
    return ["fastest" if p == 0 else "+<1% time" if p < 0.5 else f"+{p:.0f}% time" for p in slower]


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
    from .figure_check import DIGEST_KEY, check_figure, figure_digest

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
                                              "Software": "indexer-lab",
                                              DIGEST_KEY: figure_digest(fig)})
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
    return {n: look["color"] for n, look in style.series_styles(names).items()}


def _strategy_markers(names) -> dict:
    return {n: look["marker"] for n, look in style.series_styles(names).items()}


def _growth(rows) -> str:
    """How reserved memory moves over the steps of one strategy, in words: what the title says
    must be what the line does."""
    reserved = rows.sort_values("context_len")["reserved"].to_numpy()
    grows = int((np.diff(reserved) > 0).sum())
    last = style.size_label(reserved[-1] / GIB)
    if grows == 0:
        return f"stays flat at {last}"
    if grows == 1:
        return f"grows once, then flat at {last}"
    tail = "still growing" if reserved[-1] > reserved[-2] else "then flat"
    return f"grows at {grows} of {len(reserved)} steps, {tail} at {last}"


def _retry_sentence(frame) -> str:
    """What PyTorch's free-the-cache-and-retry does on this curve, with the memory free."""
    model = frame[frame["mode"] == "model"]
    free = model["free_gib"].iloc[0] if "free_gib" in model and len(model) else None
    if free is None or free != free:  # no free memory given: nothing forces the cache back
        return ("no free memory given: reserved is what the allocator holds while nothing forces it to give "
                "memory back")
    parts = []
    for s, rows in model.groupby("strategy", sort=False):
        retries, oom = int(rows["retries"].max()), bool(rows["oom"].any())
        if oom:
            step = int(rows[rows["oom"]]["step"].iloc[0])
            parts.append(f"{s} OOMs at step {step} after giving its cache back")
        elif retries:
            parts.append(f"{s} gives its cache back {retries} time{'s' if retries > 1 else ''}")
    what = "; ".join(parts) if parts else "no strategy fills it"
    return (f"{free:g} GiB free beyond the boot buffers: past that PyTorch gives its cached segments back and "
            f"retries before an OOM ({what})")


def _reserved_limit(ax, frame) -> None:
    """What reserved memory may reach before PyTorch gives its cache back: the memory free when a
    step runs plus the buffers the server holds from boot, which reserved counts and the free
    memory does not."""
    model = frame[(frame["mode"] == "model") & frame["free_gib"].notna()] if "free_gib" in frame else frame.iloc[:0]
    if model.empty:
        return
    free = float(model["free_gib"].iloc[0])
    held = model.groupby("context_len")["held_from_boot"].max() if "held_from_boot" in model else None
    if held is None or not held.any():
        ax.axhline(free, color=style.FREE_COLOUR, linewidth=2, label=f"memory free: {free:g} GiB")
        return
    x = (held.index + model.groupby("context_len")["query_len"].max()) / 1024
    ax.plot(x, free + held.to_numpy() / GIB, color=style.FREE_COLOUR, linewidth=2,
            label=f"{free:g} GiB free + the boot buffers\n(K workspace, top-k output):\nwhat reserved may reach")


def reserved_growth(frame, title_detail: str = "") -> Figure:
    """Bytes the caching allocator reserves vs bytes allocated, step after step of a
    long prompt, per strategy; the title says how each strategy's reserved memory moves.
    ``frame``: rows of ``reserved.reserved_table`` (mode "model") and optionally measured rows
    (mode "measure") with the same columns (``strategy, context_len, reserved, peak_allocated, mode``)."""
    fig = style.figure(7.0)
    ax_r, ax_gap = fig.subplots(2, 1, sharex=True)
    looks = style.series_styles(frame["strategy"])
    for (strategy, mode), rows in frame.groupby(["strategy", "mode"], sort=False):
        rows = rows.sort_values("context_len")
        if "oom" in rows and rows["oom"].fillna(False).astype(bool).any():
            # the step the allocator could not serve even after giving its cache back: what its live
            # blocks needed, crossed; the curves stop before it
            bad = rows[rows["oom"].fillna(False).astype(bool)]
            ax_r.scatter((bad["context_len"] + bad["query_len"]) / 1024, bad["peak_allocated"] / GIB, marker="X",
                         s=80, color=looks[strategy]["color"], edgecolors="black", zorder=5,
                         label=f"{strategy}: OOM, its live blocks need more than is free")
            rows = rows[~rows["oom"].fillna(False).astype(bool)]
            if rows.empty:
                continue
        x = (rows["context_len"] + rows["query_len"]) / 1024
        word = mode_word(mode)
        ax_r.plot(x, rows["reserved"] / GIB, label=f"{strategy}: reserved ({word})", **looks[strategy],
                  **_line_style(mode))
        if "peak_allocated" in rows and rows["peak_allocated"].notna().all():
            ax_r.plot(x, rows["peak_allocated"] / GIB, color=looks[strategy]["color"], linewidth=0.8,
                      linestyle=(0, (1, 2)), label=f"{strategy}: peak allocated ({word})")
            ax_gap.plot(x, (rows["reserved"] - rows["peak_allocated"]) / GIB, label=f"{strategy} ({word})",
                        **looks[strategy], **_line_style(mode))
    _reserved_limit(ax_r, frame)
    ax_r.set_ylabel("reserved, peak allocated (GiB)")
    ax_gap.set_xlabel("tokens prefilled so far (K tokens)")
    ax_gap.set_ylabel("reserved - peak allocated (GiB)")
    same = [style.merge_identical(ax, show=False) for ax in (ax_r, ax_gap)]
    ax_r.set_title("reserved (lines with markers) and peak allocated (dotted)", fontsize=style.FONT)
    gap = "memory the allocator holds but the step never uses"
    ax_gap.set_title(gap + (f"\nsame points: {'; '.join(same[1])}" if same[1] else ""), fontsize=style.FONT)
    for ax in (ax_r, ax_gap):
        ax.grid(True, alpha=0.3)
    style.legend_right(ax_r, title="\n".join(["same points, drawn once:", *same[0]]) if same[0] else None)
    answers = {}  # strategies whose reserved memory moves alike, in one phrase
    for s, rows in frame[frame["mode"] == "model"].groupby("strategy", sort=False):
        answers.setdefault(_growth(rows), []).append(s)
    answer = "; ".join(f"{' and '.join(names)}: reserved {how}" for how, names in answers.items())
    engine = _engine_of(frame, None)
    where = f"{frame['model'].iloc[0]}" + (f" on {engine} ({style.layout_of(engine)})" if engine else "")
    style.title(fig, "How does the caching allocator's reserved memory move over a long prompt?", answer,
                f"{where}, {title_detail.strip(' ()' + chr(10))}, {_modes_word(frame)}", _retry_sentence(frame))
    return fig


def policy_schedule(frame, title_detail: str = "") -> Figure:
    """Budget authorised and memory needed vs memory free, step by step, per policy.
    ``frame``: one row per policy x step with ``policy, step, free_bytes, budget_bytes,
    peak_transient_bytes, fits`` (``budget_policy.run_policy``), modelled."""
    fig = style.figure(7.0)
    ax_b, ax_p = fig.subplots(2, 1, sharex=True, sharey=True)
    looks = style.series_styles(frame["policy"])
    first = frame[frame["policy"] == frame["policy"].iloc[0]].sort_values("step")
    for ax in (ax_b, ax_p):
        ax.plot(first["step"], first["free_bytes"] / GIB, color=style.FREE_COLOUR, linewidth=2,
                label="memory free at the step")
    for policy, rows in frame.groupby("policy", sort=False):
        rows = rows.sort_values("step")
        budget = rows["budget_bytes"].astype(float) / GIB
        kw = dict(linestyle="--", markerfacecolor="none", label=f"{policy} (modelled)", **looks[policy])
        ax_b.plot(rows["step"], budget, **kw)
        ax_p.plot(rows["step"], rows["peak_transient_bytes"] / GIB, **kw)
        bad = rows[~rows["fits"].astype(bool)]
        if len(bad):
            ax_p.scatter(bad["step"], bad["peak_transient_bytes"] / GIB, marker="X", s=90,
                         color="black", zorder=5, label=f"{policy}: OOM, needs more than is free")
    ax_b.set_ylabel("budget authorised (GiB)")
    ax_p.set_ylabel("transient peak (GiB)")
    ax_b.set_title("logits budget the policy authorises", fontsize=style.FONT, loc="left")
    ax_p.set_title("transient peak of the step's plan (padding and temporaries included)", fontsize=style.FONT,
                   loc="left")
    ax_p.set_xlabel("engine step (free memory falling as in the report)")
    style.count_axis(ax_p.xaxis)
    for ax in (ax_b, ax_p):
        ax.grid(True, alpha=0.3)
    style.legend_below(fig, ncol=3)
    for ax in (ax_b, ax_p):  # after the legend: a policy drawn under another keeps its entry
        style.merge_identical(ax)
    style.title(fig, "Which budget policy authorises a chunk that no longer fits?", title_detail.strip(" \n"),
                "planned without an engine release: DeepGEMM 2.6 (full logits layout), vLLM's K workspace; "
                "free memory from each step's reading, the KV pool allocated up front")
    return fig


CROSSES = "oom-crosses"  # the gid of auto_candidates' OOM crosses (the live dashboard moves them)


def auto_candidates(candidates, free_bytes: int, title_detail: str = "", chosen=None) -> Figure:
    """Modelled time over the workload mix vs budget, per strategy; candidates that
    would OOM at some step are drawn hollow and crossed; below, the memory the worst step
    needs and that peak over the budget.  ``candidates``: a DataFrame of ``auto.Candidate``
    rows and their ``needs_bytes``.  The release's own chunker (``engine``) is the only one a
    setting deploys; the others are what a patched engine could do.  ``chosen``: ``auto``'s
    recommendation, its choices starred and named in the title."""
    fig = style.figure(8.6)
    ax_t, ax_m, ax_ratio = fig.subplots(3, 1, sharex=True)
    looks = style.series_styles(candidates["strategy"])
    proxies = []  # the legend names every strategy, also one drawn under another in every panel
    for strategy, rows in candidates.groupby("strategy", sort=False):
        rows = rows.sort_values("budget_mb")
        kw = dict(linestyle="--", markerfacecolor="none", label=strategy, **looks[strategy])
        label = (f"{rows['engine'].iloc[0]}'s own knob (deployable)" if strategy == "engine"
                 else f"{strategy} (a patched engine)")
        proxies.append(Line2D([], [], **{**kw, "label": label}))
        ax_t.plot(rows["budget_mb"], rows["total_ms"], **kw)
        if "total_low_ms" in rows and rows["total_low_ms"].notna().all():  # the published checks' band
            ax_t.fill_between(rows["budget_mb"], rows["total_low_ms"], rows["total_high_ms"],
                              color=looks[strategy]["color"], alpha=0.2, linewidth=0)
        ax_m.plot(rows["budget_mb"], rows["needs_bytes"] / GIB, **kw)
        ax_ratio.plot(rows["budget_mb"], rows["needs_bytes"] / (rows["budget_mb"] * 2**20), **kw)
        bad = rows[~rows["fits"].astype(bool)]
        ax_t.scatter(bad["budget_mb"], bad["total_ms"], marker="x", color="black", zorder=5, gid=CROSSES)
    # the peak panel keeps the candidates' scale: free memory moves over it (the dashboard
    # redraws only the line), and beside it the legend says so
    ax_m.autoscale_view()
    low, high = ax_m.get_ylim()
    ax_m.axhline(free_bytes / GIB, color=style.FREE_COLOUR, linewidth=2, label=free_label(free_bytes, high))
    ax_m.set_ylim(low, high)
    ax_t.set_ylabel("time over the mix (ms)")
    ax_t.set_title("indexer time over the workload mix (modelled;\nshaded: the band of the published "
                   "kernel checks)", fontsize=style.FONT - 1)
    ax_m.set_ylabel("worst step needs (GiB)")
    ax_m.set_title("memory the worst step needs, modelled\n(own knob below its default: + the profile-run "
                   "reservation given up)", fontsize=style.FONT - 1)
    ax_ratio.set_ylabel("peak / budget")
    ax_ratio.set_xlabel("logits budget")
    budgets = sorted(set(candidates["budget_mb"].astype(float)))
    style.mib_ticks(ax_ratio.xaxis, budgets)
    for ax in (ax_t, ax_m, ax_ratio):
        ax.grid(True, alpha=0.3)
    # strategies with the same points in a panel: drawn once, named beside the panel
    same = [style.merge_identical(ax, show=False) for ax in (ax_t, ax_m, ax_ratio)]
    stars = _star_choices(ax_t, chosen)
    crossed = Line2D([], [], marker="x", color="black", linestyle="none", label="OOM at some step")
    style.legend_right(ax_t, handles=[*proxies, crossed, *stars], title=_drawn_once(same[0]))
    style.legend_right(ax_m, handles=[ax_m.get_lines()[-1]], title=_drawn_once(same[1]))
    if same[2]:
        style.legend_right(ax_ratio, handles=[], title=_drawn_once(same[2]))
    style.title(fig, auto_candidates_title(title_detail, chosen))
    return fig


def free_label(free_bytes: int, top_gib: float) -> str:
    gib = free_bytes / GIB
    return f"free: {gib:.2f} GiB" + (",\nabove the panel:\nevery candidate fits" if gib > top_gib else "")


def _drawn_once(same: list[str]) -> str | None:
    """A legend title naming the lines drawn under another (the same points), or None."""
    return "\n".join(["drawn once (same points):", *same]) if same else None


def _star_choices(ax, chosen) -> list:
    """A star on the candidate ``auto`` deploys (filled) and on the patched engine's fastest
    (hollow), one star where both lie on one point; their handles."""
    deploy, patched = getattr(chosen, "deployable", None), getattr(chosen, "patched", None)
    choices = [(c, what, fill) for c, what, fill in ((deploy, "to deploy", "black"),
                                                     (patched, "a patched engine's fastest", "none"))
               if c is not None]
    if len(choices) == 2 and (deploy.budget_mb, deploy.total_ms) == (patched.budget_mb, patched.total_ms):
        choices = [(deploy, "to deploy, and a patched engine's fastest", "black")]
    return [ax.scatter([c.budget_mb], [c.total_ms], marker="*", s=260, facecolor=fill, edgecolor="black",
                       linewidth=1.2, zorder=6, label=f"chosen: {what}") for c, what, fill in choices]


def auto_candidates_title(title_detail: str = "", chosen=None) -> str:
    answer = ""
    if chosen is not None:
        answer = (f"\nAnswer: {chosen.deploy_line}" if chosen.deployable is not None else "\nAnswer: no setting fits")
        if chosen.patched is not None:
            answer += f"; a patched engine: {chosen.patched.strategy} at {chosen.patched.budget_mb:g} MiB"
    return style.wrap(f"The fastest budget without an OOM: the release's own knob, or a patched engine{answer}\n"
                      f"{title_detail.strip(' ' + chr(10))}")


def schedule_comparison(per_step, title_detail: str = "", model: str | None = None, engine: str | None = None,
                        free_gib: float | None = None, config=None) -> Figure:
    """The logits each step would need unchunked (M x N x 4 bytes, modelled), step by
    step, for the built-in simulator and vLLM's own scheduler.  ``per_step``: the
    table of ``workload.compare.SourceComparison.per_step``; the model, release, free memory
    and scheduler ``config`` the title names."""
    from ..engines import not_default_text

    context = style.context(model, engine, free_gib, not_default_text(engine, config) if config else "")
    fig = style.figure(4.4)
    ax = fig.subplots()
    styles = {"simulator": dict(color=style.PALETTE[0], linestyle="-", linewidth=2.2),
              "vllm": dict(color=style.PALETTE[1], linestyle="--", linewidth=1.2)}
    for source, rows in per_step.groupby("source", sort=False):
        ax.plot(rows["step"], rows["m_times_n"] * 4 / GIB, label=f"{source} schedule",
                **styles.get(source, {}))
    ax.set_xlabel("engine step")
    ax.set_ylabel("unchunked logits M x N x 4 (GiB, modelled)")
    ax.grid(True, alpha=0.3)
    if style.merge_identical(ax, show=False):  # one schedule drawn, said so: the lines would hide each other
        ax.lines[0].set_label(" = ".join(f"{s} schedule" for s in dict.fromkeys(per_step["source"]))
                              + " (the same at every step)")
    style.legend_below(fig)
    style.title(fig, f"Does the simulator schedule the same prefill steps as vLLM? {title_detail}", context)
    return fig


def release_frontier(table, title_detail: str = "") -> Figure:
    """The worst step's transient peak per engine release over concurrency, against the
    memory free: where each release OOMs on a deployment.  Releases whose lines coincide are
    set a little apart sideways (a fixed step per release).  ``table``: rows of
    ``study.releases.release_table`` (one deployment)."""
    fig = style.figure(6.0)
    ax = fig.subplots()
    engines = list(dict.fromkeys(table["engine"]))
    looks = style.series_styles(engines)
    concs = sorted(table["concurrency"].unique())
    step = min(np.diff(concs)) if len(concs) > 1 else 1
    for k, engine in enumerate(engines):
        rows = table[table["engine"] == engine].sort_values("concurrency")
        dodge = step * 0.06 * (k - (len(engines) - 1) / 2)
        for mode in [m for m in ("model", "trace", "measure") if m in set(rows["mode"])]:
            r = rows[rows["mode"] == mode]
            ax.plot(r["concurrency"] + dodge, r["peak_transient_gib"], markersize=5,
                    label=f"{engine} ({mode_word(mode)})", **looks[engine], **_line_style(mode))
            oom = r[r["oom"].astype(bool)]
            ax.scatter(oom["concurrency"] + dodge, oom["peak_transient_gib"], marker="x", color="black", zorder=3)
    free = float(table["free_gib"].iloc[0])
    ax.axhline(free, color=style.FREE_COLOUR, linewidth=1.5, label=f"{free:g} GiB free")
    ax.scatter([], [], marker="x", color="black", label="OOM")
    style.gib_axis(ax.yaxis)
    values = [*table["peak_transient_gib"].astype(float), free]
    # from the power of two below the lowest to the one above the highest: a tick past every value
    ax.set_ylim(2.0 ** np.floor(np.log2(min(values) * 0.95)), 2.0 ** np.ceil(np.log2(max(values) * 1.05)))
    ax.set_xticks(concs, [str(c) for c in concs])
    ax.set_xlabel("concurrency (requests)")
    ax.set_ylabel("worst step: indexer transient peak")
    ax.grid(True, alpha=0.3)
    style.legend_below(fig, ncol=3, title="release at its own default chunker and scheduler")
    isl = int(table["isl"].iloc[0])
    from ..study.releases import deployments

    model = deployments()[table["deployment"].iloc[0]]["model"]
    settings = list(dict.fromkeys(d.split(" (default")[0] for d in not_default_of(table).split("; ") if d))
    scheduler = (f"the deployment's {', '.join(settings)}, else each release's default" if settings
                 else "each release's default")
    style.title(fig, f"Which releases run out of memory at ISL {isl:,}, and from which concurrency?",
                _release_answer(table, engines, free),
                f"{model}, deployment {title_detail.strip(' ()' + chr(10))}; {_layouts(engines)}",
                f"every release, SGLang's included, scheduled by the vLLM V1 scheduler simulator ({scheduler})")
    return fig


def _release_answer(table, engines, free: float) -> str:
    """The title's answer: which releases OOM from which concurrency, or none, in words."""
    ooms = table[table["oom"].astype(bool)]
    if ooms.empty:
        return (f"Answer: none; the worst step of any release needs at most "
                f"{style.size_label(table['peak_transient_gib'].max())} of the {free:g} GiB free (modelled)")
    first = ooms.groupby("engine")["concurrency"].min()
    by = {}
    for e in engines:
        by.setdefault(int(first[e]) if e in first else None, []).append(e)
    parts = [f"from concurrency {c}: {', '.join(es)}" for c, es in sorted((c, es) for c, es in by.items() if c)]
    if None in by:
        parts.append(f"never: {', '.join(by[None])}")
    return "Answer (modelled): OOM " + "; ".join(parts)


def _layouts(engines) -> str:
    """Which releases plan the full logits and which the compressed, as one phrase."""
    from ..engines import get_engine

    by = {}
    for e in engines:
        by.setdefault(get_engine(e).layout, []).append(e)
    if len(by) == 1:
        return f"{next(iter(by))} logits layout"
    (common, _), (rare, names) = sorted(by.items(), key=lambda kv: -len(kv[1]))[:2]
    return f"{common} logits layout, {rare} on {', '.join(names)}"


def budget_frontier(frame, free_gib: float | None = None, title_detail: str = "") -> Figure:
    """Where the OOM frontier lies over free memory x budget for long-context workloads: per
    workload (one panel per concurrency x ISL, one y scale for all), the worst step's transient
    peak against the logits budget, one line per strategy, and the peak over the budget.  A
    budget fits wherever the free memory is above its point, so each line is that strategy's
    frontier; a strategy without a budget is flat.  ``frame``: model rows over several budgets
    (one free GiB); ``free_gib``: a level drawn."""
    engine = _engine_of(frame, None)
    data = _select(frame, engine=engine, mode="model")
    workloads = sorted({(int(c), int(i)) for c, i in zip(data["concurrency"], data["isl"])})
    strategies = list(dict.fromkeys(data["strategy"]))
    looks = style.series_styles(strategies)
    nrows, ncols = style.grid_shape(len(workloads) + 1)  # the last panel: peak / budget
    fig = style.figure(2.6 * nrows + 1.8)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    budgets = sorted(set(data["budget_mb"].dropna().astype(float)))
    shown = budgets if len(budgets) <= 5 else budgets[::2]  # ticks that fit a half-width panel
    panels = list(axes.flat)
    for ax, (conc, isl) in zip(panels, workloads):
        cell = data[(data["concurrency"] == conc) & (data["isl"] == isl)]
        for s in strategies:
            rows = cell[cell["strategy"] == s].sort_values("budget_mb")
            peak = rows["peak_transient_bytes"].astype(float) / GIB
            if rows["budget_mb"].isna().all():  # no budget: one row, the same at every budget
                ax.axhline(peak.iloc[0], color=looks[s]["color"], linestyle=":", linewidth=1.2, label=s)
                continue
            ax.plot(rows["budget_mb"].astype(float), peak, markerfacecolor="none", linestyle="--",
                    markersize=5, label=s, **looks[s])
        if free_gib is not None:
            ax.axhline(free_gib, color=style.FREE_COLOUR, linewidth=1.5, label=f"{free_gib:g} GiB free")
        ax.set_ylabel("free memory needed")
        ax.set_title(f"{conc} x ISL {style.token_label(isl)}", fontsize=style.FONT)
    peaks = data["peak_transient_bytes"].astype(float) / GIB
    ys = [*peaks, *([free_gib] if free_gib is not None else [])]
    ratio = panels[len(workloads)]
    conc, isl = workloads[-1]
    widest = data[(data["concurrency"] == conc) & (data["isl"] == isl) & data["budget_mb"].notna()]
    for s, rows in widest.groupby("strategy", sort=False):
        rows = rows.sort_values("budget_mb")
        ratio.plot(rows["budget_mb"].astype(float), rows["peak_transient_bytes"] / (rows["budget_mb"] * 2**20),
                   markerfacecolor="none", linestyle="--", markersize=5, label=s, **looks[s])
    ratio.set_ylabel("peak / budget")
    ratio.set_title(f"peak over budget at {conc} x ISL {style.token_label(isl)}", fontsize=style.FONT)
    for ax in panels[:len(workloads) + 1]:
        style.mib_ticks(ax.xaxis, shown)
        ax.set_xlim(budgets[0] / 1.4, budgets[-1] * 1.4)
        ax.set_xlabel("logits budget")
        ax.grid(True, alpha=0.3)
    for ax in panels[:len(workloads)]:  # one y scale: panels compare at a glance
        style.gib_axis(ax.yaxis)
        ax.set_ylim(min(ys) / 1.3, max(ys) * 1.3)
    ratio.set_ylim(bottom=0)
    for ax in panels[len(workloads) + 1:]:
        ax.set_visible(False)
    shown_panels = panels[:len(workloads) + 1]
    legend = style.legend_below(fig, ncol=4)  # before lines drawn under others go: each keeps its entry
    same = {}  # strategies with the same points in a panel: drawn once, said in the legend
    for ax in shown_panels:
        for note in style.merge_identical(ax, show=False):
            same[note] = same.get(note, 0) + 1
    legend.set_title("strategy; a budget OOMs where its point lies above the free memory; dotted: no budget"
                     + "".join(f"\nsame points, drawn once: {note} (in {n} of {len(shown_panels)} panels)"
                               for note, n in same.items()))
    # the lengths are said even when every prompt is at its ISL: the frontier's may differ
    lengths = lengths_of(data) or "every prompt at its ISL"
    style.title(fig, "How much free memory does each budget need at long contexts?",
                style.context(frame["model"].iloc[0], engine, free_gib, not_default_of(data), "modelled"),
                f"{lengths}; {sample_of(data)}", title_detail)
    return fig


def ledger_bars(ledgers: list[tuple[str, object]], title_detail: str = "") -> Figure:
    """The ledger of one deployment under each what-if (``[(name, ledger.Ledger), ...]``, the
    first as the server is given): left, what the indexer reserves at boot, stacked by line (the KV
    cache gives it up); right, what the run's steps ask for beyond it, line by line, against the
    memory free when a step runs; the title says which what-ifs fit."""
    import textwrap

    from ..ledger import PHASES

    fig = style.figure(2.6 + 0.6 * len(ledgers))
    ax_boot, ax_step = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [1, 2]})
    y = np.arange(len(ledgers))[::-1]
    boot_names = list(dict.fromkeys(line.name for _, ledger in ledgers for line in ledger.of("boot")))
    boot_looks = {name: style.PALETTE[k % len(style.PALETTE)] for k, name in enumerate(boot_names)}
    for yi, (_, ledger) in zip(y, ledgers):
        left = 0.0
        for line in ledger.of("boot"):
            ax_boot.barh(yi, line.bytes / GIB, left=left, color=boot_looks[line.name], edgecolor="white",
                         label=f"boot: {line.name}")
            left += line.bytes / GIB
    step_phases = [p for p in PHASES if p != "boot"]
    height = 0.8 / len(step_phases)
    for k, phase in enumerate(step_phases):
        values = [sum(line.bytes for line in ledger.of(phase)) / GIB for _, ledger in ledgers]
        ax_step.barh(y + 0.4 - height * (k + 0.5), values, height=height, color=style.PALETTE[3 + k],
                     label=f"{phase}: the most it needs")
    for free in sorted({ledger.free_bytes for _, ledger in ledgers if ledger.free_bytes is not None}):
        ax_step.axvline(free / GIB, color=style.FREE_COLOUR, linewidth=2, label="memory free when a step runs")
    for yi, (_, ledger) in zip(y, ledgers):
        if ledger.verdict == "oom":
            ax_step.plot([ledger.oom_line.bytes / GIB], [yi], marker="X", markersize=10, color=style.FREE_COLOUR,
                         linestyle="", label="OOM: the first line that does not fit")
    ax_boot.set_yticks(y, [textwrap.fill(name, 24) for name, _ in ledgers])
    ax_boot.set_xlabel("at boot (GiB)")
    ax_boot.set_title("taken from the KV cache", fontsize=style.FONT)
    ax_step.set_xlabel("beyond the boot buffers (GiB)")
    ax_step.set_title("asked for by the run's steps", fontsize=style.FONT)
    for ax in (ax_boot, ax_step):
        ax.grid(True, axis="x", alpha=0.3)
    style.legend_below(fig, ncol=3)
    first = ledgers[0][1]
    fits = [name for name, ledger in ledgers[1:] if ledger.verdict == "fits"]
    if first.verdict == "oom":
        answer = f"OOM as given ({first.oom_line.name}); fits with {', '.join(fits)}" if fits else "OOM as given"
    else:
        answer = "fits as given"
    fig.suptitle(textwrap.fill(f"The indexer's memory over a run (modelled): {answer}", 80) + title_detail,
                 fontsize=style.FONT + 1)
    return fig

"""One style for every figure: sizes, fonts, colours and the helpers that apply them.

A figure is pasted into a design discussion as it is saved, so it must read at 150 dpi and at
most ``WIDTH`` inches wide: panels go in at most two columns, legends sit outside the data,
counts tick at integers, sizes read as MiB / GiB, lines differ in colour *and* marker, and the
heatmaps share one colour scale (``PEAK_NORM``) so that a colour means the same GiB in every
figure.  ``figure_check.check_figure`` holds each saved figure to these rules.
"""
from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullLocator

WIDTH = 8.0  # inches: 1200 px at 150 dpi, the widest a pasted figure stays readable
DPI = 150
FONT = 9  # points: axis labels; ticks and legends one smaller, titles one larger
TITLE_CHARS = 95  # a title line at FONT + 1 points that fits WIDTH
# Okabe & Ito's colour-blind-safe qualitative palette, without its vermillion (red is kept
# for free memory and OOM) and with its yellow (unreadable on white) swapped for a brown
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#000000", "#999999", "#8C510A")
MARKERS = "osD^vP<X>"  # 9 markers against 8 colours: 72 lines before a pair repeats
FREE_COLOUR = "#D7191C"  # free memory and OOM, in every figure
CMAP = "cividis"  # perceptually uniform, readable in grey
# one colour scale for every heatmap of transient GiB: 1/16 GiB to 32 GiB, clipped beyond
PEAK_NORM_RANGE = (1 / 16, 32.0)
COUNT_UNITS = ("(count)", "(requests)")  # an axis labelled with one of these counts things
RC = {"font.size": FONT, "axes.titlesize": FONT + 1, "axes.labelsize": FONT, "xtick.labelsize": FONT - 1,
      "ytick.labelsize": FONT - 1, "legend.fontsize": FONT - 1, "legend.title_fontsize": FONT - 1,
      "figure.titlesize": FONT + 1, "savefig.dpi": DPI}


def use() -> None:
    """Make ``RC`` matplotlib's defaults (fonts, dpi) for the figures made from now on."""
    import matplotlib

    matplotlib.rcParams.update(RC)


def figure(height: float, width: float = WIDTH) -> Figure:
    """A new figure at most ``WIDTH`` wide, laid out by matplotlib's constrained layout."""
    return Figure(figsize=(min(width, WIDTH), height), layout="constrained")


def grid_shape(panels: int, columns: int = 2) -> tuple[int, int]:
    """(rows, columns) for ``panels`` panels: at most ``columns`` side by side, the rest below."""
    cols = max(1, min(columns, panels))
    return -(-panels // cols), cols


def series_styles(names) -> dict:
    """A colour and a marker per name (in order), so that every line can be told apart."""
    names = list(dict.fromkeys(names))
    return {n: {"color": PALETTE[k % len(PALETTE)], "marker": MARKERS[k % len(MARKERS)]}
            for k, n in enumerate(names)}


def wrap(text: str, width: float = WIDTH) -> str:
    """``text`` with each line wrapped to fit a title ``width`` inches wide (empty lines dropped)."""
    chars = int(TITLE_CHARS * width / WIDTH)
    return "\n".join(w for part in text.split("\n") if part.strip() for w in textwrap.wrap(part.strip(), chars))


def title(fig: Figure, *lines: str) -> None:
    """The figure title: each line wrapped to fit the figure's width."""
    fig.suptitle(wrap("\n".join(lines), fig.get_size_inches()[0]), fontsize=FONT + 1)


def layout_of(engine: str) -> str:
    """'full logits layout' or 'compressed logits layout': the logits shape of ``engine``'s path."""
    from ..engines import get_engine

    return f"{get_engine(engine).layout} logits layout"


def context(model: str | None = None, engine: str | None = None, free_gib: float | None = None,
            not_default: str = "", mode: str | None = None) -> str:
    """What a figure's numbers depend on, as one line for its title: the model, the engine
    release and its logits layout, the free memory, the scheduler where it is not the
    release's default, and whether the numbers are modelled or measured."""
    parts = []
    if model:
        parts.append(model)
    if engine:
        parts.append(f"on {engine} ({layout_of(engine)})")
    if free_gib is not None:
        parts.append(f"{free_gib:g} GiB free")
    if not not_default:
        parts.append("release-default scheduler")
    if mode:
        parts.append(mode)
    line = ", ".join(parts)
    return line + (f"\nscheduler not the release default: {not_default}" if not_default else "")


def _log2(axis) -> None:
    ax = axis.axes
    (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log", base=2)


def size_label(gib: float) -> str:
    """A size as people write it: '512 MiB', '1.5 GiB' (never 2^n)."""
    if gib <= 0:
        return "0"
    if gib < 1:
        return f"{gib * 1024:.3g} MiB"
    return f"{gib:.3g} GiB"


def gib_axis(axis, log: bool = True, ticks: int = 6) -> None:
    """An axis of GiB values: at most about ``ticks`` powers of two on a log scale, each
    labelled in MiB or GiB."""
    if log:
        _log2(axis)
        axis.set_major_locator(LogLocator(base=2, numticks=ticks))
        axis.set_minor_locator(NullLocator())
    else:  # at most about ``ticks`` round values, in MiB below 1 GiB: labels that fit a half panel
        axis.set_major_locator(_RoundSizes(nbins=ticks, steps=[1, 2, 2.5, 5, 10]))
    axis.set_major_formatter(FuncFormatter(lambda v, _: size_label(v)))


class _RoundSizes(MaxNLocator):
    """Ticks of a linear GiB axis at round values of the unit they read in: MiB below 1 GiB."""

    def tick_values(self, vmin, vmax):
        scale = 1024 if max(abs(vmin), abs(vmax)) < 1 else 1
        return np.asarray(super().tick_values(vmin * scale, vmax * scale)) / scale


def mib_ticks(axis, values) -> None:
    """A log axis of MiB values (budgets) ticked at ``values``, each labelled in MiB or GiB."""
    _log2(axis)
    axis.set_major_locator(FixedLocator(sorted(values)))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: size_label(v / 1024)))


class _WholePowers(LogLocator):
    """Powers of two from 1 up: a count is never a fraction, even where every value is 1."""

    def tick_values(self, vmin, vmax):
        return [v for v in super().tick_values(vmin, vmax) if v >= 1]


def count_axis(axis, log: bool = False) -> None:
    """An axis of counts: ticks at whole numbers only (a log scale: at powers of two)."""
    if log:
        _log2(axis)
        axis.set_major_locator(_WholePowers(base=2))
        axis.set_minor_locator(NullLocator())
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    else:
        axis.set_major_locator(MaxNLocator(integer=True))


def token_label(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens >= 1024 else str(tokens)


def legend_below(fig: Figure, handles=None, labels=None, ncol: int = 2, **kw):
    """The figure's one legend, under every panel (never over the data)."""
    if handles is None:
        handles, labels = [], []
        for ax in fig.axes:
            for h, label in zip(*ax.get_legend_handles_labels()):
                if label not in labels and not label.startswith("_"):
                    handles.append(h)
                    labels.append(label)
    return fig.legend(handles, labels, loc="outside lower center", ncol=max(1, min(ncol, len(labels))), **kw)


def legend_right(ax, **kw):
    """A panel's legend beside it, outside its data area."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kw)


def peak_norm() -> LogNorm:
    """The shared colour scale of transient GiB."""
    return LogNorm(*PEAK_NORM_RANGE, clip=False)


def peak_colorbar(fig: Figure, image, axes, label: str):
    """The colour bar of ``PEAK_NORM``: ticks at powers of two, labelled in MiB / GiB."""
    bar = fig.colorbar(image, ax=axes, shrink=0.9, extend="both")
    low, high = PEAK_NORM_RANGE
    ticks = 2.0 ** np.arange(np.log2(low), np.log2(high) + 1)
    bar.set_ticks(ticks, labels=[size_label(t) for t in ticks])
    bar.ax.yaxis.set_minor_locator(NullLocator())
    bar.set_label(label)
    return bar


def cell_values(fig: Figure, ax, grid, norm, cmap: str = CMAP, fmt=None, fontsize: float = FONT - 3) -> list:
    """The value of each cell written in it (dark text on light cells), where the text fits the
    cell once the figure is laid out; returns the texts (none where they do not fit)."""
    import matplotlib

    fmt = fmt or (lambda v: f"{v:.2g}" if v < 10 else f"{v:.0f}")
    fig.draw_without_rendering()  # lay out, to know the cells' size
    rows, cols = grid.shape
    cell_w = ax.bbox.width / cols * 72 / fig.dpi  # points
    cell_h = ax.bbox.height / rows * 72 / fig.dpi
    widest = max((len(fmt(v)) for v in grid.flat if v == v), default=0)
    if widest * 0.6 * fontsize > cell_w - 2 or fontsize * 1.2 > cell_h:
        return []
    colours = matplotlib.colormaps[cmap]
    texts = []
    for i in range(rows):
        for j in range(cols):
            v = grid[i, j]
            if v != v:
                continue
            light = sum(colours(norm(v))[:3]) / 3 > 0.5
            texts.append(ax.text(j, i, fmt(v), ha="center", va="center", fontsize=fontsize,
                                 color="black" if light else "white"))
    return texts


def cell_boundary(ax, inside, **kw):
    """The edges between cells inside and outside a region (``inside``: boolean rows x columns
    over a heatmap drawn at integer positions), as one line collection; None when no edge
    separates them.  A frontier drawn this way follows the cells that were computed, never a
    line interpolated between categories."""
    from matplotlib.collections import LineCollection

    rows, cols = inside.shape
    segments = []
    for i in range(rows):
        for j in range(cols):
            if j + 1 < cols and inside[i, j] != inside[i, j + 1]:
                segments.append([(j + 0.5, i - 0.5), (j + 0.5, i + 0.5)])
            if i + 1 < rows and inside[i, j] != inside[i + 1, j]:
                segments.append([(j - 0.5, i + 0.5), (j + 0.5, i + 0.5)])
    if not segments:
        return None
    return ax.add_collection(LineCollection(segments, **kw))


SAME_POINTS = 0.002  # of a panel's width or height: points closer than this are drawn on each other


def same_points(ax, a, b) -> bool:
    """Whether two series of points ((n, 2) data arrays) of ``ax`` land on the same places: each
    point within ``SAME_POINTS`` of the panel's size of its twin, missing where its twin is."""
    if a.shape != b.shape:
        return False
    ax.get_xlim(), ax.get_ylim()  # the view as autoscaled so far
    to_axes = ax.transData + ax.transAxes.inverted()
    pa, pb = to_axes.transform(a), to_axes.transform(b)
    missing = ~np.isfinite(pa) | ~np.isfinite(pb)
    if (missing != (~np.isfinite(pa) & ~np.isfinite(pb))).any():
        return False
    return bool(np.all(np.abs(np.where(missing, 0, pa - pb)) <= SAME_POINTS))


def merge_identical(ax, prefix: str = "", show: bool = True) -> list[str]:
    """Lines of ``ax`` that draw the same points as an earlier one are taken out (drawn on top, they
    would hide it) and named, where ``show``, in the panel's right-hand title: "b = a" (the lines'
    labels without ``prefix``, and without a trailing " (...)" they share); returns those phrases.
    A figure legend made before keeps every line's entry."""
    import re

    kept, same = [], {}
    for line in list(ax.lines):
        if not line.get_visible() or not len(line.get_xdata()) or line.get_label().startswith("_"):
            continue
        xy = np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
        twin = next((k for k, kxy in kept if same_points(ax, kxy, xy)), None)
        if twin is None:
            kept.append((line, xy))
            continue
        same.setdefault(twin, []).append(line.get_label())
        line.remove()
    notes = []
    for twin, hidden in same.items():
        labels = [label.removeprefix(prefix) for label in (*hidden, twin.get_label())]
        tails = {re.search(r"( \(.*\))?$", label).group(0) for label in labels}
        tail = tails.pop() if len(tails) == 1 else ""
        if tail:  # "vllm (modelled) = causal (modelled)" reads "vllm = causal"
            labels = [label.removesuffix(tail) for label in labels]
        notes.append(" = ".join(labels))
    if notes and show:
        ax.set_title("same points: " + "; ".join(notes), loc="right", fontsize=FONT - 2)
    return notes

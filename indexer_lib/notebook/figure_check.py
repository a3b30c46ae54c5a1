"""Whether a figure keeps the style (``style``) and can be pasted as it is.

``check_figure`` draws the figure and returns one line per broken rule (empty: fit to publish):

- at most ``style.WIDTH`` inches wide (1200 px at 150 dpi);
- no text outside the figure (a clipped title or label);
- tick labels of one axis that do not overlap each other;
- legends outside every panel's data area (and its colour bar);
- whole-number ticks on an axis of counts (its label ends in ``(count)`` or ``(requests)``);
- no power-of-two or power-of-ten tick labels (``2^1``): sizes read in MiB / GiB;
- where the x axis is a logits budget and the y axis a peak, a panel of peak / budget, so that
  the two are never read as one;
- the title names what the saved file's parameters say the numbers depend on: the model, the
  engine release and its logits layout, the free memory and a scheduler setting that is not the
  release's default;
- no two series of one panel drawn on top of each other (the same points: one hides the other;
  ``style.merge_identical`` draws one and names the others);
- no bars on a log axis (a bar's length is read linearly: 16x would look 2-3x);
- no text citing another notebook's section (a pasted figure travels without the notebook);
- no value label under a marker, no panel title over another of the same panel.

``figure_digest`` fingerprints the data a figure draws, so that a run can refuse two figures that
draw the same data (``duplicate_figures``).
"""
from __future__ import annotations

import hashlib
import re

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from . import style

PAD = 1.0  # pixels of antialiased edge a text may overrun


def check_figure(fig: Figure, params: dict | None = None) -> list[str]:
    """The style rules ``fig`` breaks, one line each; ``params``: the parameters it is saved
    with (``plots.save``), which its title must name."""
    problems = []
    width = fig.get_size_inches()[0]
    if width > style.WIDTH + 1e-6:
        problems.append(f"{width:.1f} in wide ({width * style.DPI:.0f} px at {style.DPI} dpi): "
                        f"at most {style.WIDTH:g} in")
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    problems += _clipped(fig, renderer)
    problems += _ticks(fig, renderer)
    problems += _legends_over_data(fig, renderer)
    problems += _budget_without_ratio(fig)
    problems += _title_facts(fig, params or {})
    problems += _hidden_series(fig)
    problems += _log_bars(fig)
    problems += _section_citations(fig)
    problems += _labels_under_markers(fig, renderer)
    problems += _titles_over_titles(fig, renderer)
    return list(dict.fromkeys(problems))  # one line per rule and axis, not per panel


def _panels(fig: Figure):
    return [ax for ax in fig.axes if ax.get_visible()]


def _drawn_ticks(axis):
    """The tick labels matplotlib draws on ``axis`` (those located inside its view), with
    their locations."""
    if not axis.get_visible():
        return []
    low, high = sorted(axis.get_view_interval())
    tol = (high - low) * 1e-9
    labels = []
    for tick in axis.get_major_ticks() + axis.get_minor_ticks():
        loc = tick.get_loc()
        if loc is None or not low - tol <= loc <= high + tol:
            continue
        labels += [(loc, t) for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text()]
    return labels


def _texts(fig: Figure):
    """Every text drawn, tick labels aside: (where, text)."""
    texts = [("figure title", fig._suptitle)] if fig._suptitle is not None else []
    texts += [("figure text", t) for t in fig.texts]
    for ax in _panels(fig):
        texts += [("panel title", t) for t in (ax.title, ax._left_title, ax._right_title)]
        texts += [("axis label", a.label) for a in (ax.xaxis, ax.yaxis) if a.get_visible()]
        texts += [("text", t) for t in ax.texts]
    for legend in _legends(fig):
        texts += [("legend", t) for t in (legend.get_title(), *legend.get_texts())]
    return [(where, t) for where, t in texts if t.get_visible() and t.get_text().strip()]


def _legends(fig: Figure):
    found = [lg for lg in fig.legends]
    found += [ax.get_legend() for ax in _panels(fig) if ax.get_legend() is not None]
    return [lg for lg in found if lg.get_visible()]


def _clipped(fig: Figure, renderer) -> list[str]:
    box = fig.bbox
    problems = []
    tick_texts = [("tick label", t) for ax in _panels(fig) for a in (ax.xaxis, ax.yaxis) for _, t in _drawn_ticks(a)]
    for where, text in _texts(fig) + tick_texts:
        e = text.get_window_extent(renderer)
        if e.x0 < box.x0 - PAD or e.x1 > box.x1 + PAD or e.y0 < box.y0 - PAD or e.y1 > box.y1 + PAD:
            problems.append(f"{where} clipped by the figure's edge: {_short(text.get_text())!r}")
    return problems


def _ticks(fig: Figure, renderer) -> list[str]:
    problems = []
    for ax in _panels(fig):
        for axis in (ax.xaxis, ax.yaxis):
            located = _drawn_ticks(axis)
            labels = [t for _, t in located]
            name = axis.get_label_text() or ("colour bar" if ax.get_label() == "<colorbar>" else "an axis")
            powers = [t.get_text() for t in labels if "^" in t.get_text() or "times" in t.get_text()]
            if powers:
                problems.append(f"{name!r}: tick labels as powers {powers[:3]}, not MiB / GiB / numbers")
            boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: (b.x0, b.y0))
            if any(a.overlaps(b) and _overlap(a, b) > PAD for a, b in zip(boxes, boxes[1:])):
                problems.append(f"{name!r}: tick labels overlap each other")
            if any(unit in name for unit in style.COUNT_UNITS):
                fractions = [v for v, _ in located if abs(v - round(v)) > 1e-9]
                if fractions:
                    problems.append(f"{name!r} counts, yet ticks at {fractions[:3]}")
    return problems


def _overlap(a, b) -> float:
    return min(min(a.x1, b.x1) - max(a.x0, b.x0), min(a.y1, b.y1) - max(a.y0, b.y0))


def _legends_over_data(fig: Figure, renderer) -> list[str]:
    problems = []
    for legend in _legends(fig):
        box = legend.get_window_extent(renderer)
        for ax in _panels(fig):
            if box.overlaps(ax.bbox) and _overlap(box, ax.bbox) > PAD:
                what = legend.get_title().get_text() or _short(" / ".join(t.get_text() for t in legend.get_texts()))
                panel = ax.get_title() or ax.get_ylabel() or "a panel"
                problems.append(f"legend {what!r} over the data area of {panel!r}")
    return problems


def _budget_without_ratio(fig: Figure) -> list[str]:
    panels = _panels(fig)
    ratio = any("peak / budget" in ax.get_ylabel() for ax in panels)
    for ax in panels:
        x, y = ax.get_xlabel().lower(), ax.get_ylabel().lower()
        if "budget" in x and any(w in y for w in ("peak", "need")) and not ratio:
            return [f"budget on the x axis against {ax.get_ylabel()!r}, and no 'peak / budget' panel"]
    return []


def _title_facts(fig: Figure, params: dict) -> list[str]:
    """The parameters the title must name: the model, the engine release with its layout, the
    free memory, a scheduler setting that is not the release's default."""
    from ..engines import get_engine

    text = " ".join(t.get_text() for t in [fig._suptitle, *fig.texts] if t is not None).replace("\n", " ")
    missing = []
    model, engine, free = params.get("model"), params.get("engine"), params.get("free_gib")
    if isinstance(model, str) and model not in text:
        missing.append(f"the model {model}")
    if isinstance(engine, str) and engine:
        layout = get_engine(engine).layout
        if engine not in text:
            missing.append(f"the engine release {engine}")
        if f"{layout} logits layout" not in text:
            missing.append(f"its {layout} logits layout")
    if isinstance(free, (int, float)) and f"{free:g} GiB free" not in text:
        missing.append(f"{free:g} GiB free")
    if params.get("mnbt") is not None and "max_num_batched_tokens" not in text:
        missing.append(f"max_num_batched_tokens={params['mnbt']} (not the release's default)")
    return [f"title does not name {m}" for m in missing]


def _short(text: str, n: int = 60) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= n else text[:n - 3] + "..."


def _series(ax):
    """(kind, label, points) of each line and scatter drawn in ``ax``, points as an (n, 2) array."""
    found = []
    for line in ax.lines:
        if line.get_visible() and len(line.get_xdata()):
            xy = np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
            found.append(("line", line.get_label(), xy))
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and coll.get_visible() and len(coll.get_offsets()):
            found.append(("scatter", coll.get_label(), np.asarray(coll.get_offsets(), float)))
    return found


def _hidden_series(fig: Figure) -> list[str]:
    problems = []
    for ax in _panels(fig):
        # a scatter over a line's points marks them (crosses on OOMs): lines against lines only, and
        # scatters that name a series (an unnamed mark, alike for every series, hides nothing)
        seen = []
        for kind, label, xy in _series(ax):
            if kind == "scatter" and label.startswith("_"):
                continue
            for other_kind, other, oxy in seen:
                if kind == other_kind and style.same_points(ax, xy, oxy):
                    panel = ax.get_title() or ax.get_title(loc="left") or ax.get_ylabel() or "a panel"
                    problems.append(f"{_short(panel)!r}: {other!r} and {label!r} drawn on top of each other "
                                    "(the same points; draw one and name the other)")
                    break
            seen.append((kind, label, xy))
    return problems


def _log_bars(fig: Figure) -> list[str]:
    problems = []
    for ax in _panels(fig):
        for bars in ax.containers:
            if not isinstance(bars, BarContainer) or not len(bars.patches):
                continue
            axis = ax.yaxis if bars.orientation == "vertical" else ax.xaxis
            if axis.get_scale() == "log":
                name = axis.get_label_text() or "an axis"
                problems.append(f"{name!r}: bars on a log axis (their lengths read as linear)")
    return problems


SECTION = re.compile(r"notebook\s*\d+\W*\s*section", re.IGNORECASE)


def _section_citations(fig: Figure) -> list[str]:
    return [f"{where} cites a notebook's section: {_short(t.get_text())!r}"
            for where, t in _texts(fig) if SECTION.search(t.get_text())]


def _labels_under_markers(fig: Figure, renderer) -> list[str]:
    """Texts in a panel whose box holds a marker of a line or scatter of that panel."""
    problems = []
    for ax in _panels(fig):
        points = []
        for artist in ax.lines:
            if artist.get_visible() and artist.get_marker() not in (None, "", "None", " ") and len(artist.get_xdata()):
                points.append(artist.get_transform().transform(artist.get_xydata()))
        for coll in ax.collections:
            if isinstance(coll, PathCollection) and coll.get_visible() and len(coll.get_offsets()):
                points.append(coll.get_offset_transform().transform(coll.get_offsets()))
        if not points:
            continue
        xy = np.concatenate(points)
        for text in ax.texts:
            if not text.get_visible() or not text.get_text().strip():
                continue
            box = text.get_window_extent(renderer)
            inside = ((xy[:, 0] > box.x0 + PAD) & (xy[:, 0] < box.x1 - PAD)
                      & (xy[:, 1] > box.y0 + PAD) & (xy[:, 1] < box.y1 - PAD))
            if inside.any():
                problems.append(f"value label {_short(text.get_text())!r} under a marker")
    return problems


def _titles_over_titles(fig: Figure, renderer) -> list[str]:
    problems = []
    for ax in _panels(fig):
        titles = [t for t in (ax._left_title, ax.title, ax._right_title) if t.get_visible() and t.get_text().strip()]
        boxes = [t.get_window_extent(renderer) for t in titles]
        for i in range(len(titles)):
            for j in range(i + 1, len(titles)):
                if boxes[i].overlaps(boxes[j]) and _overlap(boxes[i], boxes[j]) > PAD:
                    problems.append(f"panel titles over each other: {_short(titles[i].get_text())!r} and "
                                    f"{_short(titles[j].get_text())!r}")
    return problems


def figure_digest(fig: Figure) -> str:
    """A fingerprint of the data ``fig`` draws (lines, scatters, bars, images; not its texts)."""
    digest = hashlib.sha1()
    for ax in fig.axes:
        parts = [xy.round(12).tobytes() for *_, xy in _series(ax)]
        parts += [np.array([(p.get_x(), p.get_y(), p.get_width(), p.get_height()) for p in bars.patches]).round(12)
                  .tobytes() for bars in ax.containers if isinstance(bars, BarContainer)]
        parts += [np.ma.filled(np.asarray(im.get_array(), float), np.nan).round(12).tobytes() for im in ax.images]
        for part in sorted(parts):
            digest.update(part)
        digest.update(b"|")
    return digest.hexdigest()


DIGEST_KEY = "Data digest"  # the PNG text field ``plots.save`` writes figure_digest under


def duplicate_figures(pngs) -> list[str]:
    """Pairs of saved figures (PNG paths) that draw the same data, one line each."""
    from PIL import Image

    first, problems = {}, []
    for png in sorted(pngs):
        with Image.open(png) as im:
            digest = im.info.get(DIGEST_KEY)
        if digest is None:
            continue
        if digest in first:
            problems.append(f"{png.name} draws the same data as {first[digest].name}")
        else:
            first[digest] = png
    return problems

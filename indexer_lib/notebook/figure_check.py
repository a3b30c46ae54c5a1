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
  release's default.
"""
from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

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

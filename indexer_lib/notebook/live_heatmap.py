"""The dashboard's frontier heatmap, kept alive between control changes.

``plots.frontier_heatmap`` builds a new figure each time: most of a redraw then goes to
laying it out, and most of the rest to drawing text.  ``LiveHeatmap`` lays out one panel
(concurrency x ISL) once and splits the figure into regions that do not overlap, one per
group of artists a change may touch: the cells (with the OOM frontier and the OOM
marks), the colour bar, the panel title, the legend and the figure title.  The axes, ticks
and labels around them never change and are drawn once.  A change redraws only the regions
whose content changed, each over its saved copy of the unchanging figure, and keeps the
pixels of what it drew, so moving back to a value seen before copies them back instead of
drawing again.  Every call returns the figure as PNG bytes (``png_bands``: only the rows a
change touched are compressed again), equal pixel for pixel to the whole figure drawn afresh;
the figure says what ``frontier_heatmap`` says for the same rows.

``scripts/bench_dashboard_browser.py`` measures a change in chromium, from the control to the
new image painted, this way and with the figure drawn whole (docs/design.md#planning-a-grid-fast).
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from .png_bands import BandedPng
from . import style
from .plots import (CMAP, with_lengths, frontier_handle, frontier_line, heatmap_cells, heatmap_panel_title,
                    heatmap_question, heatmap_title, label_heatmap_axes, mark_oom, mode_word)

KEPT = 24  # drawn pixels kept per region (the cells region: about 0.5 MB each), oldest dropped first


class Kept(OrderedDict):
    """The last ``limit`` things drawn, by content; the one recalled last is dropped last."""

    def __init__(self, limit: int = KEPT):
        super().__init__()
        self.limit = limit

    def recall(self, key):
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def keep(self, key, value):
        self[key] = value
        if len(self) > self.limit:
            self.popitem(last=False)
        return value


class _Region:
    """A rectangle of the canvas that one group of artists draws into: its pixels without
    them, the content shown now, and the pixels of the contents drawn before."""

    def __init__(self, canvas: FigureCanvasAgg, bbox: Bbox):
        self.canvas, self.bbox = canvas, bbox
        self.empty = canvas.copy_from_bbox(bbox)  # the unchanging figure under the artists
        self.shown = None
        self.drawn = Kept()

    def show(self, key, draw) -> None:
        """Put the content ``key`` on the canvas: its pixels if drawn before, else ``draw()``
        over the empty region."""
        if key == self.shown:
            return
        pixels = self.drawn.recall(key)
        if pixels is None:
            self.canvas.restore_region(self.empty)
            draw()
            self.drawn.keep(key, self.canvas.copy_from_bbox(self.bbox))
        else:
            self.canvas.restore_region(pixels)
        self.shown = key


def _regions(fig: Figure, ax, bar_ax, legend, title, renderer) -> dict[str, Bbox]:
    """The regions of a laid-out panel, in display pixels; ValueError where two overlap (a
    layout this split does not fit)."""
    width, height = fig.bbox.width, fig.bbox.height
    pad = 3  # the spines' and glyphs' antialiased edges
    box = ax.bbox
    top = (ax.title.get_window_extent(renderer).y1 + title.get_window_extent(renderer).y0) / 2
    bottom = legend.get_window_extent(renderer).y1 + pad
    left, right, low, high = box.x0 - pad, box.x1 + pad, box.y0 - pad, box.y1 + pad
    extents = {
        "cells": (left, low, right, high),
        "panel title": (left, high, right, top),
        "colour bar": ((box.x1 + bar_ax.bbox.x0) / 2, bottom, width, top),
        "legend": (0, 0, width, bottom),
        "title": (0, top, width, height),
    }
    # whole pixels (the canvas copies truncate): regions that share an edge share no pixel
    regions = {name: Bbox.from_extents(*(round(v) for v in e)) for name, e in extents.items()}
    names = list(regions)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if not _apart(regions[a], regions[b]):
                raise ValueError(f"the heatmap's {a} and {b} overlap: the panel cannot be redrawn by region")
    return regions


def _apart(a: Bbox, b: Bbox) -> bool:
    """Rectangles that share no pixel (at most an edge)."""
    return a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0


class LiveHeatmap:
    """One panel of worst-step transient GiB over ``concurrency`` x ``isl``."""

    def __init__(self, concurrency, isl, dpi: int = 90):
        self.concs, self.isls = sorted(concurrency), sorted(isl)
        self.dpi = dpi
        self.fig = Figure(figsize=(7.0, 4.4), dpi=dpi, layout="constrained")
        self.canvas = FigureCanvasAgg(self.fig)
        self.ax = self.fig.add_subplot()
        empty = np.full((len(self.concs), len(self.isls)), 1.0)
        # the colour scale every heatmap shares: a colour means the same GiB as in the saved figures
        self.image = self.ax.imshow(empty, origin="lower", aspect="auto", cmap=CMAP, norm=style.peak_norm())
        label_heatmap_axes(self.ax, self.concs, self.isls)
        self.ax.set_title(" ")
        self.bar = style.peak_colorbar(self.fig, self.image, self.ax, "worst-step transient peak (modelled)")
        self.legend = self.fig.legend(handles=[frontier_handle(0.0)], loc="outside lower center")
        self.title = self.fig.suptitle(" \n \n ")  # the question and the context, wrapped
        self.marks: list = []  # the OOM texts
        self.line = None  # the free-memory contour
        self.cells = None  # (cells, colour limits) the image shows
        self.canvas.draw()  # lay out once, then keep the positions
        self.fig.set_layout_engine("none")
        bounds = _regions(self.fig, self.ax, self.bar.ax, self.legend, self.title, self.canvas.get_renderer())
        # the figure without what a change touches (the axes, their ticks and labels stay)
        changing = [self.image, *self.ax.spines.values(), self.bar.ax, self.ax.title, self.legend, self.title]
        for artist in changing:
            artist.set_visible(False)
        self.canvas.draw()
        self.regions = {name: _Region(self.canvas, bbox) for name, bbox in bounds.items()}
        for artist in changing:
            artist.set_visible(True)
        # the cells region's image and frame, per cells shown, under the line and the marks
        self.cell_layers = Kept()
        self.pngs = Kept()  # the figure as PNG, per content of every region
        self.encoder = BandedPng()  # compresses again only the rows a change touched

    def render(self, frame, strategy: str, budget_mb: float, free_gib: float, model: str,
               engine: str | None = None, mode: str = "model") -> bytes:
        """The panel for these rows (one strategy and budget, one free GiB) as PNG."""
        if frame.empty:
            raise ValueError(f"no {mode} rows for {model} at {free_gib} GiB free")
        grid, oom = heatmap_cells(frame, self.concs, self.isls)
        limits = style.PEAK_NORM_RANGE
        cells = (grid.tobytes(), limits)  # all the image and its colours show
        if cells != self.cells:
            self.image.set_data(np.clip(grid, limits[0], None))
            self.cells = cells
        for artist in self.marks + ([self.line] if self.line is not None else []):
            artist.remove()
        self.line = frontier_line(self.ax, oom)
        self.marks = mark_oom(self.ax, grid, oom, self.image.norm)
        self.ax.set_title(heatmap_panel_title(strategy, budget_mb))
        self.bar.set_label(f"worst-step transient peak ({mode_word(mode)})")
        self.legend.get_texts()[0].set_text(frontier_handle(free_gib).get_label() if self.line is not None
                                            else f"no cell OOMs at {free_gib:g} GiB free")
        self.title.set_text(style.wrap(heatmap_question(model) + "\n" + heatmap_title(
            model, engine, free_gib, with_lengths(f"budget {budget_mb:g} MiB", frame, sample=False), mode),
            self.fig.get_size_inches()[0]))
        contents = {
            "cells": (cells, oom.tobytes(), free_gib),
            "panel title": self.ax.title.get_text(),
            "colour bar": (limits, self.bar.ax.get_ylabel()),
            "legend": self.legend.get_texts()[0].get_text(),
            "title": self.title.get_text(),
        }
        draw = {"cells": lambda: self._draw_cells(cells), "panel title": lambda: self._draw(self.ax.title),
                "colour bar": lambda: self._draw(self.bar.ax), "legend": lambda: self._draw(self.legend),
                "title": lambda: self._draw(self.title)}
        for name, content in contents.items():
            self.regions[name].show(content, draw[name])
        key = tuple(contents.values())
        png = self.pngs.recall(key)  # the whole figure shown before: its PNG too
        return png if png is not None else self.pngs.keep(key, self.png())

    def _draw(self, *artists) -> None:
        for artist in artists:
            self.fig.draw_artist(artist)

    def _draw_cells(self, cells) -> None:
        """The image and its frame (kept per cells shown), then the line and the OOM marks over
        them, in the order a full draw takes (by zorder)."""
        layer = self.cell_layers.recall(cells)
        if layer is None:
            self._draw(self.image, *self.ax.spines.values())
            self.cell_layers.keep(cells, self.canvas.copy_from_bbox(self.regions["cells"].bbox))
        else:
            self.canvas.restore_region(layer)
        self._draw(*([self.line] if self.line is not None else []), *self.marks)

    def png(self) -> bytes:
        """What the canvas holds now, as PNG (without drawing it again)."""
        return self.encoder.encode(np.asarray(self.canvas.buffer_rgba()))

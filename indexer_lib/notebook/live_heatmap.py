"""The dashboard's frontier heatmap, kept alive between control changes.

``plots.frontier_heatmap`` builds a new figure each time: most of a redraw then goes to
laying it out.  ``LiveHeatmap`` lays out one panel (concurrency x ISL) once and afterwards
only updates what a change touches: the cells, the colour scale, the OOM marks, the
free-memory line and the titles, drawn over a saved copy of the axes, ticks and labels.  A change of free memory alone leaves the cells and the
colour scale as they are, so it redraws the marks, the line and the titles over a saved
copy of the rest (blitting).  Every call returns the figure as PNG bytes; the figure says
what ``frontier_heatmap`` says for the same rows.
"""
from __future__ import annotations

import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from PIL import Image

from .plots import (CMAP, GIB, _budget_label, free_memory_line, heatmap_cells, heatmap_panel_title, heatmap_title,
                    label_heatmap_axes, mark_oom, mode_word)


class LiveHeatmap:
    """One panel of worst-step transient GiB over ``concurrency`` x ``isl``."""

    def __init__(self, concurrency, isl, dpi: int = 90):
        self.concs, self.isls = sorted(concurrency), sorted(isl)
        self.dpi = dpi
        self.fig = Figure(figsize=(7.0, 4.4), dpi=dpi, layout="constrained")
        self.canvas = FigureCanvasAgg(self.fig)
        self.ax = self.fig.add_subplot()
        empty = np.full((len(self.concs), len(self.isls)), 1.0)
        self.image = self.ax.imshow(empty, origin="lower", aspect="auto", cmap=CMAP, norm=LogNorm(1e-3, 2e-3))
        label_heatmap_axes(self.ax, self.concs, self.isls)
        self.ax.set_title(" ")
        self.bar = self.fig.colorbar(self.image, ax=self.ax, shrink=0.9)
        self.bar.set_label("worst-step transient peak (GiB, modelled)")
        self.legend = self.fig.legend(handles=[Line2D([], [], color="red", linewidth=2, label="free memory")],
                                      loc="outside lower center")
        self.title = self.fig.suptitle(" \n ")
        self.marks: list = []  # the OOM texts
        self.line = None  # the free-memory contour
        self.cells = None  # (grid, norm limits) last drawn
        self.background = None  # the figure without marks, line and titles, for a free-memory move
        self.canvas.draw()  # lay out once, then keep the positions
        self.fig.set_layout_engine("none")
        # what no change touches (the axes, their ticks and labels), saved once: a change of the
        # cells draws the image, the colour bar and the panel title over it, not the whole figure
        changing = [self.image, self.bar.ax, self.ax.title] + self._dynamic()
        for artist in changing:
            artist.set_visible(False)
        self.canvas.draw()
        self.static = self.canvas.copy_from_bbox(self.fig.bbox)
        for artist in changing:
            artist.set_visible(True)

    def _dynamic(self) -> list:
        # in the order a full draw takes (by zorder): the line under the OOM texts, as on a fresh figure
        return ([self.line] if self.line is not None else []) + self.marks + [self.legend, self.title]

    def render(self, frame, strategy: str, budget_mb: float, free_gib: float, model: str,
               engine: str | None = None, mode: str = "model") -> bytes:
        """The panel for these rows (one strategy and budget, one free GiB) as PNG."""
        if frame.empty:
            raise ValueError(f"no {mode} rows for {model} at {free_gib} GiB free")
        grid, oom = heatmap_cells(frame, self.concs, self.isls)
        gib = frame["peak_transient_bytes"].astype(float) / GIB
        limits = (max(gib.min(), 1e-3), max(gib.max(), 2e-3))
        panel = (limits, strategy, _budget_label(strategy, budget_mb), mode)  # all the background shows
        same_cells = self.cells is not None and self.cells[1] == panel and \
            np.array_equal(self.cells[0], grid, equal_nan=True) and self.background is not None
        for artist in self.marks + ([self.line] if self.line is not None else []):
            artist.remove()
        self.marks, self.line = [], None
        if not same_cells:
            self.image.set_norm(LogNorm(*limits))  # the colour bar follows its mappable's new norm
            self.image.set_data(np.clip(grid, limits[0], None))
            self.ax.set_title(heatmap_panel_title(strategy, budget_mb))
            self.bar.set_label(f"worst-step transient peak (GiB, {mode_word(mode)})")
        self.line = free_memory_line(self.ax, grid, free_gib)
        self.marks = mark_oom(self.ax, grid, oom, self.image.norm)
        self.legend.get_texts()[0].set_text(f"free memory: {free_gib:g} GiB")
        self.title.set_text(heatmap_title(model, engine, free_gib, f"budget {budget_mb:g} MiB", mode))
        if same_cells:  # free memory moved: the marks, the line and the titles over the rest
            self.canvas.restore_region(self.background)
            for artist in self._dynamic():
                self.fig.draw_artist(artist)
        else:  # over the static part, in the order a full draw takes: cells, frame, colour bar, title
            self.canvas.restore_region(self.static)
            for artist in [self.image, *self.ax.spines.values(), self.bar.ax, self.ax.title]:
                self.fig.draw_artist(artist)
            self.background = self.canvas.copy_from_bbox(self.fig.bbox)
            for artist in self._dynamic():
                self.fig.draw_artist(artist)
            self.cells = (grid, panel)
        return self.png()

    def png(self) -> bytes:
        return canvas_png(self.canvas)


def canvas_png(canvas: FigureCanvasAgg) -> bytes:
    """What an Agg canvas holds now, as PNG (without drawing it again)."""
    width, height = canvas.get_width_height()
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    image = image.convert("RGB")  # the figures are opaque: a quarter less to compress
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=1)  # fast: the widget sends it at once
    return out.getvalue()

"""The dashboard's frontier heatmap, kept alive between control changes.

``plots.frontier_heatmap`` builds a new figure each time, and most of a redraw then goes to
laying it out.  ``LiveHeatmap`` lays out one panel (concurrency x ISL) once and, on each change,
sets what the change touches (the cells and their colours, the free-memory line, the OOM marks,
the titles and the legend) and draws the figure whole; Pillow writes its PNG at a fast
compression level.  Measured in chromium (``scripts/bench_dashboard_browser.py``), a change that
needs no planning is painted in about 100 ms (p50; p95 105-142 ms, one move in 48 at 156 ms) this
way and in 49-79 ms when only the regions a change touched were redrawn, while a change that
replans takes 0.25-1.5 s either way: the figure is drawn whole.  It says what
``frontier_heatmap`` says for the same rows.
"""
from __future__ import annotations

import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from PIL import Image

from .plots import (CMAP, GIB, free_memory_line, heatmap_cells, heatmap_panel_title, heatmap_title,
                    label_heatmap_axes, mark_oom, mode_word)

PNG_LEVEL = 1  # zlib's fastest level: a dashboard's PNG is sent after every change


class LiveHeatmap:
    """One panel of worst-step transient GiB over ``concurrency`` x ``isl``."""

    def __init__(self, concurrency, isl, dpi: int = 90):
        self.concs, self.isls = sorted(concurrency), sorted(isl)
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
        self.canvas.draw()  # lay out once, then keep the positions
        self.fig.set_layout_engine("none")

    def render(self, frame, strategy: str, budget_mb: float, free_gib: float, model: str,
               engine: str | None = None, mode: str = "model") -> bytes:
        """The panel for these rows (one strategy and budget, one free GiB) as PNG."""
        if frame.empty:
            raise ValueError(f"no {mode} rows for {model} at {free_gib} GiB free")
        grid, oom = heatmap_cells(frame, self.concs, self.isls)
        gib = frame["peak_transient_bytes"].astype(float) / GIB
        limits = (max(gib.min(), 1e-3), max(gib.max(), 2e-3))
        self.image.set_norm(LogNorm(*limits))  # the colour bar follows its mappable's new norm
        self.image.set_data(np.clip(grid, limits[0], None))
        for artist in self.marks + ([self.line] if self.line is not None else []):
            artist.remove()
        self.line = free_memory_line(self.ax, grid, free_gib)
        self.marks = mark_oom(self.ax, grid, oom, self.image.norm)
        self.ax.set_title(heatmap_panel_title(strategy, budget_mb))
        self.bar.set_label(f"worst-step transient peak (GiB, {mode_word(mode)})")
        self.legend.get_texts()[0].set_text(f"free memory: {free_gib:g} GiB")
        self.title.set_text(heatmap_title(model, engine, free_gib, f"budget {budget_mb:g} MiB", mode))
        self.canvas.draw()
        return self.png()

    def png(self) -> bytes:
        """What the canvas holds now, as PNG (without drawing it again)."""
        out = io.BytesIO()
        Image.frombuffer("RGBA", self.canvas.get_width_height(), self.canvas.buffer_rgba()).save(
            out, format="png", compress_level=PNG_LEVEL)
        return out.getvalue()

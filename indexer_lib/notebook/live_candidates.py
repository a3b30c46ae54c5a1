"""Notebook 04's auto figure (``plots.auto_candidates``), kept alive between free-memory moves.

The candidates' times and peaks do not depend on free memory; only which of them fit does,
and the peak panel keeps the candidates' scale.  ``LiveCandidates`` draws the whole figure
when the candidates change (another deployment or engine release) and, when only free memory
moves, redraws what that touches over saved copies of the rest (blitting): the OOM crosses
of the time panel and its legend (kept per set of crosses: they change only where a candidate
starts or stops fitting), the free-memory line, its panel's frame and legend, and the title.
A figure shown before is not drawn again: its PNG is kept.  Every call returns PNG bytes equal
to a full draw of the figure made afresh for the same rows and free memory
(``scripts/bench_dashboard_browser.py`` times a free-memory move in chromium, this way and drawn
whole).
"""
from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg

from . import plots
from .live_heatmap import Kept
from .png_bands import BandedPng


class LiveCandidates:
    def __init__(self, dpi: int = 90):
        self.dpi = dpi
        self.key = None  # the candidates drawn: (strategy, budget, time, memory needed) per row
        self.fig = self.canvas = self.background = None
        # for these candidates: the figure with the time panel's crosses and legend, per set of
        # crosses (at most one more than the candidates), and the PNG per everything shown
        self.with_crosses, self.pngs = Kept(8), Kept()
        self.encoder = BandedPng()  # compresses again only the rows a move touched

    def render(self, frame, free_bytes: int, title_detail: str = "") -> bytes:
        key = tuple(frame[["strategy", "budget_mb", "total_ms", "needs_bytes"]]
                    .itertuples(index=False, name=None))
        if key != self.key:
            # the figure as auto_candidates draws it: its crosses are the scatters' own
            self._draw_all(frame, free_bytes, title_detail)
            self.key = key
            crosses = tuple(np.asarray(c.get_offsets(), float).reshape(-1, 2).tobytes()
                            for c in self._cross_collections())
        else:
            crosses = self._move(frame, free_bytes, title_detail)
        shown = (crosses, free_bytes, title_detail)
        png = self.pngs.recall(shown)
        if png is None:  # not shown before: draw what free memory touches over the crosses' layer
            self._show_crosses(crosses)
            for artist in self._free():
                self.fig.draw_artist(artist)
            png = self.pngs.keep(shown, self.encoder.encode(np.asarray(self.canvas.buffer_rgba())))
        return png

    def _draw_all(self, frame, free_bytes: int, title_detail: str) -> None:
        self.fig = plots.auto_candidates(frame, free_bytes, title_detail)
        self.fig.set_dpi(self.dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        self.canvas.draw()  # lays the figure out (constrained), then keeps the positions
        self.fig.set_layout_engine("none")
        self.ax_time, self.ax_peak = self.fig.axes[:2]
        self.free_line = self.ax_peak.get_lines()[-1]  # drawn last: the axhline of free memory
        changing = self._crosses() + self._free()
        for artist in changing:
            artist.set_visible(False)
        self.canvas.draw()
        self.background = self.canvas.copy_from_bbox(self.fig.bbox)  # what free memory never touches
        for artist in changing:
            artist.set_visible(True)
        self.with_crosses, self.pngs = Kept(8), Kept()

    def _cross_collections(self) -> list:
        """The time panel's OOM crosses, one scatter per strategy (the time bands stay put)."""
        return [c for c in self.ax_time.collections if c.get_gid() == plots.CROSSES]

    def _crosses(self) -> list:
        """The time panel's OOM crosses and its legend (placed where they leave room)."""
        return [*self._cross_collections(), self.ax_time.get_legend()]

    def _free(self) -> list:
        """The line, the frame drawn over it, the legend naming it, the title: in the order a
        full draw takes (by zorder)."""
        return [self.free_line, *self.ax_peak.spines.values(), self.ax_peak.get_legend(),
                self.fig._suptitle]

    def _move(self, frame, free_bytes: int, title_detail: str) -> tuple:
        """Update the artists free memory touches; the crosses they show (per strategy, their
        offsets' bytes)."""
        gib = free_bytes / plots.GIB
        self.free_line.set_ydata([gib, gib])
        self.free_line.set_label(plots.free_label(free_bytes, self.ax_peak.get_ylim()[1]))
        self.ax_peak.get_legend().get_texts()[-1].set_text(self.free_line.get_label())
        self.fig._suptitle.set_text(plots.auto_candidates_title(title_detail))  # where the layout put it
        # the crosses as auto_candidates places them: per strategy (in order of appearance), the
        # candidates that do not fit, by budget (numpy: a move has a few milliseconds)
        strategy, budget = frame["strategy"].to_numpy(), frame["budget_mb"].to_numpy(float)
        time_ms, fits = frame["total_ms"].to_numpy(float), frame["fits"].to_numpy(bool)
        crosses = []
        for name, collection in zip(dict.fromkeys(strategy), self._cross_collections()):
            rows = np.flatnonzero((strategy == name) & ~fits)
            rows = rows[np.argsort(budget[rows], kind="stable")]
            offsets = np.column_stack([budget[rows], time_ms[rows]])
            collection.set_offsets(offsets)
            crosses.append(offsets.tobytes())
        return tuple(crosses)

    def _show_crosses(self, crosses: tuple) -> None:
        """The saved figure with these crosses and the time panel's legend: kept from before, or
        drawn over the figure without them."""
        layer = self.with_crosses.recall(crosses)
        if layer is None:
            self.canvas.restore_region(self.background)
            for artist in self._crosses():
                self.fig.draw_artist(artist)
            layer = self.with_crosses.keep(crosses, self.canvas.copy_from_bbox(self.fig.bbox))
        self.canvas.restore_region(layer)

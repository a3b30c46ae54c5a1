"""Notebook 04's auto figure (``plots.auto_candidates``), kept alive between free-memory moves.

The candidates' times and peaks do not depend on free memory; only which of them fit does,
and the peak panel keeps the candidates' scale.  ``LiveCandidates`` draws the whole figure
when the candidates change (another deployment or engine release) and, when only free memory
moves, redraws what that touches over saved copies of the rest (blitting): the OOM crosses
of the time panel and its legend (only when they move), the free-memory line, its panel's
frame and legend, and the title.  Every call returns PNG bytes equal to a full draw of the
figure made afresh for the same rows and free memory.
"""
from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg

from . import plots
from .live_heatmap import canvas_png


class LiveCandidates:
    def __init__(self, dpi: int = 90):
        self.dpi = dpi
        self.key = None  # the candidates drawn: (strategy, budget, time, peak) per row
        self.fig = self.canvas = self.background = self.with_crosses = None

    def render(self, frame, free_bytes: int, title_detail: str = "") -> bytes:
        key = tuple(frame[["strategy", "budget_mb", "total_ms", "peak_transient_bytes"]]
                    .itertuples(index=False, name=None))
        if key == self.key:
            self._move(frame, free_bytes, title_detail)
        else:
            self._draw_all(frame, free_bytes, title_detail)
            self.key = key
        return canvas_png(self.canvas)

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
        self._blit(crosses_moved=True)

    def _crosses(self) -> list:
        """The time panel's OOM crosses and its legend (placed where they leave room)."""
        return [*self.ax_time.collections, self.ax_time.get_legend()]

    def _free(self) -> list:
        """The line, the frame drawn over it, the legend naming it, the title: in the order a
        full draw takes (by zorder)."""
        return [self.free_line, *self.ax_peak.spines.values(), self.ax_peak.get_legend(),
                self.fig._suptitle]

    def _move(self, frame, free_bytes: int, title_detail: str) -> None:
        """Update the artists free memory touches and draw them."""
        gib = free_bytes / plots.GIB
        self.free_line.set_ydata([gib, gib])
        self.free_line.set_label(plots.free_label(free_bytes, self.ax_peak.get_ylim()[1]))
        self.ax_peak.get_legend().get_texts()[-1].set_text(self.free_line.get_label())
        moved = False
        # the crosses as auto_candidates places them: per strategy (in order of appearance), the
        # candidates that do not fit, by budget (numpy: a move has a few milliseconds)
        strategy, budget = frame["strategy"].to_numpy(), frame["budget_mb"].to_numpy(float)
        time_ms, fits = frame["total_ms"].to_numpy(float), frame["fits"].to_numpy(bool)
        for name, crosses in zip(dict.fromkeys(strategy), self.ax_time.collections):
            rows = np.flatnonzero((strategy == name) & ~fits)
            rows = rows[np.argsort(budget[rows], kind="stable")]
            offsets = np.column_stack([budget[rows], time_ms[rows]])
            if not np.array_equal(offsets, np.asarray(crosses.get_offsets()).reshape(-1, 2)):
                crosses.set_offsets(offsets)
                moved = True
        self.fig._suptitle.set_text(plots.auto_candidates_title(title_detail))  # where the layout put it
        self._blit(crosses_moved=moved)

    def _blit(self, crosses_moved: bool) -> None:
        """Over the saved figure: the time panel's crosses and legend (from a saved copy when
        they did not move), then what free memory moves."""
        if crosses_moved:
            self.canvas.restore_region(self.background)
            for artist in self._crosses():
                self.fig.draw_artist(artist)
            self.with_crosses = self.canvas.copy_from_bbox(self.fig.bbox)
        else:
            self.canvas.restore_region(self.with_crosses)
        for artist in self._free():
            self.fig.draw_artist(artist)

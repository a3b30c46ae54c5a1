"""The figure-style check catches each rule it states: a figure that keeps the style passes, and
a figure breaking one rule fails with a line naming that rule."""
from __future__ import annotations

import numpy as np
import pytest

from indexer_lib.notebook import plots, style
from indexer_lib.notebook.figure_check import check_figure
from indexer_lib.runmode import STRICT_FIGURES_ENV

PARAMS = {"model": "glm-5", "engine": "vllm==0.33.0", "free_gib": 2.63}
TITLE = "How much does it take?\n" + style.context("glm-5", "vllm==0.33.0", 2.63, mode="modelled")


def good(title: str = TITLE):
    """A figure that keeps every rule: the base the bad figures below break one rule of."""
    fig = style.figure(4.0)
    ax = fig.subplots()
    for (name, st), scale in zip(style.series_styles(["a", "b"]).items(), (1.0, 1.5)):
        ax.plot([1, 2, 4], [0.25 * scale, 0.5 * scale, 1.0 * scale], label=name, **st)
    ax.set_xlabel("concurrency (requests)")
    ax.set_ylabel("transient peak (GiB)")
    style.gib_axis(ax.yaxis)
    style.count_axis(ax.xaxis)
    style.legend_below(fig)
    style.title(fig, title)
    return fig


def test_a_figure_in_the_style_passes():
    assert check_figure(good(), PARAMS) == []


def test_too_wide():
    fig = good()
    fig.set_size_inches(12, 4)
    assert any("12.0 in wide" in p for p in check_figure(fig, PARAMS))


def test_clipped_title():
    fig = good()
    fig.suptitle("How long can prompts get before the indexer OOMs, per logits budget, on every release "
                 "of every engine we know of?")
    assert any("figure title clipped" in p for p in check_figure(fig))


def test_legend_over_the_data():
    fig = good()
    fig.legends.clear()
    fig.axes[0].legend(loc="upper left")
    assert any("legend" in p and "over the data area" in p for p in check_figure(fig, PARAMS))


def test_fractional_ticks_on_a_count_axis():
    fig = good()
    ax = fig.axes[0]
    ax.xaxis.set_major_locator(__import__("matplotlib.ticker").ticker.MultipleLocator(0.5))
    assert any("'concurrency (requests)' counts, yet ticks at" in p for p in check_figure(fig, PARAMS))


def test_a_log_count_axis_ticks_whole_numbers_where_every_count_is_one():
    fig = good()
    ax = fig.axes[0]
    ax.plot([1, 2, 4], [1, 1, 1])
    ax.set_ylabel("chunks (count)")
    style.count_axis(ax.yaxis, log=True)
    fig.draw_without_rendering()
    assert min(ax.get_ylim()) < 1 and check_figure(fig, PARAMS) == []  # the view reaches below 1, no tick does


def test_power_of_two_size_ticks():
    fig = good()
    fig.axes[0].set_yscale("log", base=2)  # matplotlib's own labels: 2^-2, 2^-1, 2^0
    assert any("tick labels as powers" in p for p in check_figure(fig, PARAMS))


def test_overlapping_tick_labels():
    fig = good()
    ax = fig.axes[0]
    ax.set_xticks([1, 1.05, 1.1], ["per-request", "fixed-shape", "kv-split"])
    assert any("tick labels overlap" in p for p in check_figure(fig))


def test_budget_against_peak_needs_peak_over_budget():
    fig = good()
    fig.axes[0].set_xlabel("logits budget (MiB)")
    assert any("no 'peak / budget' panel" in p for p in check_figure(fig, PARAMS))
    ratio = fig.add_subplot(2, 1, 2)
    ratio.plot([1, 2], [2, 2])
    ratio.set_xlabel("logits budget (MiB)")
    ratio.set_ylabel("peak / budget")
    assert not any("peak / budget" in p for p in check_figure(fig, PARAMS))


@pytest.mark.parametrize("missing, params", [
    ("the model glm-5", {"model": "glm-5"}),
    ("the engine release vllm==0.32.0", {"engine": "vllm==0.32.0"}),
    ("its full logits layout", {"engine": "vllm==0.32.0"}),
    ("2.2 GiB free", {"free_gib": 2.2}),
    ("max_num_batched_tokens=4096", {"mnbt": 4096}),
])
def test_the_title_names_what_the_numbers_depend_on(missing, params):
    assert f"title does not name {missing}" in " ".join(check_figure(good("How much?"), params))


def test_heatmap_frontier_follows_cells_and_values_fit():
    fig = style.figure(3.0)
    ax = fig.subplots()
    grid = np.array([[0.1, 0.2, 3.0], [0.2, 4.0, 5.0]])
    ax.imshow(grid, norm=style.peak_norm(), cmap=style.CMAP, aspect="auto")
    texts = style.cell_values(fig, ax, grid, style.peak_norm())
    assert [t.get_text() for t in texts] == ["0.1", "0.2", "3", "0.2", "4", "5"]
    edges = style.cell_boundary(ax, grid > 2.63)
    # the OOM cells (0,2), (1,1), (1,2): edges between cells only, at half-integer positions
    segments = [tuple(map(tuple, s)) for s in edges.get_segments()]
    assert sorted(segments) == sorted([((1.5, -0.5), (1.5, 0.5)), ((0.5, 0.5), (0.5, 1.5)),
                                       ((0.5, 0.5), (1.5, 0.5))])
    tiny = style.figure(1.0, 1.0)
    tiny_ax = tiny.subplots()
    big = np.full((8, 9), 0.19)
    tiny_ax.imshow(big)
    assert style.cell_values(tiny, tiny_ax, big, style.peak_norm()) == []  # no room: no values


def test_save_raises_in_strict_mode_and_names_the_figure(tmp_path, monkeypatch):
    fig = good()
    fig.set_size_inches(12, 4)
    monkeypatch.setenv(STRICT_FIGURES_ENV, "1")
    with pytest.raises(plots.FigureStyleError, match="figure too_wide breaks the figure style:\n  12.0 in wide"):
        plots.save(fig, tmp_path, "too_wide", PARAMS)
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv(STRICT_FIGURES_ENV, "0")
    with pytest.warns(UserWarning, match="too_wide"):
        assert len(plots.save(fig, tmp_path, "too_wide", PARAMS)) == 2

"""The figure check's rules on what a figure draws: series hiding each other, bars on a log axis,
notebook sections cited, value labels under markers, and two figures of a run with the same data.
Each rule: a figure that breaks it fails with a line naming it; the same figure fixed passes."""
from __future__ import annotations

from indexer_lib.notebook import plots, style
from indexer_lib.notebook.figure_check import check_figure, duplicate_figures

from tests.test_figure_check import PARAMS, good


def test_two_lines_on_the_same_points_fail_and_merged_pass():
    fig = good()
    ax = fig.axes[0]
    ax.plot([1, 2, 4], [0.25, 0.5, 1.0], label="c", color="black", marker="x")  # under "a"
    ax.plot([1, 2, 4], [0.25, 0.5, 1.0001], label="d", color="grey", marker="+")  # a pixel's fraction off
    assert any("'a' and 'c' drawn on top of each other" in p for p in check_figure(fig, PARAMS))
    assert style.merge_identical(ax) == ["c = d = a"]
    assert ax.get_title(loc="right") == "same points: c = d = a" and len(ax.lines) == 2
    assert check_figure(fig, PARAMS) == []


def test_lines_apart_by_an_offset_pass():
    fig = good()
    ax = fig.axes[0]
    ax.plot([1.05, 2.1, 4.2], [0.25, 0.5, 1.0], label="c")  # "a"'s points, set apart sideways
    assert check_figure(fig, PARAMS) == []


def test_crosses_over_a_lines_points_pass():
    fig = good()
    fig.axes[0].scatter([1, 2, 4], [0.25, 0.5, 1.0], marker="x", color="black")  # OOM marks, on purpose
    assert check_figure(fig, PARAMS) == []


def bars(log: bool):
    fig = style.figure(3.0)
    ax = fig.subplots()
    ax.barh([0, 1], [1 / 16, 1.0], color=style.PALETTE[0])
    style.gib_axis(ax.xaxis, log=log)
    ax.set_xlabel("peak (GiB)")
    style.title(fig, "Which is larger?\n" + style.context("glm-5", "vllm==0.33.0", 2.63, mode="modelled"))
    return fig


def test_bars_on_a_log_axis_fail_on_a_linear_one_pass():
    assert any("'peak (GiB)': bars on a log axis" in p for p in check_figure(bars(log=True), PARAMS))
    assert check_figure(bars(log=False), PARAMS) == []


def test_a_title_citing_a_notebook_section_fails():
    cited = good(style.wrap("How much? (notebook 01 section 3d)\n") + "\n" + style.context(
        "glm-5", "vllm==0.33.0", 2.63, mode="modelled"))
    assert any("cites a notebook's section" in p for p in check_figure(cited, PARAMS))
    assert not any("cites" in p for p in check_figure(good(), PARAMS))


def test_a_value_label_under_a_marker_fails_beside_it_passes():
    fig = good()
    ax = fig.axes[0]
    ax.text(2, 0.5, "500 us", ha="center", va="center")
    assert any("value label '500 us' under a marker" in p for p in check_figure(fig, PARAMS))
    ax.texts[0].set_position((2.6, 0.8))  # away from every marker
    assert check_figure(fig, PARAMS) == []


def test_two_saved_figures_with_the_same_data_are_duplicates(tmp_path):
    figs = [good("How much?\n" + style.context("glm-5", "vllm==0.33.0", 2.63, mode="modelled")) for _ in range(3)]
    figs[2].axes[0].lines[0].set_ydata([0.25, 0.5, 2.0])  # other data
    paths = [plots.save(fig, tmp_path, f"fig{k}", PARAMS)[0] for k, fig in enumerate(figs)]
    assert duplicate_figures(paths) == [f"{paths[1].name} draws the same data as {paths[0].name}"]
    assert duplicate_figures([paths[0], paths[2]]) == []


def test_two_titles_of_one_panel_over_each_other_fail():
    fig = good()
    ax = fig.axes[0]
    ax.set_title("typical: 8K chunk at 16K context, one of the steps we show here", loc="left")
    ax.set_title("same points: vllm = per-request = engine = causal", loc="right")
    assert any("panel titles over each other" in p for p in check_figure(fig, PARAMS))
    ax.set_title("same points: vllm", loc="right")
    assert check_figure(fig, PARAMS) == []

"""Figures render with labelled axes and tell modelled from measured; the dashboard's
callbacks update its figure and table when a control changes (no browser needed)."""
from __future__ import annotations

import json

import pandas as pd
import numpy as np
import pytest
from PIL import Image

from indexer_lib.notebook import plots, tables
from indexer_lib.study import reported
from indexer_lib.sweep import rows as sweep
from indexer_lib.timemodel import model as timemodel
from indexer_lib.plan import PlanSettings
from indexer_lib.runmode import HEADLESS_ENV, STRICT_FIGURES_ENV
from indexer_lib.sweep.grid import Grid

# DeepGEMM 2.6's full [M, N] logits (on the latest vLLM's workspace) with a 256-token
# long_prefill_token_threshold (the release's default is 0): n-only OOMs at 64 x 10K
GRID = Grid.of(concurrency=(1, 16, 64), isl=(2048, 10240), budget_mb=(256, 512),
            strategy=("n-only", "vllm", "causal"), deepgemm_version="2.6", long_prefill_token_threshold=256)


@pytest.fixture(scope="module")
def frame():
    return sweep.to_frame(list(sweep.model_rows(GRID)))


def axes_labelled(fig):
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    assert axes
    for ax in axes:  # a panel sharing an axis with a labelled one needs no label of its own
        assert any(a.get_xlabel() for a in ax.get_shared_x_axes().get_siblings(ax)), ax
        assert any(a.get_ylabel() for a in ax.get_shared_y_axes().get_siblings(ax)), ax
    units = ("(tokens)", "(requests)", "(GiB", "(MiB)", "(count)", "(%)", "chunks", "peak / budget")
    for ax in axes:  # in the label, or in the tick labels (sizes read as '512 MiB', '2 GiB')
        ticks = " ".join(t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels())
        assert any(u in ax.get_xlabel() + ax.get_ylabel() for u in units) or "iB" in ticks, ax.get_ylabel()
    assert "?" in fig.get_suptitle()  # the title is the question the figure answers
    return axes


def test_heatmaps_draw_the_oom_frontier_along_cell_edges(frame, tmp_path, monkeypatch):
    monkeypatch.setenv(STRICT_FIGURES_ENV, "1")  # saved below: the figure keeps the style
    for by in ("budget_mb", "strategy"):
        fig = plots.frontier_heatmap(frame, by=by, strategy="n-only" if by == "budget_mb" else "vllm")
        axes = axes_labelled(fig)
        assert "modelled" in fig.get_suptitle()
        # the setting that differs from the release's default is named with the numbers
        assert "long_prefill_token_threshold=256 (default 0)" in fig.get_suptitle()
        legend_text = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
        values = [t.get_text() for t in axes[0].texts]
        first = frame[frame["strategy"] == "n-only"]  # the first panel either way: one value per cell
        assert sorted(values) == sorted(f"{v:.2g}" for v in first["peak_transient_gib"])
        if by == "budget_mb":  # n-only OOMs at concurrency 64 x 10K: the frontier, on the cells' edges only
            assert legend_text == ["OOM frontier at 2.63 GiB free (beyond it: OOM)"]
            (edges,) = axes[0].collections
            points = np.concatenate(edges.get_segments())
            assert np.allclose(points % 1, 0.5)  # never through a cell: no value interpolated
        paths = plots.save(fig, tmp_path, f"heat_{by}", {"model": "glm-5", "free_gib": 2.63})
        png, svg = paths
        assert png.suffix == ".png" and svg.suffix == ".svg" and "free_gib-2.63" in png.name
        with Image.open(png) as im:
            assert json.loads(im.info["Description"]) == {"model": "glm-5", "free_gib": 2.63}
            assert abs(im.info["dpi"][0] - 150) < 1
        assert "free_gib" in svg.read_text()
    # nothing OOMs: no frontier, and no legend entry for one
    fits = frame[~frame["oom"]]
    fig = plots.frontier_heatmap(fits[fits["strategy"] == "vllm"], by="budget_mb", strategy="vllm")
    assert not fig.legends and not any(ax.collections for ax in fig.axes if ax.get_label() != "<colorbar>")
    assert "no cell needs more than 2.63 GiB" in fig.get_suptitle().replace("\n", " ")


def test_curves_tell_modelled_from_measured(frame):
    measured = frame[frame["budget_mb"] == 512].copy()
    measured["mode"] = "measure"
    fig = plots.frontier_curves(pd.concat([frame, measured]), strategy="vllm")
    ax = axes_labelled(fig)[0]
    styles = {}
    for line in ax.get_lines():
        styles[line.get_label()] = (line.get_linestyle(), line.get_markerfacecolor())
    assert styles["512 MiB (modelled)"][0] != styles["512 MiB (measured)"][0]
    assert styles["512 MiB (modelled)"][1] != styles["512 MiB (measured)"][1]
    assert "no budget (modelled)" in styles
    assert "measured + modelled" in fig.get_suptitle()


def test_chunk_overhead_and_strategy_comparison(tmp_path):
    steps = reported.named_steps()
    name = "extreme: one 64K prompt"
    table = timemodel.overhead_table(steps[name], ["vllm", "causal"], [64, 512, 2048], PlanSettings("glm-5"))
    table.insert(0, "step", name)
    measured = table.copy()
    measured["time_source"] = "measured"
    fig = plots.chunk_overhead(table, measured)
    axes_labelled(fig)
    labels = {t.get_text() for lg in fig.legends for t in lg.get_texts()}
    assert {"vllm (modelled)", "vllm (measured)", "causal (modelled)"} <= labels
    assert "measured + modelled time" in fig.get_suptitle()
    only_model = plots.chunk_overhead(table)
    assert "(modelled time)" in only_model.get_suptitle()

    side = tables.step_strategy_table(steps, ["n-only", "vllm", "causal"], 512, PlanSettings("glm-5"))
    fig = plots.strategy_comparison(side[side["step"] == name])
    axes_labelled(fig)
    allocated = fig.axes[1].containers[0]
    useful = fig.axes[1].containers[1]
    # n-only's one 64K chunk allocates the full square, top-k reads about half of it
    assert allocated[0].get_width() > 1.9 * useful[0].get_width()
    assert "modelled" in fig.legends[0].get_texts()[0].get_text()


def test_markdown_table_pastes():
    frame = pd.DataFrame({"strategy": ["vllm", "causal"], "GiB": [0.5, float("nan")]})
    assert tables.markdown_table(frame).splitlines() == [
        "| strategy | GiB |", "|---|---|", "| vllm | 0.5 |", "| causal |  |"]


def test_markdown_tables_read_as_people_write_numbers():
    """No e-notation, no -1 for "no budget", bytes in MiB and fractions in percent, each with its
    unit in the header."""
    import re

    frame = pd.DataFrame({"budget_mb": [1024.0, float("nan"), 64.0], "budget_bytes": [-1, 2**29, 2**20],
                          "error": [0.0123, -0.2, 0.5], "time_ms": [1.5e-5, 2.63, 123456.7],
                          "kv_tokens": [1048576, 3, 4], "fits": [True, False, True]})
    text = tables.markdown_table(frame)
    assert text.splitlines()[:3] == ["| budget_mb | budget (MiB) | error (%) | time_ms | kv_tokens | fits |",
                                     "|---|---|---|---|---|---|",
                                     "| 1,024 | none | 1.23 | 0.000015 | 1048576 | True |"]
    assert text.splitlines()[3:] == ["| none | 512 | -20 | 2.63 | 3 | False |", "| 64 | 1 | 50 | 123,457 | 4 | True |"]
    assert not re.search(r"\de[+-]\d", text) and "| -1 |" not in text
    assert tables.markdown_table(frame, floatfmt=".4g").splitlines()[4].startswith("| 64 | 1 | 50 | 123,457 |")


def test_the_dashboards_table_gives_per_concurrency_the_largest_isl_without_oom():
    """The summary table (plain loops over the rows) against the same question asked with pandas:
    per concurrency, the largest ISL that fits, its peak, and how many points OOM."""
    from indexer_lib.notebook.widgets import FrontierDashboard

    dash = FrontierDashboard(Grid.of(concurrency=(1, 16, 64), isl=(2048, 10240, 32768), strategy="n-only",
                                  engine="vllm==0.18.1"))
    for free in (40.0, 2.63, 0.6, 0.25):  # none, some, most and every point OOM
        dash.controls["free_gib"].value = free
        frame = dash.frame
        for conc, rows in frame.groupby("concurrency"):
            got = dash.table.set_index("concurrency").loc[conc]
            fits = rows[~rows["oom"].astype(bool)]
            assert got["OOM points"] == int(rows["oom"].sum())
            if len(fits):
                top = fits.loc[fits["isl"].idxmax()]
                assert got["largest ISL without OOM"] == top["isl"]
                assert got["peak there (GiB)"] == round(float(top["peak_transient_gib"]), 3)
            else:
                assert got["largest ISL without OOM"] == 0 and np.isnan(got["peak there (GiB)"])
        assert list(dash.table["concurrency"]) == [1, 16, 64]
    # at 0.25 GiB only the smallest point fits: concurrency 16 and 64 have no ISL without OOM
    assert list(dash.table["largest ISL without OOM"]) == [2048, 0, 0]


def test_dashboard_controls_update_figure_and_table():
    from indexer_lib.notebook.widgets import FrontierDashboard

    dash = FrontierDashboard(Grid.of(concurrency=(1, 16, 64), isl=(2048, 10240), strategy="vllm",
                                  long_prefill_token_threshold=256), budget_mb=512)
    assert dash.updates == 1 and bytes(dash.image.value).startswith(b"\x89PNG")
    png, html, table = bytes(dash.image.value), dash.html.value, dash.table.copy()
    assert (table["OOM points"] == 0).all()

    assert dash.controls["engine"].value == "vllm==0.33.0"  # the default: the latest vLLM
    assert set(dash.frame["engine"]) == {"vllm==0.33.0"} and set(dash.frame["deepgemm_version"]) == {"2.8"}

    dash.controls["strategy"].value = "n-only"  # as a browser would set it
    assert dash.updates == 2 and bytes(dash.image.value) != png
    # no budget on the latest vLLM: its compressed logits are one request wide, nothing OOMs
    assert dash.table["OOM points"].sum() == 0
    dash.controls["engine"].value = "vllm==0.18.1"  # a release from before the budget
    assert dash.updates == 3 and dash.html.value != html
    assert set(dash.frame["engine"]) == {"vllm==0.18.1"} and set(dash.frame["deepgemm_version"]) == {"2.3"}
    assert dash.table["OOM points"].sum() > 0  # no budget: concurrency 64 x 10K OOMs

    before = dash.table.copy()
    dash.controls["free_gib"].value = 12.0
    assert dash.table["OOM points"].sum() < before["OOM points"].sum()

    dash.controls["strategy"].value = "kv-split"  # fine on 0.18.1's full-layout DeepGEMM
    assert "modelled" in dash.status.value
    dash.controls["engine"].value = "vllm==0.33.0"  # not on 0.33.0's compressed-only build: said, not raised
    assert "cannot compute" in dash.status.value and "full logits layout" in dash.status.value
    dash.controls["strategy"].value = "vllm"
    dash.controls["budget_mb"].value = 64
    assert set(dash.frame["budget_mb"]) == {64.0}
    assert dash.frame["peak_transient_bytes"].max() < 512 * 2**20

    dash.controls["shared_prefix"].value = 1024
    assert set(dash.frame["shared_prefix"]) == {1024}
    assert "modelled" in dash.status.value
    dash.controls["max_num_batched_tokens"].value = 4096
    assert set(dash.frame["max_num_batched_tokens"]) == {4096}
    assert dash.widget is not None


def test_a_free_memory_move_reuses_the_plans_and_equals_a_fresh_computation():
    from indexer_lib.notebook.widgets import FrontierDashboard

    grid = dict(concurrency=(1, 16, 64), isl=(2048, 10240), budget_mb=(512,), strategy=("n-only", "vllm"),
                engine=("vllm==0.18.1",))
    planned = sweep.to_frame(list(sweep.model_rows(Grid.of(**grid, free_gib=(2.63,)))))
    for free in (0.5, 2.63, 12.0):
        fresh = sweep.to_frame(list(sweep.model_rows(Grid.of(**grid, free_gib=(free,)))))
        pd.testing.assert_frame_equal(sweep.at_free_memory(planned, free), fresh, check_exact=True)
    sglang = sweep.to_frame(list(sweep.model_rows(Grid.of(
        concurrency=(16,), isl=(10240,), budget_mb=(512,), strategy=("engine",), engine=("sglang",)))))
    with pytest.raises(ValueError, match="recompute its rows"):
        sweep.at_free_memory(sglang, 20.0)

    on_sglang = Grid.of(concurrency=(1, 16, 64), isl=(2048, 10240), strategy="engine", engine="sglang==0.5.23")
    dash = FrontierDashboard(on_sglang, budget_mb=512)
    for free in (20.0, 2.63):  # SGLang's own budget moves with free memory: replanned, not re-read
        dash.controls["free_gib"].value = free
        fresh = FrontierDashboard(on_sglang.where(free_gib=free), budget_mb=512)
        pd.testing.assert_frame_equal(dash.frame, fresh.frame, check_exact=True)
    assert len({b for b in dash.frame["budget_bytes"]}) == 1


def test_the_live_heatmap_shows_the_rows_and_a_free_memory_move_draws_what_a_full_redraw_draws():
    from indexer_lib.notebook.live_heatmap import LiveHeatmap

    grid = dict(concurrency=(1, 16, 64), isl=(2048, 10240), budget_mb=(512,), strategy=("n-only",),
                engine=("vllm==0.18.1",))
    planned = sweep.to_frame(list(sweep.model_rows(Grid.of(**grid))))
    live = LiveHeatmap((1, 16, 64), (2048, 10240))
    moved = None
    for free in (2.63, 12.0, 0.5, 4.0):  # the first draws everything, the others only blit
        frame = sweep.at_free_memory(planned, free)
        moved = live.render(frame, "n-only", 512, free, "glm-5", "vllm==0.18.1")
        assert len(live.marks) == int(frame["oom"].sum())  # one OOM mark per OOM point
        gib = frame.set_index(["concurrency", "isl"])["peak_transient_bytes"] / 2**30
        shown = live.image.get_array()
        for (i, c), (j, s) in ((a, b) for a in enumerate(live.concs) for b in enumerate(live.isls)):
            assert shown[i, j] == pytest.approx(max(gib[(c, s)], live.image.norm.vmin))
        assert f", {free:g} GiB free" in live.title.get_text()
    fresh = LiveHeatmap((1, 16, 64), (2048, 10240)).render(sweep.at_free_memory(planned, 4.0), "n-only", 512, 4.0,
                                                           "glm-5", "vllm==0.18.1")
    assert moved == fresh and Image.open(__import__("io").BytesIO(moved)).size == (630, 396)


def test_the_dashboards_default_isl_axis_follows_the_models_max_model_len():
    from indexer_lib.notebook.widgets import FrontierDashboard

    dash = FrontierDashboard(Grid.of(concurrency=(1, 8), strategy="vllm"), budget_mb=512)
    assert dash.isl[-3:] == (65536, 131072, 202752)
    assert sorted(set(dash.frame["isl"])) == list(dash.isl)
    first = dash.view
    dash.controls["model"].value = "deepseek-v3.2"  # a shorter max_model_len: the panel is laid out again
    assert "cannot compute" not in dash.status.value and dash.view is not first
    assert dash.isl[-1] == 163_840 and sorted(set(dash.frame["isl"])) == list(dash.isl)
    assert dash.view.isls == list(dash.isl)
    # past 64K the strategies part: without a budget one long prompt (its 8K-token chunks against
    # the whole context) runs out of 2.63 GiB; with one, it fits
    dash.controls["strategy"].value = "n-only"
    alone = dash.frame[dash.frame["concurrency"] == 1]
    assert alone[alone["isl"] >= 131072]["oom"].all() and not alone[alone["isl"] <= 65536]["oom"].any()
    dash.controls["strategy"].value = "vllm"
    assert not dash.frame["oom"].any()
    # a shared prefix past every ISL of the new model's axis comes down to its max_model_len
    dash.controls["model"].value = "glm-5"
    assert dash.controls["shared_prefix"].max == 202_752
    dash.controls["shared_prefix"].value = 180_224
    assert set(dash.frame["isl"]) == {202_752}  # the only prompt longer than the prefix
    updates = dash.updates
    dash.controls["model"].value = "deepseek-v3.2"
    assert dash.updates == updates + 1 and "cannot compute" not in dash.status.value
    assert dash.controls["shared_prefix"].value == dash.controls["shared_prefix"].max == 163_840
    assert set(dash.frame["isl"]) == {163_840} and set(dash.frame["shared_prefix"]) == {163_840}
    # an axis given stays as given
    fixed = FrontierDashboard(Grid.of(concurrency=(1,), isl=(2048, 4096), strategy="vllm"), budget_mb=512)
    fixed.controls["model"].value = "deepseek-v3.2"
    assert fixed.isl == (2048, 4096) and sorted(set(fixed.frame["isl"])) == [2048, 4096]


def test_every_dashboard_figure_is_pixel_for_pixel_a_full_redraw():
    """The live heatmap redraws only the regions a change touches (each over its saved copy of
    the unchanging figure), and copies back the pixels of a region's content drawn before: each
    figure equals the whole figure drawn afresh.  The moves include one where the free-memory
    line crosses an OOM mark (drawn over it once, by mistake), returns to settings seen before
    (their pixels copied back), longer titles (another engine) and another model's axis."""
    from indexer_lib.notebook.widgets import FrontierDashboard

    dash = FrontierDashboard(Grid.of(concurrency=(1, 8, 64), strategy="vllm"))
    moves = [("budget_mb", 64), ("strategy", "causal"), ("budget_mb", 2048), ("free_gib", 1.0),
             ("strategy", "n-only"), ("max_num_batched_tokens", 4096), ("free_gib", 8.0), ("budget_mb", 32),
             ("strategy", "causal"), ("free_gib", 1.0), ("budget_mb", 2048), ("max_num_batched_tokens", 8192),
             ("engine", "sglang==0.5.23"), ("strategy", "engine"), ("engine", "vllm==0.15.1"),
             ("model", "deepseek-v3.2"), ("budget_mb", 64), ("model", "glm-5"), ("free_gib", 39.99)]
    for step, (name, value) in enumerate(moves):
        dash.controls[name].value = value
        assert "cannot compute" not in dash.status.value, (name, value)
        if step % 3 == 2:  # some moves follow others without a full draw between them
            continue
        shown = dash.image.value
        dash.view.canvas.draw()  # everything, as a fresh figure draws it
        assert shown == dash.view.png(), (name, value)
    regions = list(dash.view.regions.values())
    assert len(regions) == 5 and any(len(r.drawn) > 1 for r in regions)


def test_the_auto_dashboard_redraws_free_memory_moves_as_a_fresh_figure_draws_them():
    """Notebook 04's widget keeps its figure and redraws only what free memory touches: each
    image equals a fresh figure of the same rows, crosses where candidates do not fit, the
    free line on the candidates' scale (and, above it, the legend saying so), also where the
    crosses come from a kept layer and where a figure shown before comes back as its kept PNG."""
    from indexer_lib.notebook.beyond import AutoDeployments
    from indexer_lib.notebook.live_candidates import LiveCandidates
    from indexer_lib.notebook.widgets import AutoDashboard
    from indexer_lib.workload import ClosedLoopWorkload

    deployments = {"small": ([ClosedLoopWorkload(8, 4096, 8)], 2.63),
                   "long": ([ClosedLoopWorkload(2, 32_768, 8)], 1.0)}
    dash = AutoDashboard(AutoDeployments(deployments, budgets_mb=(64, 512, 2048),
                                         settings=PlanSettings("glm-5", "vllm==0.32.0", temporaries="deepgemm")))
    moves = [("small", 0.25), ("small", 0.3), ("small", 16.0), ("long", 16.0), ("long", 0.5), ("long", 0.6),
             ("long", 16.0), ("long", 0.55), ("long", 12.0), ("long", 0.6)]
    for name, free in moves:
        dash.controls["deployment"].value = name
        dash.controls["free_gib"].value = free
        frame, rec = dash.auto.candidates_frame(name, free)
        fresh = LiveCandidates().render(frame, rec.free_bytes, f"\n({name} on vllm==0.32.0, {free:g} GiB free)")
        assert dash.image.value == fresh, (name, free)
        view = dash.view
        crosses = {tuple(p) for c in view._cross_collections() for p in np.asarray(c.get_offsets())}
        assert crosses == {(b, t) for b, t, ok in zip(frame["budget_mb"], frame["total_ms"], frame["fits"])
                           if not ok}
        label = view.free_line.get_label()
        assert label.startswith(f"free: {free:.2f} GiB")
        assert ("above the panel" in label) == (free > view.ax_peak.get_ylim()[1])
    assert view.ax_peak.get_ylim()[1] < 16  # the scale is the candidates', not the line's
    # on "long": seven moves, five figures (16 and 0.6 came back), fewer sets of crosses than figures
    assert len(view.pngs) == 5 and len(view.with_crosses) < 5


def test_the_long_context_figure_draws_each_strategys_frontier_over_free_memory_and_budget():
    grid = Grid.of(concurrency=(1, 8), isl=(65536,), budget_mb=(64, 512, 2048), strategy=("n-only", "vllm", "engine"))
    frame = sweep.to_frame(list(sweep.model_rows(grid)))
    fig = plots.budget_frontier(frame, 2.63)
    axes = axes_labelled(fig)
    title = fig.get_suptitle().replace("\n", " ")
    assert len(axes) == 3 and "long contexts?" in title and "on vllm==0.33.0 (compressed logits layout)" in title
    assert "every prompt at its ISL; each point the worst step of one simulated closed loop (2 waves" in title
    ratio = {ln.get_label(): ln for ln in axes[2].get_lines()}  # the widest workload: peak over budget
    widest = frame[(frame["concurrency"] == 8) & (frame["strategy"] == "engine")].sort_values("budget_mb")
    assert list(ratio["engine"].get_ydata()) == list(widest["peak_transient_bytes"] / (widest["budget_mb"] * 2**20))
    assert "n-only" not in ratio  # no budget, no ratio
    for ax, conc in zip(axes, (1, 8)):
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        assert {"n-only", "vllm", "engine", "2.63 GiB free"} <= set(lines)
        rows = frame[(frame["concurrency"] == conc) & (frame["strategy"] == "vllm")].sort_values("budget_mb")
        assert list(lines["vllm"].get_ydata()) == list(rows["peak_transient_bytes"] / 2**30)
        assert len(set(lines["n-only"].get_ydata())) == 1  # no budget: flat


def test_a_headless_run_shows_a_dashboards_first_state_not_a_widget(monkeypatch):
    """An executed notebook is read, not clicked: under the headless runner a dashboard displays
    a note, its figure and its table (a widget would be saved as a VBox(...) repr)."""
    import IPython.display

    from indexer_lib.notebook.widgets import FrontierDashboard
    from indexer_lib.runmode import HEADLESS_ENV

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    dash = FrontierDashboard(Grid.of(concurrency=(1, 16), isl=(2048,), strategy="vllm"), budget_mb=512)
    monkeypatch.setenv(HEADLESS_ENV, "1")
    dash._ipython_display_()
    kinds = [type(o).__name__ for o in shown]
    assert kinds == ["Markdown", "Image", "HTML"] and "open this notebook in JupyterLab" in shown[0].data
    assert shown[1].data == bytes(dash.image.value) and shown[2].data == dash.html.value
    shown.clear()
    monkeypatch.delenv(HEADLESS_ENV)
    dash._ipython_display_()
    assert len(shown) == 1 and type(shown[0]).__name__ == "VBox"  # the live widget


def test_the_frontier_dashboards_gpu_moves_sglangs_budget_cap_and_a_refused_gpu_says_why():
    from indexer_lib.notebook.widgets import FrontierDashboard

    on_sglang = Grid.of(concurrency=(1, 16), isl=(2048, 10240), strategy="engine", engine="sglang==0.5.23",
                     free_gib=(40.0,))
    dash = FrontierDashboard(on_sglang, budget_mb=512)
    h200 = set(dash.frame["budget_bytes"])
    dash.controls["gpu"].value = "h100"  # 0.3 x 79 GiB caps the budget below 0.3 x 139.8 GiB
    fresh = FrontierDashboard(on_sglang.where(gpu="h100"), budget_mb=512)
    pd.testing.assert_frame_equal(dash.frame, fresh.frame, check_exact=True)
    assert set(dash.frame["budget_bytes"]) != h200
    shown = dash.image.value
    dash.controls["gpu"].value = "mi355x"  # ROCm: aiter's logits, the budget capped at 2^31-1 bytes a call
    assert "cannot compute" not in dash.status.value and dash.image.value != shown
    assert max(dash.frame["budget_bytes"]) <= 2**31 - 1


AXIS_GRID = Grid.of(concurrency=(1, 16, 64), isl=(2048, 10240), strategy="vllm")


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(__import__("io").BytesIO(png)))


def test_a_budget_axis_made_ahead_is_only_looked_up_and_equals_each_budget_made_afresh(monkeypatch):
    from indexer_lib.notebook.widgets import FrontierDashboard

    dash = FrontierDashboard(AXIS_GRID, budget_mb=512)
    assert len(dash.budgets_to_plan(dash.state())) == len(dash.BUDGETS) - 1  # all but the one shown
    dash.plan_budget_axis(dash.state())
    assert dash.budgets_to_plan(dash.state()) == []
    shown = {}
    with monkeypatch.context() as m:  # a drag now plans and draws nothing
        m.setattr(sweep, "model_rows", lambda *a, **k: pytest.fail("a budget move planned again"))
        for budget in reversed(dash.controls["budget_mb"].options):
            dash.controls["budget_mb"].value = budget
            shown[budget] = (dash.frame, bytes(dash.image.value), dash.html.value, dash.status.value)
    assert dash.updates == 1 + len(dash.BUDGETS)  # each drag showed its own
    for budget in (32, 256, 4096):
        fresh = FrontierDashboard(AXIS_GRID, budget_mb=budget)
        frame, png, html, status = shown[budget]
        assert set(frame["budget_mb"]) == {float(budget)}
        pd.testing.assert_frame_equal(frame.drop(columns="task"), fresh.frame.drop(columns="task"), check_exact=True)
        assert (pixels(png) == pixels(bytes(fresh.image.value))).all()
        assert (html, status) == (fresh.html.value, fresh.status.value)


def test_while_the_kernel_waits_the_other_budgets_are_made_and_a_newer_change_stops_an_older_round(monkeypatch):
    import asyncio

    from indexer_lib.notebook.widgets import FrontierDashboard

    monkeypatch.setattr(FrontierDashboard, "AXIS_IDLE_S", 0.05)

    async def made(dash):
        for _ in range(400):
            if not dash.budgets_to_plan(dash.state()):
                return
            await asyncio.sleep(0.05)

    async def moves():
        dash = FrontierDashboard(AXIS_GRID, budget_mb=512)  # a round for vllm starts at once ...
        dash.controls["budget_mb"].value = 256  # ... and a budget drag does not stop it
        await made(dash)
        vllm_left = dash.budgets_to_plan(dash.state())
        dash.controls["strategy"].value = "causal"  # a round for causal, stopped before it starts
        dash.controls["strategy"].value = "per-request"  # by a newer change
        await made(dash)
        per_request_left = dash.budgets_to_plan(dash.state())
        dash.controls["free_gib"].value = 7.5  # the rows are planned: nothing is made ahead
        await asyncio.sleep(0.3)
        return dash, vllm_left + per_request_left

    dash, left = asyncio.run(moves())
    assert left == [] and dash.budgets_to_plan(dash.state(), figures=False) == []
    assert len(dash.budgets_to_plan(dash.state())) == len(dash.BUDGETS) - 1  # no figure at 7.5 GiB
    # causal's round never started: only the budget shown was planned
    assert len(dash.budgets_to_plan({**dash.state(), "strategy": "causal"}, figures=False)) == len(dash.BUDGETS) - 1

    monkeypatch.setattr(FrontierDashboard, "AXIS_IDLE_S", None)  # nothing made ahead

    async def idle():
        dash = FrontierDashboard(AXIS_GRID, budget_mb=512)
        await asyncio.sleep(0.3)
        return dash

    dash = asyncio.run(idle())
    assert len(dash.budgets_to_plan(dash.state())) == len(dash.BUDGETS) - 1
    monkeypatch.setattr(FrontierDashboard, "AXIS_IDLE_S", 0.05)
    monkeypatch.setenv(HEADLESS_ENV, "1")  # an executed notebook is read: nothing made ahead either
    dash = asyncio.run(idle())
    assert len(dash.budgets_to_plan(dash.state())) == len(dash.BUDGETS) - 1


def test_the_summary_says_what_sets_the_oom_limit():
    """Over a concurrency x ISL grid the summary names where OOMs begin at each end of the
    concurrency axis, or that one input length sets the limit at every concurrency, never the first
    row of a sort (concurrency 1 for a limit no concurrency moves)."""
    by_isl = pd.DataFrame([(c, i, i >= 131072, "prefill") for c in (1, 8, 64) for i in (65536, 131072, 202752)],
                          columns=["concurrency", "isl", "oom", "oom_line"])
    assert tables.oom_limit(by_isl) == "from ISL 128K at every concurrency (the input length sets the limit)"
    by_both = pd.DataFrame([(c, i, c * i >= 8 * 65536, "decode") for c in (1, 8, 64) for i in (8192, 65536, 202752)],
                           columns=["concurrency", "isl", "oom", "oom_line"])
    assert tables.oom_limit(by_both) == ("from concurrency 8 x ISL 64K to concurrency 64 x ISL 8K "
                                         "(its decode step's paged logits)")
    frame = by_isl.assign(model="glm-5", free_gib=2.63, mode="model", engine="vllm==0.33.0", strategy="n-only",
                          budget_mb=None)
    assert tables.frontier_sentence(frame).endswith(
        "without a budget it OOMs from ISL 128K at every concurrency (the input length sets the limit).")

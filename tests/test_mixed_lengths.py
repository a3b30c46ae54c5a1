"""Mixed-length workloads through the layers above the simulator: the grid's axes, the rows, the
frontier and auto commands, notebook 01's parameters and dashboard, and the compressed layout's
worst case (tests/test_workload.py holds the draws and the simulator; tests/test_vllm_scheduler.py
holds the mixed schedules to vLLM's own scheduler)."""
import json

import pandas as pd
import pytest

from indexer_lib.cli import main
from indexer_lib.sweep import rows as sweep
from indexer_lib.sweep.grid import Grid
from indexer_lib.workload import ClosedLoopWorkload


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_homogeneous_grid_keeps_its_task_ids_and_workloads():
    grid = Grid.of(concurrency=(8,), isl=(10_240,), strategy=("vllm",), budget_mb=(512,))
    (task,) = grid.tasks()
    assert task.workload == ClosedLoopWorkload(8, 10_240, 64)
    assert task.id == "glm-5|c8|isl10240|osl64|prefix0|mnbt8192|seqs1024|thr0|vllm==0.33.0|vllm"


def test_the_grids_length_axes_are_points_and_rows_name_them():
    grid = Grid.of(concurrency=(8,), isl=(10_240, 131_072, 202_752), strategy=("vllm",), budget_mb=(512,),
                random_range_ratio=(0, 0.5), mix=("", "0.1x65536"), length_seed=4)
    loops = list(grid.closed_loops())
    # 202,752 x 1.5 passes GLM-5's max_model_len: those points are left out, the others kept
    assert {(w.isl, w.random_range_ratio, w.mix) for w in loops} == {
        (isl, r, m) for isl in (10_240, 131_072, 202_752) for r in (0.0, 0.5) for m in ((), ((0.1, 65_536),))
        if not (isl == 202_752 and r)}
    assert {w.seed for w in loops} == {4}
    ids = [t.id for t in grid.tasks()]
    assert len(set(ids)) == len(ids) == len(loops)
    assert "glm-5|c8|isl10240|osl64|prefix0|mnbt8192|seqs1024|thr0|vllm==0.33.0|vllm|r0.5|mix0.1x65536|seed4" in ids
    frame = sweep.to_frame(list(sweep.model_rows(grid)))
    assert len(frame) == grid.num_rows == len(loops)
    assert set(zip(frame.random_range_ratio, frame.mix)) == {(0.0, ""), (0.5, ""), (0.0, "0.1x65536"),
                                                             (0.5, "0.1x65536")}
    # a tenth of the prompts at 64K, in the same schedule: the 10K point's worst step sees 64K
    mixed = frame[(frame.isl == 10_240) & (frame.mix == "0.1x65536") & (frame.random_range_ratio == 0)]
    plain = frame[(frame.isl == 10_240) & (frame.mix == "") & (frame.random_range_ratio == 0)]
    assert mixed.worst_kv_tokens.iloc[0] > 60_000 > plain.worst_kv_tokens.iloc[0]


@pytest.mark.parametrize("changes, message", [
    (dict(random_range_ratio=(1.2,)), "random_range_ratio 1.2: must be a number in [0, 1)"),
    (dict(mix=("0.5x300000",)), "mix length 300000 > max_model_len 202752"),
    (dict(isl=(202_752,), random_range_ratio=(0.5,)), "no point is left"),
    (dict(length_seed=-2), "length_seed -2"),
])
def test_bad_length_axes_are_refused_by_name(changes, message):
    with pytest.raises(ValueError) as e:
        Grid.of(**{"concurrency": (8,), "isl": (10_240,), **changes})
    assert message in str(e.value)


def test_frontier_with_a_range_ratio_and_a_mix_end_to_end(capsys, tmp_path):
    out = tmp_path / "f.parquet"
    code, stdout, _ = run(capsys, "frontier", "--concurrency", "16,64", "--isl", "2048,10240", "--osl", "8",
                          "--strategy", "engine,n-only", "--budget-mb", "512", "--random-range-ratio", "0.5",
                          "--mix", "0.05x131072", "--seed", "7", "--out", str(out))
    assert code == 0
    assert "prompt lengths: drawn from ISL x [1 - 0.5, 1 + 0.5] (vLLM bench's random range ratio); " \
           "mix 0.05x131072 (share x length; the rest at ISL), seed 7" in stdout
    table = pd.read_parquet(out)
    assert set(table.random_range_ratio) == {0.5} and set(table.mix) == {"0.05x131072"} and set(table.length_seed) == {7}
    assert len(table) == 2 * 2 * 2
    # the long prompts widen every short point's worst step: vLLM 0.33.0's compressed layout without a budget
    assert (table[table.strategy == "n-only"].worst_kv_tokens > 100_000).all()
    # the homogeneous frontier of before: no length columns set
    out = tmp_path / "h.parquet"
    assert run(capsys, "frontier", "--concurrency", "16", "--isl", "2048", "--osl", "8", "--strategy", "n-only",
               "--out", str(out))[0] == 0
    plain = pd.read_parquet(out)
    assert set(plain.random_range_ratio) == {0.0} and set(plain.mix) == {""}
    assert (plain.worst_kv_tokens < 10_000).all()


@pytest.mark.parametrize("argv, message", [
    (["frontier", "--random-range-ratio", "1"], "random_range_ratio 1.0: must be a number in [0, 1)"),
    (["frontier", "--random-range-ratio", "nan"], "'nan' is not a finite number"),
    (["frontier", "--mix", "10%x131072"], "mix '10%x131072': expected SHARExLENGTH"),
    (["frontier", "--mix", "0.6x4096+0.6x8192"], "its shares add up to more than 1"),
    (["frontier", "--seed", "-1"], "seed -1"),
    (["auto", "--free-gib", "2.63", "--workload", "64x10240x512:r=2"], "random_range_ratio 2.0"),
    (["auto", "--free-gib", "2.63", "--workload", "64x10240x512:ratio=0.5"], "'ratio=0.5' is not r=R"),
    (["auto", "--free-gib", "2.63", "--workload", "64x10240x512:r=0.1:r=0.2"], "each at most once"),
    (["auto", "--free-gib", "2.63", "--workload", "64x10240x512:mix=0.1"], "expected SHARExLENGTH"),
    (["auto", "--free-gib", "2.63", "--workload", "64x202752x512:r=0.2"], "more than glm-5's max_model_len"),
])
def test_bad_lengths_are_one_line_and_exit_2(capsys, tmp_path, argv, message):
    code, out, err = run(capsys, *argv, *(["--out", str(tmp_path / "x.csv")] if argv[0] == "frontier" else []))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_auto_runs_a_mix_as_one_schedule(capsys):
    code, out, _ = run(capsys, "auto", "--model", "glm-5", "--free-gib", "2.63", "--json",
                       "--workload", "64x2048x512:mix=0.01x131072:seed=3", "--workload", "8x10240x64:r=0.5")
    assert code == 0
    result = json.loads(out)
    assert result["workloads"] == [
        {"concurrency": 64, "isl": 2048, "osl": 512, "shared_prefix": 0, "random_range_ratio": 0.0,
         "mix": "0.01x131072", "seed": 3},
        {"concurrency": 8, "isl": 10240, "osl": 64, "shared_prefix": 0, "random_range_ratio": 0.5,
         "mix": "", "seed": 0}]
    # the two long prompts meet the short ones: more than one 512 MiB chunk's worth at the worst step
    assert result["deployable"]["worst_step_bytes"] > 512 * 2**20
    code, out, _ = run(capsys, "auto", "--free-gib", "2.63", "--workload", "64x2048x512:mix=0.01x131072")
    assert code == 0 and "prompt lengths: 64x2048x512:mix=0.01x131072 (mix 0.01x131072, seed 0: one schedule)" in out


def test_the_compressed_layouts_worst_case_costs_more_than_one_length():
    from indexer_lib.study.mixes import CASE, long_among_short

    case = Grid.of(model="glm-5", engine="vllm==0.33.0", free_gib=2.63, **CASE)
    table = long_among_short(case).set_index(["mix", "strategy"])
    mixed, plain = "0.01x131072", ""
    assert table.loc[(mixed, "engine"), "prompt_tokens"] == table.loc[(plain, "engine"), "prompt_tokens"]
    # without a budget, a long prompt's chunk makes every short row as wide as itself
    assert table.loc[(mixed, "n-only"), "largest_logits_gib"] > 20 * table.loc[(plain, "n-only"), "largest_logits_gib"]
    assert table.loc[(mixed, "n-only"), "worst_useful_share"] < 0.5 and table.loc[(mixed, "n-only"), "oom"]
    # the release's own chunker holds its budget, with more chunks
    assert table.loc[(mixed, "engine"), "total_chunks"] > table.loc[(plain, "engine"), "total_chunks"]
    assert not table.loc[(mixed, "engine"), "oom"]


def test_the_dashboards_range_ratio_and_mix_controls_redraw_the_frontier():
    from indexer_lib.notebook.widgets import FrontierDashboard

    dash = FrontierDashboard(Grid.of(concurrency=(1, 16), isl=(2048, 131_072, 202_752), strategy=("engine",)))
    assert set(dash.frame.random_range_ratio) == {0.0} and len(dash.frame) == 6
    assert dash.controls["mix"].value == "" and "prompt lengths" not in dash.status.value
    dash.controls["random_range_ratio"].value = 0.5
    assert set(dash.frame.random_range_ratio) == {0.5}
    assert sorted(set(dash.frame.isl)) == [2048, 131_072]  # 202,752 x 1.5 passes max_model_len
    assert "max_model_len" in dash.status.value
    short = dash.frame[dash.frame.isl == 2048].worst_kv_tokens.max()
    dash.controls["mix"].value = "0.05x65536"
    # the 64K prompts meet the short ones' steps
    assert set(dash.frame.mix) == {"0.05x65536"} and (dash.frame[dash.frame.isl == 2048].worst_kv_tokens > short).all()
    assert dash.status.value.startswith("<i>modelled; ") and "prompt lengths R=0.5, mix 0.05x65536, seed 0" in \
        dash.status.value
    # bad text: one line in the status, no traceback, the last figure and rows kept
    shown, frame = dash.image.value, dash.frame
    for bad, said in (("0.1x", "mix &#x27;0.1x&#x27;: expected SHARExLENGTH"),
                      ("0.5x300000", "mix length 300000 &gt; max_model_len 202752")):
        dash.controls["mix"].value = bad
        assert said in dash.status.value and "\n" not in dash.status.value
        assert dash.image.value == shown and dash.frame is frame
    dash.controls["mix"].value = ""
    assert set(dash.frame.mix) == {""} and dash.status.value.startswith("<i>modelled; ")


def test_the_long_context_grid_takes_the_notebooks_lengths_below_max_model_len():
    from indexer_lib.notebook import plots
    from indexer_lib.notebook.params import check_values

    one = check_values("01_oom_frontier", {}).long_grid()
    assert one.isl == (131_072, 202_752) and one.random_range_ratio == (0.0,) and one.mix == ("",)
    mixed = check_values("01_oom_frontier", {"random_range_ratio": 0.25, "mix": "0.01x65536"}).long_grid()
    assert mixed.isl == (131_072, 162_201) and mixed.random_range_ratio == (0.25,) and mixed.mix == ("0.01x65536",)
    # the top ISL is the largest whose longest prompt vLLM still takes: ceil(162,201 x 1.25) = max_model_len
    assert [w.max_prompt_len for w in mixed.closed_loops()][:2] == [163_840, 202_752]
    # ISLs given are kept; one whose longest prompt passes max_model_len is left out, as in the frontier
    given = check_values("01_oom_frontier", {"random_range_ratio": 0.25, "long_isl": [65_536, 202_752],
                                             "long_concurrency": [1], "long_budget_mb": [512],
                                             "strategies": ["engine"]}).long_grid()
    assert {w.isl for w in given.closed_loops()} == {65_536}
    # the long-context figure says which lengths it was drawn from
    fig = plots.budget_frontier(sweep.to_frame(list(sweep.model_rows(given))), 2.63)
    assert "prompt lengths R=0.25, seed 0; each point the worst step of one simulated closed loop (2 waves of " \
           "prompts, sent in the order drawn" in fig.get_suptitle().replace("\n", " ")


def test_a_mixed_sweep_resumes_and_another_seed_is_another_grid(tmp_path):
    from indexer_lib.sweep.store import StoreError

    grid = Grid.of(concurrency=(4, 16), isl=(2048,), osl=(8,), strategy=("engine",), budget_mb=(512,),
                random_range_ratio=(0.5,), mix=("", "0.1x65536"), length_seed=2)
    done = []
    first = sweep.run(grid, tmp_path / "mixed.parquet", progress=False, after_task=done.append)
    assert len(done) == 4 and len(first) == 4 and set(first.length_seed) == {2}
    done.clear()
    again = sweep.run(grid, tmp_path / "mixed.parquet", progress=False, after_task=done.append)
    assert done == [] and again.equals(first)  # every task was in the journal
    with pytest.raises(StoreError):  # other draws: not the table's grid
        sweep.run(grid.where(length_seed=3), tmp_path / "mixed.parquet", progress=False)


def test_the_worst_step_search_finds_at_least_the_sample_and_the_ceiling_bounds_it():
    from indexer_lib.engines import release_scheduler
    from indexer_lib.plan import PlanSettings
    from indexer_lib.study import bounds
    from indexer_lib.workload import ClosedLoopWorkload

    config = release_scheduler("vllm==0.33.0", 64)
    for engine, layout in (("vllm==0.33.0", "compressed"), ("vllm==0.32.0", "full")):
        settings = PlanSettings("glm-5", engine, temporaries="deepgemm")
        drawn = ClosedLoopWorkload(16, 4096, 16, random_range_ratio=0.5)
        searched = len(bounds.DEFAULT_WAVES) * len(bounds.DEFAULT_SEEDS) * len(bounds.DEFAULT_ORDERS)
        assert len(bounds.variants(drawn)) == 1 + searched
        r = bounds.search(drawn, config, "n-only", None, settings)
        assert r["found_peak_gib"] >= r["sample_peak_gib"] and r["found_over_sample"] >= r["order_over_sample"] >= 1
        # no step's one logits call can pass the analytic ceiling
        assert r["found_logits_gib"] <= r["ceiling_logits_gib"] + 1e-9
        if layout == "compressed":  # one request wide: the longest prompt's last chunk in a full step reaches it
            assert r["found_logits_gib"] == pytest.approx(r["ceiling_logits_gib"])
        assert "2 waves of 16" in r["sample"] and "seed 0, sent in order drawn" in r["sample"]
        assert r["searched_over"] == "waves 2/3/4/6 x seeds 0-5 x 4 orders"
        waves, seed, order = r["found_in"].split(", ")
        assert waves.endswith(" waves") and seed.startswith("seed ") and order in bounds.DEFAULT_ORDERS
    # the full layout: two long prompts sent together at the second wave meet in a wider step than drawn
    mix = ClosedLoopWorkload(16, 2048, 16, mix="0.05x32768")
    r = bounds.search(mix, config, "n-only", None, PlanSettings("glm-5", "vllm==0.32.0", temporaries="deepgemm"))
    assert r["order_over_sample"] > 1.05 and r["found_in"] == "2 waves, seed 0, long-together"
    one = ClosedLoopWorkload(16, 4096, 16)
    # no seeds nor orders: nothing is drawn
    assert len(bounds.variants(one)) == 1 + len(bounds.DEFAULT_WAVES)
    assert bounds.searched_text(one) == "waves 2/3/4/6" and "one length" in bounds.sample_text(one)
    # the compressed ceiling: max_num_batched_tokens rows, as wide as the longest prompt
    settings = PlanSettings("glm-5", "vllm==0.33.0")
    assert bounds.ceiling_logits_bytes(one, config, settings, "compressed") == 8192 * 4096 * 4

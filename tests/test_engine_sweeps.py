"""Engine releases through every user-facing surface: the sweeps (an axis of the grid, in the
journalled store), the notebooks' parameters, and the plan and run commands, with the latest
vLLM as the default everywhere."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from indexer_lib.cli import main
from indexer_lib.engines import get_engine, process_budget
from indexer_lib.notebook.params import ParameterError, check_values
from indexer_lib.presets import free_bytes_from_gib
from indexer_lib.sweep import rows as sweep
from indexer_lib.sweep.grid import Grid

ENGINES = ("vllm==0.15.1", "vllm", "sglang==0.5.23")
GRID = dict(concurrency=(16, 64), isl=(10240,), budget_mb=(256, 512), strategy=("engine", "n-only", "vllm"),
            free_gib=(2.63, 20.0), engine=ENGINES)
RESULTS = ["peak_bytes", "peak_transient_bytes", "worst_chunks", "total_chunks", "budget_bytes", "oom"]


def test_the_grid_names_each_release_in_full_and_the_latest_vllm_by_default():
    assert Grid.of().engine == ("vllm==0.33.0",) == (get_engine("vllm").name,)
    assert Grid.of(**GRID).engine == ("vllm==0.15.1", "vllm==0.33.0", "sglang==0.5.23")
    with pytest.raises(ValueError, match=r"unknown engine release 'vllm==0.99.0': did you mean vllm==0.33.0, "):
        Grid.of(engine=("vllm==0.99.0",))
    # nothing close: the known releases, one range per engine
    with pytest.raises(ValueError, match=r"unknown engine release 'x==1': must be ENGINE==RELEASE, one of "
                                         r"vllm==0.11.0-0.33.0, sglang==0.5.3-0.5.23, "):
        Grid.of(engine=("x==1",))


def test_every_release_of_a_sweep_equals_its_own_frontier(tmp_path):
    grid = Grid.of(**GRID)
    frame = sweep.run(grid, tmp_path / "s.parquet", progress=False)
    # per workload and free GiB: 0.15.1's chunker and n-only read no budget (1 row each), vllm 2;
    # 0.33.0's chunker reads budget_mb (2), n-only 1, vllm 2; SGLang's measures its own (1), 1, 2
    assert len(frame) == grid.num_rows == 2 * 2 * ((1 + 1 + 2) + (2 + 1 + 2) + (1 + 1 + 2))
    for engine in grid.engine:
        ours = frame[frame["engine"] == engine]
        ref = pd.DataFrame(list(sweep.model_rows(Grid.of(
            concurrency=GRID["concurrency"], isl=GRID["isl"], budget_mb=GRID["budget_mb"],
            strategy=GRID["strategy"], free_gib=GRID["free_gib"], engine=engine))))
        key = ["concurrency", "isl", "strategy", "budget_mb", "free_gib"]
        both = ours.merge(ref, on=key, suffixes=("", "_f"))
        assert len(both) == len(ours) == len(ref)
        for col in RESULTS + ["deepgemm_version", "padded_budget"]:
            assert (both[col].astype(object) == both[f"{col}_f"].astype(object)).all(), (engine, col)
        assert all(f"|{engine}|" in t for t in ours["task"])
        rules = get_engine(engine).deepgemm_rules
        assert set(ours["deepgemm_version"]) == {rules}
        assert not ours[ours["strategy"] == "engine"]["padded_budget"].any()


def test_sglangs_own_chunker_plans_with_the_budget_it_measures_at_each_free_memory(tmp_path):
    grid = Grid.of(**GRID)
    frame = sweep.to_frame(list(sweep.model_rows(grid)))
    sglang = frame[(frame["engine"] == "sglang==0.5.23") & (frame["strategy"] == "engine")]
    for free, rows in sglang.groupby("free_gib"):
        # the budget_mb axis does not move it: SGLang reads free memory, not a MiB setting
        assert set(rows["budget_bytes"]) == {process_budget("sglang==0.5.23", free_bytes_from_gib(free))}
    assert sglang[sglang["free_gib"] == 2.63]["budget_bytes"].iloc[0] < \
        sglang[sglang["free_gib"] == 20.0]["budget_bytes"].iloc[0]
    # vLLM before #36178 has no budget; the latest plans with VLLM_SPARSE_INDEXER_MAX_LOGITS_MB = budget_mb
    old = frame[(frame["engine"] == "vllm==0.15.1") & (frame["strategy"] == "engine")]
    assert set(old["budget_bytes"]) == {-1}
    new = frame[(frame["engine"] == "vllm==0.33.0") & (frame["strategy"] == "engine")]
    assert list(new["budget_bytes"]) == [int(mb * 2**20) for mb in new["budget_mb"]]


def test_a_sweep_over_engines_resumes_where_it_stopped(tmp_path):
    grid = Grid.of(**GRID)
    full = sweep.run(grid, tmp_path / "full.parquet", progress=False)
    out = tmp_path / "s.parquet"

    class Stop(Exception):
        pass

    done = []

    def stop_after_four(task):
        done.append(task)
        if len(done) == 4:
            raise Stop

    with pytest.raises(Stop):
        sweep.run(grid, out, progress=False, after_task=stop_after_four)
    resumed = sweep.run(grid, out, progress=False)
    key = ["task", "free_gib", "budget_mb"]
    a, b = (f.sort_values(key).reset_index(drop=True) for f in (full, resumed))
    pd.testing.assert_frame_equal(a[key + RESULTS], b[key + RESULTS])


def test_trace_mode_traces_each_budget_an_engine_plans_with(tmp_path):
    grid = Grid.of(concurrency=(16,), isl=(10240,), budget_mb=(512,), strategy=("engine",),
                free_gib=(2.63, 20.0), engine=("sglang==0.5.23", "vllm"))
    traced = sweep.run(grid, tmp_path / "t.parquet", sweep.RunSettings(mode="trace"), progress=False)
    model = sweep.to_frame(list(sweep.model_rows(grid)))
    key = ["engine", "free_gib"]
    both = traced.merge(model, on=key, suffixes=("", "_model"))
    assert len(both) == 4 and set(traced["mode"]) == {"trace"}
    assert list(both["worst_chunks"]) == list(both["worst_chunks_model"])
    assert list(both["budget_bytes"]) == list(both["budget_bytes_model"])
    sglang = both[both["engine"] == "sglang==0.5.23"].sort_values("free_gib")
    assert sglang["worst_chunks"].iloc[0] > sglang["worst_chunks"].iloc[1]  # less free: more chunks


def test_another_deepgemm_is_a_what_if_for_our_strategies_never_for_the_engines_own():
    grid = Grid.of(concurrency=(16,), isl=(10240,), budget_mb=(512,), strategy=("engine", "vllm"),
                deepgemm_version="2.6")
    frame = sweep.to_frame(list(sweep.model_rows(grid)))
    by = frame.set_index("strategy")["deepgemm_version"]
    assert by["engine"] == "2.8" and by["vllm"] == "2.6"


def test_notebook_parameters_take_an_engine_release():
    check_values("01_oom_frontier", {"engine": "sglang==0.5.23", "deepgemm_version": None,
                                     "strategies": ["engine", "vllm"]})
    check_values("04_beyond", {"engine": "vllm", "deepgemm_version": "2.6"})
    with pytest.raises(ParameterError, match=r"01_oom_frontier.ipynb parameter 'engine': "
                                             r"unknown engine release 'vllm==0.99.0': did you mean vllm==0.33.0"):
        check_values("01_oom_frontier", {"engine": "vllm==0.99.0"})
    with pytest.raises(ParameterError, match="'deepgemm_version' = 2.6: Input should be a valid string"):
        check_values("02_chunk_overhead", {"deepgemm_version": 2.6})


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_and_run_default_to_the_latest_vllm_and_its_own_chunker(capsys):
    step = ["--query-lens", ",".join(["256"] * 32), "--seq-lens", ",".join(["10240"] * 32), "--json"]
    code, out, _ = run(capsys, "plan", *step)
    plan = json.loads(out)
    assert code == 0 and (plan["strategy"], plan["engine"], plan["deepgemm_version"]) == ("engine", "vllm==0.33.0", "2.8")
    assert plan["budget_bytes"] == 512 * 2**20  # VLLM_SPARSE_INDEXER_MAX_LOGITS_MB's default
    assert all(c["compressed"] for c in plan["chunks"])
    code, out, _ = run(capsys, "plan", *step, "--strategy", "vllm", "--deepgemm-version", "2.6")
    what_if = json.loads(out)
    assert code == 0 and (what_if["engine"], what_if["deepgemm_version"]) == ("vllm==0.33.0", "2.6")
    assert not any(c["compressed"] for c in what_if["chunks"])
    code, _, err = run(capsys, "plan", *step, "--deepgemm-version", "2.6")
    # the engine's own chunker runs its release's own build: the CLI refuses the what-if
    assert code == 2 and err.count("\n") == 1 and "the engine strategy runs vllm==0.33.0's own build" in err
    code, out, _ = run(capsys, "run", "--query-lens", "4,4", "--seq-lens", "300,300", "--device", "meta",
                       "--engine", "vllm==0.15.1", "--json")
    result = json.loads(out)
    assert code == 0 and result["engine"] == "vllm==0.15.1" and result["strategy"] == "engine"
    assert result["deepgemm_version"] == "2.1" and result["peak_bytes_traced"] == result["peak_bytes_model"]


def test_the_deploy_line_is_the_releases_own_knob_and_never_a_project_strategy():
    from indexer_lib.study.auto import Candidate, choose

    def rec(engine, setting, own=True):
        strategy = "engine" if own else "vllm"
        return choose([Candidate(strategy, 512, False, 1.0, 3, 2**20, False, engine, setting)], 1.0, "modelled")

    assert rec("vllm==0.19.0", 512).deploy_line == "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=512"
    assert rec("sglang==0.5.23", 0.1).deploy_line == "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION=0.1"
    assert rec("vllm==0.15.1", None).deploy_line == "vllm==0.15.1: nothing to set (its own chunker fits as it is)"
    patched = rec("vllm==0.19.0", None, own=False)  # the project's vllm strategy: no setting of any release
    assert patched.deployable is None and patched.deploy_line.startswith("none: no release's own chunker among the candidates")
    assert "VLLM_SPARSE" not in patched.deploy_line and patched.patched_line.startswith("a patched engine could run vllm")

"""The strategies beyond the field in the sweeps, auto, the budget policies and the CLI."""
from __future__ import annotations

import json

import pytest

from indexer_lib.sweep import rows as sweep
from indexer_lib.study.auto import choose, evaluate_candidates, recommend
from indexer_lib.study.budget_policy import FreshPolicy, SglangPolicy, run_policy
from indexer_lib.cli import main
from indexer_lib.engines import get_engine
from indexer_lib.search.worst_step import Schedule, prefill_batches
from indexer_lib.sweep.grid import Grid
from indexer_lib.notebook.params import ParameterError, check_values
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import GIB, get_gpu
from indexer_lib.timemodel.model import PUBLISHED_SOURCE, TimeModel
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, StepBatch

BEYOND = ("kv-split", "fixed-shape")
SCHED = SchedulerConfig(long_prefill_token_threshold=256)
# no engine release: the project's strategies, counting the H200 path's temporaries
GLM5 = PlanSettings("glm-5", temporaries="deepgemm")


def test_frontier_and_sweep_modes_take_the_new_strategies(tmp_path):
    # the latest vLLM's DeepGEMM (2.8) has only the compressed layout: these need the full one
    with pytest.raises(ValueError, match="'kv-split' needs DeepGEMM's full logits layout; DeepGEMM 2.8 "
                                         r"\(vllm==0.33.0\)"):
        Grid.of(strategy=BEYOND)
    with pytest.raises(ValueError, match="'fixed-shape' needs DeepGEMM's full logits layout"):
        Grid.of(strategy=("fixed-shape",))
    grid = Grid.of(concurrency=(1, 16), isl=(2048, 10240), budget_mb=(64, 512),
                strategy=BEYOND + ("vllm",), engine="vllm==0.32.0")
    rows = list(sweep.model_rows(grid))
    assert {r["strategy"] for r in rows} == set(BEYOND) | {"vllm"} and len(rows) == 24
    assert {(r["engine"], r["deepgemm_version"]) for r in rows} == {("vllm==0.32.0", "2.6")}
    # ... or on the latest vLLM's workspace with another DeepGEMM build, named as such
    sgrid = Grid.of(concurrency=(4,), isl=(4096,), budget_mb=(64,), strategy=BEYOND, deepgemm_version="2.6")
    model = sweep.run(sgrid, tmp_path / "m.parquet", progress=False)
    traced = sweep.run(sgrid, tmp_path / "t.parquet", sweep.RunSettings(mode="trace"), progress=False)
    assert set(model["strategy"]) == set(traced["strategy"]) == set(BEYOND)
    assert set(model["mode"]) == {"model"} and set(traced["mode"]) == {"trace"}
    # the same worst step and chunks, whichever mode measured its bytes
    assert list(model["worst_chunks"]) == list(traced["worst_chunks"])
    assert set(model["engine"]) == {"vllm==0.33.0"} and set(model["deepgemm_version"]) == {"2.6"}
    assert (traced["peak_transient_bytes"] > 0).all()


def test_notebook_parameters_accept_the_new_strategies_where_the_build_has_their_layout():
    check_values("03_strategies", {"strategies": ["kv-split", "fixed-shape"], "engine": "vllm==0.32.0"})
    check_values("03_strategies", {"strategies": ["kv-split", "fixed-shape"], "deepgemm_version": "2.6"})
    # the latest vLLM's DeepGEMM 2.8 has only the compressed layout: refused before any work
    with pytest.raises(ParameterError, match="'strategies': strategy 'kv-split' needs DeepGEMM's full logits layout"):
        check_values("03_strategies", {"strategies": ["kv-split", "fixed-shape"]})
    with pytest.raises(ParameterError, match="unknown strategy 'column-split': did you mean kv-split\\?"):
        check_values("03_strategies", {"strategies": ["column-split"]})


@pytest.mark.parametrize("strategy", BEYOND)
def test_fresh_policy_fits_where_the_cached_reading_does_not(strategy):
    big = StepBatch.from_lengths([256] * 32, [10_240] * 32)
    free = [round(13.15 * GIB), round(2.20 * GIB)]
    total = get_gpu("h200").capacity_bytes
    glm5 = PlanSettings("glm-5")
    cached = run_policy([big, big], free, SglangPolicy(total), strategy, glm5)
    fresh = run_policy([big, big], free, FreshPolicy(), strategy, glm5)
    assert round(cached[1].budget_bytes / GIB, 2) == 2.63 and not cached[1].fits
    assert all(s.fits for s in fresh)


def test_auto_default_list_has_every_budgeted_strategy_and_free_memory_only_filters():
    schedules = [Schedule(prefill_batches(ClosedLoopWorkload(16, 8192, 8), SCHED))]
    cands = evaluate_candidates(schedules, GLM5, budgets_mb=(64, 512),
                                time_model=TimeModel.published())
    assert {c.strategy for c in cands} == {"vllm", "per-request", "causal", "kv-split", "fixed-shape"}
    a = choose(cands, 0.5, "modelled")
    b = recommend([ClosedLoopWorkload(16, 8192, 8)], 0.5, GLM5, SCHED, budgets_mb=(64, 512),
                  time_model=TimeModel.published())
    assert a.best == b.best and a.best.peak_transient_bytes <= 0.5 * GIB


def test_cli_auto_prints_the_deployable_line_margin_and_time_source(capsys):
    rc = main(["auto", "--model", "glm-5", "--free-gib", "2.63", "--workload", "16x8192x8",
               "--workload", "2x32768x8", "--budgets-mb", "128,512", "--data-dir", "/nonexistent"])
    header, *out = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert header == f"glm-5 on {get_engine('vllm').name} (h200), 2.63 GiB free, 2 workloads (modelled):"
    assert out[0] in ("VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=128", "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=512")
    assert out[1].startswith(f"  {get_engine('vllm').name} at {out[0]}: ")
    assert "margin to the OOM frontier" in out[2] and "MiB" in out[2]
    assert out[3] == f"  time: {PUBLISHED_SOURCE}"
    rc = main(["auto", "--free-gib", "2.63", "--workload", "16x8192x8", "--budgets-mb", "512",
               "--strategies", "kv-split,fixed-shape", "--json", "--data-dir", "/nonexistent",
               "--engine", "vllm==0.32.0"])
    d = json.loads(capsys.readouterr().out)
    # ours on the engine's workspace and DeepGEMM, next to the engine's own knob: the line is the knob's
    assert rc == 0 and d["candidates"] == 3 and d["margin_bytes"] >= 0
    assert d["deploy"] == "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=512" and d["deployable"]["engine"] == "vllm==0.32.0"
    assert d["patched"]["strategy"] in BEYOND and d["patched"]["engine"] == "vllm==0.32.0"


def test_cli_auto_never_deploys_what_the_engines_own_chunker_would_oom_with(capsys):
    """At 2048 MiB and 2.63 GiB free vLLM's own chunker keeps two 2 GiB chunks alive: nothing to
    deploy (exit 1), while the project's strategies show what a patched engine could do."""
    # a 256-token long_prefill_token_threshold (vLLM's default is 0) builds the 32 x (9,984 + 256)
    # steps that make 2048 MiB chunks; the output names the setting
    argv = ["auto", "--model", "glm-5", "--free-gib", "2.63", "--workload", "64x10240x512",
            "--engine", "vllm==0.32.0", "--budgets-mb", "2048", "--strategies", "vllm,causal",
            "--data-dir", "/nonexistent", "--long-prefill-token-threshold", "256"]
    assert main(argv) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "glm-5 on vllm==0.32.0 (h200), 2.63 GiB free, 1 workload (modelled):"
    assert out[1].startswith("none: vllm==0.32.0's own chunker needs at least 4105 MiB")
    assert out[2].startswith("  a patched engine could run ")
    assert "  scheduler: not the release default: long_prefill_token_threshold=256 (default 0)" in out
    assert main([*argv, "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["scheduler_not_default"] == "long_prefill_token_threshold=256 (default 0)"
    assert d["deploy"] is None and d["deployable"] is None and d["why_none"].startswith("none: ")
    assert d["patched"]["strategy"] in ("vllm", "causal")


@pytest.mark.parametrize("argv, message", [
    (["--free-gib", "2.63", "--workload", "64x10240"], "--workload '64x10240': expected"),
    (["--free-gib", "2.63", "--workload", "axbxc"], "every field must be a whole number"),
    (["--free-gib", "0", "--workload", "4x1024x8"], "--free-gib 0.0: must be > 0"),
    (["--free-gib", "1", "--workload", "4x1024x8", "--strategies", "bogus"], "unknown strategy 'bogus'"),
    (["--free-gib", "1", "--workload", "4x1024x8", "--model", "llama"], "unknown model 'llama'"),
])
def test_cli_auto_bad_input_is_one_line_exit_2(argv, message, capsys):
    assert main(["auto", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("indexer-lab auto: error:")


def test_auto_dashboard_follows_free_memory_and_deployment():
    from indexer_lib.notebook.widgets import AutoDashboard

    deployments = {"small": ([ClosedLoopWorkload(8, 4096, 8)], 2.63),
                   "long": ([ClosedLoopWorkload(2, 32_768, 8)], 1.0)}
    dash = AutoDashboard(deployments, budgets_mb=(64, 2048))
    first = dash.recommendation
    assert first.deployable.engine == get_engine("vllm").name  # the latest vLLM's own knob
    assert first.deploy_line in dash.html.value and "modelled" in dash.html.value
    dash.controls["deployment"].value = "long"
    on_032 = dash.auto.on_engine("vllm==0.32.0")  # the full layout: 2048 MiB is 4 GiB of logits
    dash = AutoDashboard(on_032)
    dash.controls["deployment"].value = "long"
    dash.controls["free_gib"].value = 0.25
    rec = dash.recommendation
    # vLLM's own chunker: 2048 MiB keeps two chunks alive, 64 MiB gives up 448 MiB of the profile
    # run's reservation to the KV cache; nothing to deploy, a patched engine fits at 64 MiB
    assert rec.deployable is None and rec.deploy_line.startswith("none: vllm==0.32.0's own chunker needs")
    assert rec.patched.budget_mb == 64 and rec.patched.needs_bytes <= 0.25 * GIB
    assert "none: " in dash.html.value and "a patched engine could run" in dash.html.value
    assert dash.updates == 3 and len(dash.image.value) > 1000


def test_auto_dashboard_changes_engine_release():
    from indexer_lib.notebook.widgets import AutoDashboard

    deployments = {"small": ([ClosedLoopWorkload(8, 4096, 8)], 2.63)}
    dash = AutoDashboard(deployments, budgets_mb=(64, 512),
                         settings=PlanSettings("glm-5", "vllm==0.32.0", temporaries="deepgemm"),
                         engines=("vllm==0.33.0", "sglang==0.5.23"))
    assert list(dash.controls["engine"].options) == ["vllm==0.32.0", "vllm==0.33.0", "sglang==0.5.23"]
    strategies = {c.strategy for c in dash.recommendation.candidates}
    assert {"engine", "kv-split", "fixed-shape"} <= strategies  # its own knob and ours
    assert {c.engine for c in dash.recommendation.candidates} == {"vllm==0.32.0"}
    dash.controls["engine"].value = "vllm==0.33.0"
    # DeepGEMM 2.8 has only the compressed layout: kv-split and fixed-shape are not candidates
    strategies = {c.strategy for c in dash.recommendation.candidates}
    assert "engine" in strategies and not strategies & set(BEYOND)
    assert {c.engine for c in dash.recommendation.candidates} == {"vllm==0.33.0"}
    assert "vllm==0.33.0" in dash.html.value or "VLLM_SPARSE" in dash.html.value
    dash.controls["engine"].value = "sglang==0.5.23"
    rec = dash.recommendation
    assert {c.engine for c in rec.candidates} == {"sglang==0.5.23"}
    assert "VLLM_SPARSE" not in rec.deploy_line  # ours on SGLang: never a vLLM setting
    assert rec.deployable is None or rec.deploy_line.startswith("SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION=")
    dash.controls["engine"].value = "vllm==0.32.0"
    assert dash.auto is dash.by_engine["vllm==0.32.0"]  # evaluated once, then kept

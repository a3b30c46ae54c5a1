"""The engine's own indexer prefill, replayed on the meta device, against the memory model.

vLLM 0.33.0 comes from .venv (scripts/install_vllm.sh), 0.15.1, 0.19.0, 0.20.0 and 0.30.0
from .venv-engines (scripts/install_engines.sh); scripts/test.sh installs them all.  Without
them these tests skip, except under CI, where they fail.
"""
from __future__ import annotations

import json
import os

import pytest

from indexer_lib.cli.main import main
from indexer_lib.run.replay import (ProfileRunReplay, engine_python, replay_cases, replay_profile_run, replay_steps, replayable)
from indexer_lib.run.replay_cases import field_cases, random_cases
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.plan import PlanSettings
from indexer_lib.workload import StepBatch

RELEASES = ("vllm==0.33.0", "vllm==0.32.0", "vllm==0.30.0", "vllm==0.20.0", "vllm==0.19.0", "vllm==0.15.1")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(engine: str) -> None:
    try:
        engine_python(engine)
    except ValueError as e:
        if IN_CI:
            pytest.fail(f"{e} (CI=true: the replay tests must run)")
        pytest.skip(str(e))


@pytest.fixture(scope="module", params=RELEASES)
def replayed(request):
    """Every case replayed once per release (one vLLM import per top-k buffer size)."""
    need(request.param)
    cases = field_cases() + random_cases(50, seed=0)
    return request.param, replay_cases(request.param, "glm-5", cases)


def test_every_replayed_release_is_tested():
    from indexer_lib.engines import replayed_engines

    assert sorted(replayed_engines()) == sorted(RELEASES)


def test_model_equals_replay_byte_for_byte(replayed):
    engine, results = replayed
    assert len(results) == 13 + 50
    for case, r in results:
        assert r.engine == engine
        assert r.chunks == r.modelled_chunks, case.name  # the release's own chunker = the profile's
        assert r.difference_bytes == 0, (case.name, r.peak_bytes, r.modelled_peak_bytes)
        assert len(r.logits_calls) == len(r.chunks)


def test_replay_sees_the_logits_and_what_is_held(replayed):
    """The replay is not trivially equal: it sees every logits call, and its peak is above the
    persistent buffers and the metadata by at least the largest logits allocation."""
    engine, results = replayed
    for case, r in results:
        assert r.persistent_bytes > 0 and r.metadata_bytes > 0
        assert r.peak_bytes >= r.persistent_bytes + r.metadata_bytes + max(r.logits_allocated_bytes)
    # two chunks of logits alive at once on a multi-chunk step (the loop rebinds ``logits``)
    case, r = next((c, r) for c, r in results if c.name == "64K prompt in 8K steps, step 8")
    if len(r.chunks) > 1:
        assert r.peak_bytes >= r.persistent_bytes + r.metadata_bytes + 2 * min(r.logits_allocated_bytes)


def test_other_backends_differ_from_the_replay(replayed):
    """Our executor's temporaries are not the engine's: the check above can fail."""
    engine, results = replayed
    case, r = results[0]
    plan = make_plan(StepBatch.from_lengths(r.query_lens, r.seq_lens), "engine",
                     None if r.budget_mb is None else r.budget_mb << 20, PlanSettings("glm-5", engine))
    assert memory_report(plan, topk_rows=8192, temporaries="deepgemm").peak != r.peak_bytes


@pytest.mark.parametrize("engine", RELEASES)
def test_profile_run(engine):
    need(engine)
    r = replay_profile_run(engine, "glm-5")
    assert isinstance(r, ProfileRunReplay)
    assert (r.peak_bytes, r.reserved_bytes) == (r.modelled_peak_bytes, r.modelled_reserved_bytes)
    if replayable(engine).dummy_logits_reservation:  # the budget's torch.empty, freed at once
        assert r.peak_bytes - r.reserved_bytes == r.budget_mb << 20
    else:
        assert r.peak_bytes == r.reserved_bytes


def test_allocations_name_the_engine_lines():
    need("vllm==0.33.0")
    (r,) = replay_steps("vllm==0.33.0", "glm-5", [((8192,), (65536,), 512)], record=True)
    by = [a["by"] for a in r.allocations]
    assert any("build_prefill_chunk_metadata" in b for b in by)
    assert any("sparse_attn_indexer" in b and "zeros" not in b for b in by)
    assert any(b.startswith("DeepGEMM") for b in by)
    logits = [a for a in r.allocations if a["by"].startswith("DeepGEMM")]
    assert len(logits) == 4 and all(a["freed"] is not None for a in logits[:-1])


def test_refusals_are_one_line(capsys):
    assert main(["replay", "--engine", "sglang", "--query-lens", "1", "--seq-lens", "1"]) == 2
    assert "not replayed" in capsys.readouterr().err
    assert main(["replay", "--query-lens", "1,2", "--seq-lens", "5"]) == 2
    assert "one of each per request" in capsys.readouterr().err
    assert main(["replay", "--query-lens", "9000", "--seq-lens", "9000"]) == 2
    assert "max_num_batched_tokens 8192" in capsys.readouterr().err
    assert main(["replay", "--query-lens", "5", "--seq-lens", "10", "--budget-mb", "0"]) == 2
    assert "--budget-mb 0: must be" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no logits budget"):
        replay_steps("vllm==0.15.1", "glm-5", [((1,), (1,))], budget_mb=64)
    with pytest.raises(ValueError, match="steps is empty"):
        replay_steps("vllm==0.33.0", "glm-5", [])


def test_cli_json(capsys):
    need("vllm==0.33.0")
    import json

    assert main(["replay", "--query-lens", "3584,3584", "--seq-lens", "117248,117248", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["difference_bytes"] == 0 and out["chunks"] and out["engine"] == "vllm==0.33.0"


def test_the_replay_says_why_plan_shows_another_peak(capsys):
    need("vllm==0.33.0")
    step = ["--engine", "vllm==0.33.0", "--model", "glm-5", "--query-lens", "4096,4096", "--seq-lens", "65536,8192"]
    assert main(["replay", *step]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert main(["plan", *step, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["peak_bytes"]
    # the same number plan prints, and the two reasons it differs from the replay
    assert f"indexer-lab plan shows 2.08 GiB ({shown} bytes) for this step" in last
    assert "reference executor's temporaries (16.1 MiB) where the engine's own path adds 1.6 MiB" in last
    assert "max_num_batched_tokens (8192)" in last


def test_a_missing_release_names_its_install_line(monkeypatch, tmp_path):
    from indexer_lib.run import replay

    monkeypatch.setattr(replay, "REPO", tmp_path)  # no .venv-engines here
    monkeypatch.setattr(replay, "_installed_vllm", lambda: None)
    with pytest.raises(ValueError, match="bash scripts/install_engines.sh vllm-0.19.0"):
        engine_python("vllm==0.19.0")
    with pytest.raises(ValueError, match="bash scripts/install_vllm.sh"):
        engine_python("vllm==0.33.0")


def test_trace_sweep_replays_the_engine_and_equals_the_model(tmp_path):
    """sweep.run(mode="trace", backend="replay"): each worst step of the ``engine`` strategy goes
    through the release's own code (one process per release for the whole sweep)."""
    from indexer_lib.sweep import rows as sweep
    from indexer_lib.sweep.grid import Grid

    for engine in RELEASES:
        need(engine)
    grid = Grid.of(concurrency=(4, 32), isl=(10240, 65536), budget_mb=(64, 512), strategy=("engine",), engine=RELEASES)
    frame = sweep.run(grid, tmp_path / "r.parquet", sweep.RunSettings(mode="trace", backend="replay"),
                      progress=False)
    # 0.15.1's chunker reads no budget: one row per workload; the others one per budget
    assert len(frame) == 2 * 2 * (2 * (len(RELEASES) - 1) + 1)
    assert frame[frame["engine"] == "vllm==0.15.1"]["budget_mb"].isna().all()
    assert (frame["peak_bytes"] == frame["model_peak_bytes"]).all()
    assert (frame["peak_transient_bytes"] == frame["model_peak_transient_bytes"]).all()
    assert frame["device"].str.contains("replayed").all()
    # the eras differ: 0.15.1 has no budget, 0.33.0 compresses
    peaks = frame.groupby("engine")["peak_bytes"].max()
    assert peaks["vllm==0.15.1"] > peaks.drop("vllm==0.15.1").max()
    at_10k = frame[(frame["isl"] == 10240) & (frame["budget_mb"] == 512)].groupby("engine")["peak_bytes"].max()
    assert at_10k["vllm==0.19.0"] > at_10k["vllm==0.33.0"]  # a chunk as wide as its longest request


def test_trace_sweep_replay_refusals(tmp_path):
    from indexer_lib.sweep import rows as sweep
    from indexer_lib.sweep.grid import Grid

    with pytest.raises(ValueError, match="mode must be 'trace'"):
        sweep.RunSettings(mode="measure", backend="replay")
    with pytest.raises(ValueError, match="backend 'engine' is now spelled 'replay'"):
        sweep.RunSettings(mode="trace", backend="engine")
    grid = Grid.of(concurrency=(4,), isl=(2048,), budget_mb=(64,), strategy=("engine", "causal"))
    with pytest.raises(ValueError, match="strategy 'causal' is ours"):
        sweep.run(grid, tmp_path / "x.parquet", sweep.RunSettings(mode="trace", backend="replay"),
                  progress=False)
    assert not (tmp_path / "x.parquet").exists()

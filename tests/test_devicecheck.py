"""The prepared device script: its CPU dry run, stage isolation and time bounds."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from fake_deepgemm import install, make_fake
from indexer_lib.cli import devicecheck as dc

ROOT = Path(__file__).resolve().parents[1]


def read_csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_dry_run_through_the_shell_script(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable)
    done = subprocess.run(["bash", "scripts/h200_check.sh", "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "h200_check.json").read_text())
    assert summary["mode"] == "dry-run"
    prov = summary["provenance"]
    for key in ("date_utc", "command", "git_sha", "torch", "gpu", "driver", "backend", "deepgemm_rules"):
        assert key in prov
    assert prov["command"] == "bash scripts/h200_check.sh --dry-run"
    assert prov["backend"] == "reference"
    assert set(summary["stages"]) == set(dc.STAGES)
    for stage, info in summary["stages"].items():
        assert info["status"] == "ok", (stage, info)
        assert (out / f"{stage}.csv").exists()
    # at most 8 files come back from the device machine
    assert len(list(out.iterdir())) <= 8

    correct = read_csv(out / "correctness.csv")
    assert correct and all(float(r["rel_diff"]) == 0.0 for r in correct)
    assert all(r["topk_rows_equal_sets"] == r["topk_rows"] for r in correct)
    memory = read_csv(out / "memory.csv")
    assert {r["strategy"] for r in memory} == set(dc.STRATEGIES)
    assert all(int(r["predicted_peak"]) > 0 for r in memory)
    timing = read_csv(out / "timing.csv")
    assert all(float(r["median_ms"]) > 0 for r in timing)
    frontier = read_csv(out / "frontier.csv")
    assert frontier and all(r["predicted_fits"] in ("True", "False") for r in frontier)
    reserved = read_csv(out / "reserved.csv")
    assert [int(r["context_len"]) for r in reserved] == [0, 32, 64, 96]
    # the short table is printed last
    last = done.stdout.strip().splitlines()
    assert last[0].startswith("[h200_check]") and any(l.startswith("h200_check dry-run") for l in last)
    assert last[-1].lstrip().startswith("oom")


def test_a_failing_stage_is_recorded_and_the_next_runs(tmp_path, monkeypatch):
    def broken(ctx):
        raise RuntimeError("boom")

    monkeypatch.setitem(dc.STAGE_FUNCS, "memory", broken)
    summary = dc.run(dc.dry_run_config(), tmp_path, stages=("memory", "reserved"), seed=3)
    assert summary["stages"]["memory"]["status"] == "failed: RuntimeError: boom"
    assert "traceback" in summary["stages"]["memory"]
    assert summary["stages"]["reserved"]["status"] == "ok"
    saved = json.loads((tmp_path / "h200_check.json").read_text())
    assert saved["stages"]["memory"]["status"].startswith("failed")


def test_stages_stop_at_their_time_limit(tmp_path, monkeypatch):
    def slow(ctx):
        rows = []
        for _ in range(1000):  # 10 s at most: a limit that never stops the stage fails here
            ctx.clock.check()
            rows.append({"status": "ok"})
            time.sleep(0.01)
        raise AssertionError("the stage ran on past its time limit")

    monkeypatch.setitem(dc.STAGE_FUNCS, "timing", slow)
    cfg = dc.dry_run_config()
    cfg.stage_seconds["timing"] = 0.2
    summary = dc.run(cfg, tmp_path, stages=("timing",), seed=1)
    assert summary["stages"]["timing"]["status"] == "partial: stage time limit reached"
    # the run's total bounds every stage too
    summary = dc.run(dc.dry_run_config(), tmp_path, stages=("timing",), seed=1, total_seconds=0.2)
    assert summary["stages"]["timing"]["status"].startswith("partial")


def test_no_backend_is_reported_not_raised(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "deep_gemm", None)
    monkeypatch.setitem(sys.modules, "vllm.third_party.deep_gemm", None)
    summary = dc.run(dc.dry_run_config(), tmp_path, backend_name="deepgemm", stages=("probe",))
    assert "DeepGEMM" in summary["provenance"]["error"]
    assert summary["stages"]["probe"]["status"] == "not run: no backend"


def test_oom_is_recognised_across_bindings():
    import torch

    assert dc.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert dc.is_oom(RuntimeError("CUDA out of memory. Tried to allocate 9.89 GiB"))
    assert not dc.is_oom(RuntimeError("CUDA driver error: invalid argument"))


def test_deepgemm_path_end_to_end_with_a_fake_build(tmp_path, monkeypatch):
    """The device script's deepgemm path on the CPU: probe, correctness, memory via the executor."""
    install(monkeypatch, make_fake("fp8_fp4", "2.6", version="2.6.0"))
    summary = dc.run(dc.dry_run_config(), tmp_path, backend_name="deepgemm",
                     stages=("probe", "correctness", "memory"), seed=5)
    assert summary["provenance"]["deepgemm"]["api"] == "fp8_fp4"
    for stage in ("probe", "correctness", "memory"):
        assert summary["stages"][stage]["status"] == "ok", summary["stages"][stage]
    probe = summary["results"]["probe"]
    assert {(r["layout"], r["heads"]) for r in probe} == {("full", 64), ("full", 32),
                                                          ("compressed", 64), ("compressed", 32)}
    assert all(r["rules_matching"].split() == ["2.6", "2.7"] or "2.6" in r["rules_matching"] for r in probe)
    correct = summary["results"]["correctness"]
    assert {r["layout"] for r in correct} == {"full", "compressed"}
    for r in correct:
        assert r["rel_diff"] < 1e-6
        assert r["gpu_topk_equals_reference_topk"] is True
        assert r["topk_rows_equal_sets"] == r["topk_rows"]

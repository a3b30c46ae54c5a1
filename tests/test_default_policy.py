"""The default-policy study: its rows are the ledger's verdicts with only the policy changed, its
sentences follow its rule, and its notebook runs headless."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from indexer_lib.checks import BadValue
from indexer_lib.ledger.deployment import Server, deployment_ledger
from indexer_lib.notebook.params import ParameterError, check_values
from indexer_lib.study import default_policy as dp
from indexer_lib.workload import ClosedLoopWorkload

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def small():
    deployments = dp.field_deployments()[:1] + dp.planned_deployments(["glm-5"], ["h200"], ["16x10240x64"])
    engines = ("vllm", "trtllm", "atom")
    return deployments, engines, dp.policy_rows(deployments, engines, budgets_mb=(64, 512), fractions=(0.2,))


def test_one_row_per_engine_policy_and_deployment(small):
    deployments, engines, rows = small
    keys = [(r["engine"], r["policy"], r["deployment"]) for r in rows]
    assert len(keys) == len(set(keys))
    expected = sum(len(dp.engine_policies(dp.release_on(e, d), (64, 512), (0.2,), model=d.model))
                   for e in engines for d in deployments)
    assert len(rows) == expected
    assert all(r["mode"] == "modelled" for r in rows)
    # ATOM runs only on ROCm: every H200 deployment is listed as skipped, with the release's reason
    atom = [r for r in rows if r["engine"] == "atom"]
    assert atom and all(r["verdict"] == "skipped" and "ROCm" in r["skipped"] for r in atom)
    # TensorRT-LLM's default is its element cap, 2^31 elements (8 GiB of fp32)
    (default,) = [r for r in rows if r["engine"] == "trtllm" and r["policy_kind"] == "default"
                  and r["deployment"] == deployments[1].name]
    assert default["budget_mib"] == 8192 and default["free_gib_given"] == dp.ASSUMED_FREE_GIB and default["free_assumed"]


def test_verdicts_and_kv_lost_are_deploys_for_the_same_server(small):
    deployments, engines, rows = small
    by_name = {d.name: d for d in deployments}
    checked = 0
    for r in rows:
        if r["verdict"] == "skipped":
            continue
        d = by_name[r["deployment"]]
        policy = next(p for p in dp.engine_policies(r["release"], (64, 512), (0.2,)) if p.name == r["policy"])
        server = policy.server(d.server(r["release"]))
        deployed = deployment_ledger(server, d.workload, policy.strategy, r["free_gib_given"])
        assert r["verdict"] == deployed.run.ledger.verdict
        assert r["kv_lost_gib"] * 2**30 == pytest.approx(deployed.run.ledger.boot_bytes)
        checked += 1
    assert checked >= 8
    vllm = {r["policy"]: r for r in rows if r["engine"] == "vllm" and r["deployment"] == deployments[1].name}
    # vLLM's profile run reserves its budget: a larger one takes more KV cache at boot, and costs less time
    assert vllm["64 MiB"]["kv_lost_gib"] < vllm["512 MiB (default)"]["kv_lost_gib"]
    assert vllm["64 MiB"]["added_ttft_p90_ms"] > vllm["512 MiB (default)"]["added_ttft_p90_ms"]
    assert "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=64" in vllm["64 MiB"]["not_default"]
    for r in vllm.values():
        assert r["added_ttft_p90_low_ms"] <= r["added_ttft_p90_ms"] <= r["added_ttft_p90_high_ms"]


def test_each_engine_sets_its_own_knob():
    w = ClosedLoopWorkload(4, 10240, 16)
    trt = deployment_ledger(Server("glm-5", "trtllm==1.4.0rc4", knob=2**24), w, free_gib=2.63)
    assert trt.budget_bytes == 2**26 and "TLLM_INDEXER_MQA_LOGITS_ELEM_BUDGET=16777216" in trt.not_default
    sgl = deployment_ledger(Server("glm-5", "sglang==0.5.23", knob=0.1), w)
    assert sgl.budget_bytes < deployment_ledger(Server("glm-5", "sglang==0.5.23"), w).budget_bytes
    with pytest.raises(BadValue, match="give budget_mb"):
        deployment_ledger(Server("glm-5", "vllm==0.33.0", knob=64), w)


def _summary(policy, kind, oom, p90, kv, engine="vllm"):
    return {"engine": engine, "policy": policy, "policy_kind": kind, "deployments": 4, "of_deployments": 4,
            "oom": oom, "oom_deployments": [f"d{i}" for i in range(oom)], "eligible": kind != "patched", "kv_lost_gib": kv,
            "added_ttft_p90_ms": p90, "added_ttft_p90_low_ms": p90 * 0.9, "added_ttft_p90_high_ms": p90 * 1.1,
            "added_per_output_token_ms": p90 / 10}


def test_the_sentence_names_the_winner_by_its_rule():
    summary = [_summary("512 MiB (default)", "default", 2, 10.0, 1.5), _summary("64 MiB", "knob", 0, 100.0, 1.1),
               _summary("128 MiB", "knob", 0, 40.0, 1.2), _summary("patched: causal at 512 MiB", "patched", 0, 1.0, 1.5)]
    best, default = dp.winner(summary, "vllm")
    assert best["policy"] == "128 MiB" and default["policy"] == "512 MiB (default)"  # a patched engine cannot win
    line = dp.engine_sentence(summary, "vllm")
    assert line.startswith("vllm: 128 MiB wins over the release's default (512 MiB): 0 vs 2 of 4 deployments OOM "
                           "(the default on d0, d1)")
    # the difference's band: each end of the winner's against the other end of the default's
    assert "added TTFT p90 +30.0 ms (band +25.0 to +35.0; 40.0 vs 10.0 ms), +3.00 ms per output token" in line
    assert "lost at boot 1.20 vs 1.50 GiB per GPU" in line and "modelled" in line and "within it" not in line
    tie = [_summary("512 MiB (default)", "default", 0, 10.0, 1.5), _summary("1024 MiB", "knob", 0, 9.5, 2.0)]
    line = dp.engine_sentence(tie, "vllm")
    assert "added TTFT p90 -0.5 ms (band -2.4 to +1.5, within it; 9.5 vs 10.0 ms)" in line
    kept = [_summary("512 MiB (default)", "default", 0, 10.0, 1.5), _summary("64 MiB", "knob", 0, 50.0, 1.1)]
    assert dp.engine_sentence(kept, "vllm").startswith("vllm: the release's default (512 MiB) wins: 0 of 4")
    assert "no deployment" in dp.engine_sentence([], "atom")
    # a default that no knob value changes on some deployments, on a free memory assumed
    other = {**_summary("8192 MiB (default)", "default", 5, 0.0, 0.0, "trtllm"), "other_deployments": 3, "other_oom": 2,
             "free_assumed": [2.63]}
    line = dp.engine_sentence([other], "trtllm")
    assert "(the default on d0, d1, d2 and 2 more)" in line and "free memory assumed 2.63 GiB" in line
    assert "on 3 more, whose path reads no budget, every value is the default (2 OOM)" in line


def test_bad_parameters_are_named():
    with pytest.raises(ParameterError, match="'engines'.*'tensorrt'"):
        check_values("05_default_policy", {"engines": ["tensorrt"]})
    with pytest.raises(ParameterError, match="'workloads'"):
        check_values("05_default_policy", {"workloads": ["64x10240"]})
    with pytest.raises(ParameterError, match="'fractions'"):
        check_values("05_default_policy", {"fractions": [1.5]})


def test_the_notebook_runs_headless(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "scripts/run_notebooks.py"), str(REPO / "notebooks/params/ci.yaml"),
                           "--results", str(tmp_path), "--only", "05_default_policy"],
                          capture_output=True, text=True, timeout=300,
                          # the kernel imports this checkout's indexer_lib, whatever is installed
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (
                              str(REPO), os.environ.get("PYTHONPATH"))))})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "ci"
    table = pd.read_csv(out / "tables" / "default_policies.csv")
    assert set(table["engine"]) == {"vllm", "trtllm"} and set(table["mode"]) == {"modelled"}
    assert not table.duplicated(["engine", "policy", "deployment"]).any()
    answer = (out / "tables" / "05_default_policy_answer.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in answer] == ["vllm", "trtllm"]
    assert list((out / "figures").glob("05_default_policy__*.png"))
    assert "breaks the figure style" not in (out / "notebooks" / "05_default_policy.ipynb").read_text()

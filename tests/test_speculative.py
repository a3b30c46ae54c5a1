"""Speculative decoding: decodes with drafts, and which of them reach the indexer's prefill path.

A decoding request schedules its sampled token and ``k`` drafts (every draft accepted); a
release's indexer takes a decode in its decode path only up to its own threshold (vLLM
0.13-0.18: one draft; later releases: any).  The simulator is held to vLLM's own scheduler
(0.33, installed in .venv; and the seed's era, 0.15.1, under .venv-engines) on the same workloads.
"""
import json
import subprocess
from pathlib import Path

import pytest

from indexer_lib.cli.main import main
from indexer_lib.engines import get_engine, not_default, release_scheduler
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, simulate, vllm_scheduler
from indexer_lib.workload.compare import step_records
from indexer_lib.workload.simulator import simulate_each_step

ROOT = Path(__file__).resolve().parents[1]
SEED_RELEASE_PYTHON = ROOT / ".venv-engines" / "vllm-0.15.1" / "bin" / "python"

CASES = [  # (workload, config): drafts within and beyond the indexer's decode path
    (ClosedLoopWorkload(8, 3000, 20), SchedulerConfig(max_num_batched_tokens=2048, speculative_tokens=1)),
    (ClosedLoopWorkload(5, 9000, 7, random_range_ratio=0.5, seed=3),
     SchedulerConfig(max_num_batched_tokens=2048, speculative_tokens=2, indexer_decode_threshold=2)),
    (ClosedLoopWorkload(6, 700, 30, num_prompts=15),
     SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=8, speculative_tokens=3)),
]


def test_a_decode_takes_its_token_and_its_drafts_from_the_step_budget():
    # 2 clients, 100-token prompts, 10 outputs, 3 drafts: after the prompts, each decode takes 4
    # tokens a step and keeps them all, so 9 more outputs take 3 steps (4 + 4 + 1 capped at 10)
    w = ClosedLoopWorkload(concurrency=2, isl=100, osl=10, num_prompts=2)
    steps = list(simulate(w, SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8, speculative_tokens=3)))
    assert [s.num_decode for s in steps] == [0, 2, 2, 2]
    assert all(s.batch is None for s in steps[1:])  # 4 new tokens: the newer releases' decode path


def test_drafts_beyond_the_indexer_threshold_send_decodes_through_its_prefill_path():
    w = ClosedLoopWorkload(concurrency=2, isl=100, osl=10, num_prompts=2)
    config = SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8, speculative_tokens=3,
                             indexer_decode_threshold=2)
    rows = [[(r.context_len, r.query_len) for r in s.batch.requests] if s.batch else [] for s in simulate(w, config)]
    # each decode is a row of 4 queries over its whole context
    assert rows == [[(0, 100), (0, 100)], [(100, 4), (100, 4)], [(104, 4), (104, 4)], [(108, 4), (108, 4)]]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_shortcut_over_alike_steps_changes_nothing(case, async_scheduling):
    workload, config = CASES[case]
    config = SchedulerConfig(**{**config.__dict__, "async_scheduling": async_scheduling})
    assert step_records(simulate(workload, config)) == step_records(simulate_each_step(workload, config))


def test_each_release_has_its_own_indexer_decode_threshold():
    # vLLM 0.15.1 (the 0.13-0.18 era): 1 + min(drafts, 1); 0.19.0 on: 1 + drafts
    assert [get_engine("vllm==0.16.0").indexer_decode_threshold(k) for k in (0, 1, 2, 3)] == [1, 2, 2, 2]
    assert [get_engine("vllm==0.19.0").indexer_decode_threshold(k) for k in (0, 1, 2, 3)] == [1, 2, 3, 4]
    assert "indexer.py:214" in get_engine("vllm==0.15.1").sources["indexer_decode_max_drafts"]
    config = release_scheduler("vllm==0.16.0", 64, speculative_tokens=2)
    assert config.decode_threshold == 2
    assert "speculative_tokens=2 (default 0)" in not_default("vllm==0.16.0", config)
    assert not_default("vllm==0.16.0", release_scheduler("vllm==0.16.0", 64)) == []


def test_the_frontier_names_the_drafts_and_finds_the_decodes_in_the_prefill_path(tmp_path, capsys):
    # GLM-5 on vLLM 0.16.0 (its own chunker, no budget), 48 clients at ISL 10,240, 5.56 GiB free:
    # one draft fits; two send every decode through the indexer's prefill path, next to a chunk
    for k, verdict in ((1, "10240"), (2, "OOM")):
        out = tmp_path / f"f{k}.csv"
        assert main(["frontier", "--model", "glm-5", "--engine", "vllm==0.16.0", "--strategy", "engine",
                     "--concurrency", "48", "--isl", "10240", "--free-gib", "5.56",
                     "--speculative-tokens", str(k), "--out", str(out)]) == 0
        text = capsys.readouterr().out
        assert f"speculative_tokens={k} (default 0)" in text
        (row,) = [line for line in text.splitlines() if line.split()[:1] == ["engine"]]
        assert row.split()[-1] == verdict
    import pandas as pd

    row = pd.read_csv(tmp_path / "f2.csv").iloc[0]
    assert row["worst_rows"] == 8192 and row["worst_requests"] > 2
    assert "speculative_tokens=2" in row["not_default"] and "spec2" in row["task"]


def test_bad_drafts_and_kv_caches_are_refused_in_one_line(tmp_path, capsys):
    for flag, value in (("--speculative-tokens", "-1"), ("--kv-cache-tokens", "-5")):
        assert main(["frontier", "--concurrency", "4", "--isl", "4096", flag, value,
                     "--out", str(tmp_path / "x.csv")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and flag.strip("-").replace("-", "_") in err


def test_a_small_kv_cache_with_drafts_on_the_asynchronous_scheduler_points_to_the_synchronous_one(tmp_path, capsys):
    assert main(["frontier", "--model", "glm-5", "--concurrency", "64", "--isl", "10240", "--speculative-tokens", "1",
                 "--kv-cache-tokens", "280000", "--out", str(tmp_path / "x.csv")]) == 2
    assert "--no-async-scheduling" in capsys.readouterr().err


@pytest.fixture
def vllm():
    if not vllm_scheduler.vllm_available():
        pytest.skip("vLLM's scheduler is not installed here (bash scripts/install_vllm.sh)")


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_simulator_schedules_drafts_as_vllm_does(vllm, case):
    workload, config = CASES[case]
    assert step_records(simulate(workload, config)) == step_records(vllm_scheduler.schedule(workload, config))


SEED_SCRIPT = """
import json, sys, warnings
warnings.simplefilter("ignore")
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, vllm_scheduler
from indexer_lib.workload.compare import step_records, worst_shape
out = {"version": vllm_scheduler.vllm_version(), "cases": []}
for w, c in [
    (ClosedLoopWorkload(8, 3000, 20), SchedulerConfig(max_num_batched_tokens=2048, speculative_tokens=1)),
    (ClosedLoopWorkload(5, 9000, 7, random_range_ratio=0.5, seed=3),
     SchedulerConfig(max_num_batched_tokens=2048, speculative_tokens=2, indexer_decode_threshold=2)),
]:
    out["cases"].append(step_records(vllm_scheduler.schedule(w, c)))
# the seed's deployment: 64 clients at ISL 10,240, a KV cache of 279,808 tokens (4,372 blocks)
for k, osl in ((1, 64), (2, 256)):
    w = ClosedLoopWorkload(64, 10240, osl, num_prompts=64)
    c = SchedulerConfig(max_num_seqs=1024, num_kv_blocks=4373, speculative_tokens=k, indexer_decode_threshold=2)
    records = step_records(vllm_scheduler.schedule(w, c))
    out[f"seed{k}"] = list(worst_shape(records)) + [max(len(r[3]) for r in records)]
print(json.dumps(out))
"""


def test_the_seed_releases_own_scheduler_agrees_and_builds_the_reported_shape_with_two_drafts():
    if not SEED_RELEASE_PYTHON.exists():
        pytest.skip("vLLM 0.15.1 is not installed under .venv-engines (bash scripts/install_engines.sh)")
    done = subprocess.run([str(SEED_RELEASE_PYTHON), "-c", SEED_SCRIPT], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["version"] == "0.15.1"
    for (workload, config), records in zip(CASES, out["cases"]):
        assert json.loads(json.dumps(step_records(simulate(workload, config)))) == records
    # one draft: no step holds more than two prompts' chunks; two drafts: every decode joins the
    # prefill path, so a step of 8,192 rows spans about the whole KV cache
    m1, n1, _, most1 = out["seed1"]
    assert most1 == 2 and m1 * n1 * 4 < 0.6 * 2**30
    m2, n2, _, most2 = out["seed2"]
    assert m2 == 8192 and 250_000 < n2 <= 4372 * 64 + 8192 and most2 > 20


def test_the_drafts_table_shows_which_releases_send_decodes_through_the_prefill_path():
    from indexer_lib.study.speculative import drafts_table

    rows = {(r["engine"], r["speculative_tokens"]): r
            for r in drafts_table("glm-5", ["vllm==0.16.0", "vllm==0.19.0"], [1, 2], 48, 10240, 64, 5.56)}
    assert not rows[("vllm==0.16.0", 1)]["oom"] and rows[("vllm==0.16.0", 1)]["worst_requests"] == 2
    assert rows[("vllm==0.16.0", 2)]["oom"] and rows[("vllm==0.16.0", 2)]["worst_rows"] == 8192
    assert rows[("vllm==0.16.0", 2)]["decode_path_takes"] == 2 and rows[("vllm==0.19.0", 2)]["decode_path_takes"] == 3
    assert rows[("vllm==0.19.0", 2)]["worst_requests"] == 2 and not rows[("vllm==0.19.0", 2)]["oom"]
    assert all(r["mode"] == "model" and "speculative_tokens" in r["not_default"] for r in rows.values())


def test_the_seeds_command_from_its_reporters_settings_names_them_and_finds_no_oom(tmp_path, capsys):
    # GLM-5-FP8 on 8 x H200 (TP 8), MTP with one draft, vLLM 0.16's defaults, 48 and 64 clients at
    # ISL 10,240, 5.56 GiB free: no OOM (docs/design.md#the-fields-failures says why and what does)
    out = tmp_path / "seed.csv"
    assert main(["frontier", "--model", "glm-5", "--engine", "vllm==0.16.0", "--gpu", "h200", "--tp", "8",
                 "--speculative-tokens", "1", "--strategy", "engine", "--concurrency", "48,64", "--isl", "10240",
                 "--free-gib", "5.56", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "speculative_tokens=1 (default 0); tp=8" in text
    import pandas as pd

    rows = pd.read_csv(out)
    assert not rows["oom"].any() and (rows["worst_requests"] == 2).all() and (rows["tp"] == 8).all()
    assert main(["frontier", "--concurrency", "4", "--isl", "4096", "--tp", "0", "--out", str(out)]) == 2


def test_the_drives_own_limit_is_not_called_vllms_refusal():
    # speculative decoding on the asynchronous scheduler: vLLM takes it, the drive does not play it
    if not vllm_scheduler.vllm_available():
        pytest.skip("vLLM's scheduler is not installed here (scripts/install_vllm.sh)")
    with pytest.raises(ValueError, match="the drive plays speculative decoding") as e:
        vllm_scheduler.build_scheduler(ClosedLoopWorkload(2, 512, 4),
                                       SchedulerConfig(speculative_tokens=1, async_scheduling=True))
    assert "vLLM refuses" not in str(e.value)

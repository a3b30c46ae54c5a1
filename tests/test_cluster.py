"""Model grids on a local Ray instance (the ``cluster`` extra; scripts/test.sh installs it):
the same rows, journal order and table as a local run, resumable, and one line for a cluster
that cannot be reached.  Without Ray these tests skip, except under CI, where they fail."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from indexer_lib.study import sweep
from indexer_lib.study.frontier import FrontierGrid, frontier_rows

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
GRID = sweep.SweepGrid(concurrency=(4, 32), isl=(2048, 10240, 32768), budget_mb=(64, 512),
                       strategy=("vllm", "causal", "engine"), free_gib=(1.0, 2.63))
VOLATILE = ["date"]  # provenance that differs between any two runs


def test_an_unreachable_cluster_is_one_line(tmp_path):
    """First in the file: no local instance is up yet for 'auto' to find."""
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-m", "indexer_lib", "frontier", "--concurrency", "4",
                           "--isl", "2048", "--ray", "auto", "--out", str(tmp_path / "f.csv")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach a Ray cluster at 'auto'" in lines[0], done.stderr
    assert not (tmp_path / "f.csv").exists()


@pytest.fixture(scope="module")
def ray_local():
    try:
        import ray
    except ImportError:
        if IN_CI:
            pytest.fail('Ray is missing (CI=true: pip install -e ".[cluster]" must have run)')
        pytest.skip('Ray is not installed: pip install -e ".[cluster]"')
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    # Ray's workers cannot import this test module: its functions travel by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


def journal_rows(path):
    """The journal's task records in the order they were written (each line: crc32, then JSON),
    without volatile provenance."""
    out = []
    for line in (path.parent / (path.name + ".journal")).read_text().splitlines()[1:]:  # 1: header
        record = json.loads(line[9:])
        out.append((record["task"], [{k: v for k, v in row.items() if k not in VOLATILE}
                                     for row in record["rows"]]))
    return out


def test_a_model_sweep_on_ray_is_the_local_sweep(ray_local, tmp_path):
    local = sweep.run(GRID, tmp_path / "local.parquet", progress=False)
    on_ray = sweep.run(GRID, tmp_path / "ray.parquet", progress=False, executor="ray")
    assert len(local) == GRID.num_rows == len(on_ray)
    assert local.drop(columns=VOLATILE).equals(on_ray.drop(columns=VOLATILE))
    assert journal_rows(tmp_path / "local.parquet") == journal_rows(tmp_path / "ray.parquet")


def test_a_sweep_on_ray_resumes_without_losing_or_repeating_a_row(ray_local, tmp_path):
    out = tmp_path / "r.parquet"
    seen = []

    def stop_after_three(tid):
        seen.append(tid)
        if len(seen) == 3:
            raise KeyboardInterrupt  # the driver dies with three tasks durable

    with pytest.raises(KeyboardInterrupt):
        sweep.run(GRID, out, progress=False, executor="ray", after_task=stop_after_three)
    resumed = sweep.run(GRID, out, progress=False, executor="ray")
    local = sweep.run(GRID, tmp_path / "local.parquet", progress=False)
    assert resumed.drop(columns=VOLATILE).equals(local.drop(columns=VOLATILE))
    assert not resumed.duplicated(subset=["task", "budget_mb", "free_gib"]).any()


def test_the_frontier_on_ray_is_the_local_frontier(ray_local):
    grid = FrontierGrid(concurrency=(4, 64), isl=(2048, 65536), strategy=("vllm", "n-only"))
    assert list(frontier_rows(grid, executor="ray")) == list(frontier_rows(grid))


def test_ray_runs_model_sweeps_only(tmp_path):
    with pytest.raises(ValueError, match="executor 'ray' runs model sweeps"):
        sweep.run(GRID, tmp_path / "t.parquet", sweep.RunSettings(mode="trace"), executor="ray")
    with pytest.raises(ValueError, match="executor 'dask'"):
        sweep.run(GRID, tmp_path / "t.parquet", executor="dask")
    assert not (tmp_path / "t.parquet").exists()


def die_once_at(x, marker):
    """SIGKILL this Ray worker the first time it meets item 5 (the marker file says it did)."""
    import signal
    from pathlib import Path

    if x == 5 and not Path(marker).exists():
        Path(marker).write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def test_a_killed_worker_loses_and_repeats_nothing(ray_local, tmp_path):
    """Ray runs a task again when its worker dies; the results still come once each, in order."""
    from indexer_lib.study.cluster import ordered_map

    marker = str(tmp_path / "killed")
    out = list(ordered_map(die_once_at, ((x, marker) for x in range(40)), batch=4))
    assert os.path.exists(marker)  # a worker really died
    assert out == [x * x for x in range(40)]


CHILD = """
import sys, time
import ray
from indexer_lib.study import sweep
sys.path.insert(0, {tests!r})
from test_cluster import GRID
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
sweep.run(GRID, {out!r}, progress=False, executor="ray", after_task=lambda tid: time.sleep(0.3))
"""


def test_a_sigkilled_ray_driver_resumes_without_loss(ray_local, tmp_path):
    """The driver (and the Ray instance it started) SIGKILLed mid-sweep; the sweep run again
    finishes with every row once."""
    import signal
    import time
    from pathlib import Path

    out = tmp_path / "k.parquet"
    journal = tmp_path / "k.parquet.journal"
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(tests=str(Path(__file__).parent),
                                                                 out=str(out))],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and child.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 4:  # header + 3 tasks
            break
        time.sleep(0.1)
    assert child.poll() is None, child.stderr.read().decode()[-2000:]
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    resumed = sweep.run(GRID, out, progress=False, executor="ray")
    local = sweep.run(GRID, tmp_path / "local.parquet", progress=False)
    assert resumed.drop(columns=VOLATILE).equals(local.drop(columns=VOLATILE))
    assert len(journal_rows(out)) == len({t for t, _ in journal_rows(out)})  # no task twice

"""Model grids on a local Ray instance (the ``cluster`` extra; scripts/test.sh installs it):
the same rows, journal order and table as a local run, resumable, and one line for a cluster
that cannot be reached.  Without Ray these tests skip, except under CI, where they fail."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import fake_cuda
from fake_cuda import GIB, EmulatedCuda
from indexer_lib.sweep import rows as sweep
from indexer_lib.sweep.executors import Local, Ray, executor_of
from indexer_lib.sweep.grid import Grid

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
GRID = Grid.of(concurrency=(4, 32), isl=(2048, 10240, 32768), budget_mb=(64, 512),
            strategy=("vllm", "causal", "engine"), free_gib=(1.0, 2.63))
VOLATILE = ["date"]  # provenance that differs between any two runs


def test_an_unreachable_cluster_is_one_line(tmp_path):
    """First in the file: no local instance is up yet for 'auto' to find."""
    pytest.importorskip("ray")
    import psutil

    if any("gcs_server" in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])):
        pytest.skip("a Ray cluster runs on this machine (another test run?): 'auto' would join it")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-m", "indexer_lib", "frontier", "--concurrency", "4",
                           "--isl", "2048", "--ray", "auto", "--out", str(tmp_path / "f.csv")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach a Ray cluster at 'auto'" in lines[0], done.stderr
    assert not (tmp_path / "f.csv").exists()


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("form", ["127.0.0.1:{port}", "ray://127.0.0.1:{port}"])
def test_an_address_where_nothing_answers_is_one_line_at_once(tmp_path, form):
    """Ray itself retries such an address for many minutes; the sweep says so in seconds."""
    pytest.importorskip("ray")
    import time

    address = form.format(port=closed_port())
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "indexer_lib", "frontier", "--concurrency", "4",
                           "--isl", "2048", "--ray", address, "--out", str(tmp_path / "f.csv")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and time.monotonic() - start < 60
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot reach a Ray cluster at {address!r}: nothing answers" in lines[0]
    assert not (tmp_path / "f.csv").exists()
    with pytest.raises(ValueError, match="must be 'auto', 'HOST:PORT' or 'ray://HOST:PORT'"):
        sweep.run(GRID, tmp_path / "t.parquet", executor=Ray("head-node"))
    assert not (tmp_path / "t.parquet").exists()


@pytest.fixture(scope="module")
def ray_local():
    try:
        import ray
    except ImportError:
        if IN_CI:
            pytest.fail('Ray is missing (CI=true: pip install -e ".[cluster]" must have run)')
        pytest.skip('Ray is not installed: pip install -e ".[cluster]"')
    # two GPUs in name only: measured points run on the emulated device (tests/fake_cuda.py)
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    # Ray's workers cannot import the test modules: their functions and classes travel by value
    for module in (sys.modules[__name__], fake_cuda):
        ray.cloudpickle.register_pickle_by_value(module)
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
    on_ray = sweep.run(GRID, tmp_path / "ray.parquet", progress=False, executor=Ray())
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
        sweep.run(GRID, out, progress=False, executor=Ray(), after_task=stop_after_three)
    resumed = sweep.run(GRID, out, progress=False, executor=Ray())
    local = sweep.run(GRID, tmp_path / "local.parquet", progress=False)
    assert resumed.drop(columns=VOLATILE).equals(local.drop(columns=VOLATILE))
    assert not resumed.duplicated(subset=["task", "budget_mb", "free_gib"]).any()


def test_the_frontier_on_ray_is_the_local_frontier(ray_local):
    grid = Grid.of(concurrency=(4, 64), isl=(2048, 65536), strategy=("vllm", "n-only"))
    assert list(sweep.model_rows(grid, Ray())) == list(sweep.model_rows(grid, Local()))


def test_the_frontier_command_on_ray_resumes_into_the_local_table(ray_local, tmp_path, monkeypatch, capsys):
    """``frontier --ray``: Ctrl-C keeps the tasks the driver journalled, the rerun computes the rest,
    and the table is the local one byte for byte."""
    from indexer_lib.cli import main
    from indexer_lib.sweep.store import ResultStore

    args = ["frontier", "--concurrency", "4,64", "--isl", "2048,65536", "--strategy", "vllm,n-only"]
    assert main([*args, "--out", str(tmp_path / "local.csv")]) == 0
    append, appended = ResultStore.append, []

    def third_is_ctrl_c(store, task, rows):
        appended.append(task)
        if len(appended) == 3:
            raise KeyboardInterrupt
        append(store, task, rows)

    monkeypatch.setattr(ResultStore, "append", third_is_ctrl_c)
    out = tmp_path / "ray.csv"
    capsys.readouterr()
    assert main([*args, "--ray", "--out", str(out)]) == 130
    assert f"interrupted: 2 of 8 tasks kept in {out}.journal" in capsys.readouterr().err
    monkeypatch.undo()
    assert main([*args, "--ray", "--out", str(out)]) == 0
    assert f"2 tasks read from {out}.journal, 6 computed" in capsys.readouterr().out
    assert out.read_bytes() == (tmp_path / "local.csv").read_bytes()


def test_ray_runs_model_and_measure_sweeps(tmp_path):
    with pytest.raises(ValueError, match="mode 'trace' runs locally"):
        sweep.run(GRID, tmp_path / "t.parquet", sweep.RunSettings(mode="trace"), executor=Ray())
    with pytest.raises(ValueError, match="executor 'dask': must be one of local, ray"):
        executor_of("dask")
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
    from indexer_lib.sweep.cluster import ordered_map

    marker = str(tmp_path / "killed")
    out = list(ordered_map(die_once_at, ((x, marker) for x in range(40)), batch=4))
    assert os.path.exists(marker)  # a worker really died
    assert out == [x * x for x in range(40)]


CHILD = """
import sys, time
import ray
from indexer_lib import sweep
from indexer_lib.sweep.executors import Ray
sys.path.insert(0, {tests!r})
from test_cluster import GRID
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
sweep.run(GRID, {out!r}, progress=False, executor=Ray(), after_task=lambda tid: time.sleep(0.3))
"""


def test_a_sigkilled_ray_driver_resumes_without_loss(ray_local, tmp_path):
    """The driver (and the Ray instance it started) SIGKILLed mid-sweep; the sweep run again
    finishes with every row once."""
    import signal
    import time
    from pathlib import Path

    out = tmp_path / "k.parquet"
    journal = tmp_path / "k.parquet.journal"
    error = ""
    for _ in range(3):  # Ray gives its raylet 30 s to start: on a loaded machine, start again
        child = subprocess.Popen([sys.executable, "-c", CHILD.format(tests=str(Path(__file__).parent),
                                                                     out=str(out))],
                                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while time.time() < deadline and child.poll() is None:
            if journal.exists() and len(journal.read_text().splitlines()) >= 4:  # header + 3 tasks
                break
            time.sleep(0.1)
        if child.poll() is None or journal.exists():
            break
        error = child.stderr.read().decode()
        if "timed out during startup" not in error:
            break
    assert child.poll() is None, (error or child.stderr.read().decode())[-2000:]
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    resumed = sweep.run(GRID, out, progress=False, executor=Ray())
    local = sweep.run(GRID, tmp_path / "local.parquet", progress=False)
    assert resumed.drop(columns=VOLATILE).equals(local.drop(columns=VOLATILE))
    assert len(journal_rows(out)) == len({t for t, _ in journal_rows(out)})  # no task twice


# c64 x 10K n-only runs out of 8 GiB (10 GiB of logits under a 256-token long_prefill_token_threshold,
# which vLLM does not default to), the other three fit. Ray gives each
# GPU task a fresh worker (its default for GPUs: no CUDA state carried over), a few seconds each
MEASURE_GRID = Grid.of(concurrency=(1, 64), isl=(10240,), budget_mb=(512,),
                    strategy=("n-only", "vllm"), free_gib=(2.63,), engine=("vllm==0.18.1",),
                    long_prefill_token_threshold=256)
MEASURE = sweep.RunSettings(mode="measure", repeats=1)
SAME_ANYWHERE = ["time_ms", "date", "device", "node", "gpu_index", "gpu_driver"]  # where and how fast: not what


def emulated_gpu(capacity_gib=8, die_at=None, counter=None):
    """The device layer a Ray worker builds for a point; ``die_at``: the SIGKILL of the worker
    that builds the die_at-th one (counted in files under ``counter``)."""
    import signal
    from pathlib import Path

    if die_at is not None:
        n = 1
        while True:  # this worker's number: the first file it creates (O_EXCL: one winner each)
            try:
                os.close(os.open(Path(counter) / str(n), os.O_CREAT | os.O_EXCL))
                break
            except FileExistsError:
                n += 1
        if n == die_at:
            os.kill(os.getpid(), signal.SIGKILL)
    return EmulatedCuda(capacity_gib * GIB)


def test_a_measure_sweep_on_ray_runs_a_point_per_gpu_and_records_where(ray_local, tmp_path):
    import functools

    local = sweep.run(MEASURE_GRID, tmp_path / "local.parquet", MEASURE, progress=False,
                      device=EmulatedCuda(8 * GIB))
    on_ray = sweep.run(MEASURE_GRID, tmp_path / "ray.parquet", MEASURE, progress=False,
                       device=functools.partial(emulated_gpu, 8), executor=Ray())
    assert len(on_ray) == 4
    assert local.drop(columns=[c for c in SAME_ANYWHERE if c in local]).equals(
        on_ray.drop(columns=SAME_ANYWHERE))
    oom = on_ray[on_ray["oom"].astype(bool)]  # the OOM is data: recorded, and the sweep went on
    assert list(zip(oom["concurrency"], oom["isl"], oom["strategy"])) == [(64, 10240, "n-only")]
    assert on_ray["node"].notna().all() and set(on_ray["gpu_index"]) <= {"0", "1"}
    assert on_ray["gpu_driver"].isna().all()  # the GPUs are fake: no nvidia-smi answers for them
    assert (on_ray["device"] == EmulatedCuda(GIB).name).all()


def test_a_point_whose_worker_dies_is_a_row_and_the_sweep_goes_on(ray_local, tmp_path):
    import functools

    counter = tmp_path / "built"
    counter.mkdir()
    frame = sweep.run(MEASURE_GRID, tmp_path / "m.parquet", MEASURE, progress=False,
                      device=functools.partial(emulated_gpu, 8, 1, str(counter)), executor=Ray())
    assert len(frame) == 4
    died = frame[frame["error"].fillna("").str.startswith("the Ray worker died")]
    assert len(died) == 1 and died["oom"].isna().all() and died["peak_bytes"].isna().all()
    rest = frame.drop(died.index)  # measured, or out of memory: each point once
    assert (rest["peak_bytes"].notna() | rest["oom"].astype(bool)).all()
    assert not frame.duplicated(subset=["task"]).any()


def test_a_measure_sweep_needs_a_gpu_on_the_cluster(ray_local, tmp_path, monkeypatch):
    from indexer_lib.sweep import cluster

    monkeypatch.setattr(cluster, "gpu_count", lambda address=None: 0)
    with pytest.raises(ValueError, match="has no GPU: a measure sweep runs each point on one GPU"):
        sweep.run(MEASURE_GRID, tmp_path / "m.parquet", MEASURE, progress=False, executor=Ray())
    assert not (tmp_path / "m.parquet").exists()


# notebook 01 on a small grid: what its frontier table holds, on Ray and locally
NOTEBOOK_01 = {"concurrency": [1, 16], "isl": [2048, 10240], "budget_mb": [256, 512],
               "strategies": ["engine", "vllm"], "engines": ["vllm==0.33.0"],
               "long_concurrency": [1], "long_isl": [65536], "long_budget_mb": [512],
               "dashboard": False}


def test_notebook_01_with_executor_ray_writes_the_local_table(ray_local, tmp_path):
    """``executor: ray`` in the YAML: the headless notebook sends its frontier grid to the
    cluster (here the test's local instance, by its address) and writes the table a local
    run writes."""
    import pandas as pd
    import yaml

    runner = os.path.join(os.path.dirname(__file__), "..", "scripts", "run_notebooks.py")
    tables = {}
    for executor in ("local", "ray"):
        block = {**NOTEBOOK_01, "executor": executor}
        if executor == "ray":
            block["ray_address"] = ray_local.get_runtime_context().gcs_address
        spec = {"run_name": executor, "common": {"model": "glm-5", "free_gib": 2.63},
                "notebooks": {"01_oom_frontier": block}}
        path = tmp_path / f"{executor}.yaml"
        path.write_text(yaml.safe_dump(spec))
        done = subprocess.run([sys.executable, runner, str(path), "--results", str(tmp_path),
                               "--only", "01_oom_frontier"], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        tables[executor] = pd.read_parquet(tmp_path / executor / "tables" / "frontier-model.parquet")
    local, on_ray = (tables[e].drop(columns=VOLATILE) for e in ("local", "ray"))
    assert len(local) == 2 * 2 * 2 * 2 and local.equals(on_ray)
    # the parameter reaches the sweep: a cluster that is not there stops the notebook there
    spec["run_name"], spec["notebooks"]["01_oom_frontier"]["ray_address"] = "gone", f"127.0.0.1:{closed_port()}"
    path.write_text(yaml.safe_dump(spec))
    done = subprocess.run([sys.executable, runner, str(path), "--results", str(tmp_path),
                           "--only", "01_oom_frontier"], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "cannot reach a Ray cluster at '127.0.0.1:" in done.stdout + done.stderr

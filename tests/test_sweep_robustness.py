"""Sweeps under abuse: SIGKILL at random points and restarts, two writers at once,
result files from another schema, and a 100,000-point grid in bounded memory."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from indexer_lib.sweep import rows as sweep
from indexer_lib.sweep.grid import Grid
from indexer_lib.sweep.store import PARQUET_KEY, SCHEMA_VERSION, StoreError, _line, _parse

SMALL = dict(concurrency=(1, 8, 32), isl=(2048, 10240), budget_mb=(128, 512),
             strategy=("n-only", "vllm", "causal"))
TASKS = 3 * 2 * 3
KEY = ["task", "concurrency", "isl", "strategy", "budget_mb", "free_gib"]
RESULTS = ["peak_bytes", "peak_transient_bytes", "worst_chunks", "total_chunks", "oom",
           "model_time_ms"]

CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from indexer_lib import sweep
    from indexer_lib.sweep.grid import Grid
    from indexer_lib.sweep.store import StoreError
    out, go, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
    grid = Grid.of(concurrency=(1, 8, 32), isl=(2048, 10240), budget_mb=(128, 512),
                strategy=("n-only", "vllm", "causal"))
    print("ready", flush=True)
    while go != "-" and not Path(go).exists():
        time.sleep(0.0005)
    try:
        sweep.run(grid, out, progress=False, after_task=lambda t: time.sleep(pause))
    except StoreError as e:
        print(f"refused: {e}", file=sys.stderr)
        sys.exit(3)
""")


def comparable(frame):
    return frame[KEY + RESULTS].sort_values(KEY).reset_index(drop=True)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("fresh") / "fresh.parquet"
    return comparable(sweep.run(Grid.of(**SMALL), out, progress=False))


def journal_tasks(out: Path) -> list[str]:
    journal = out.with_name(out.name + ".journal")
    # complete lines only: the child may be half-way through writing the last one
    lines = journal.read_bytes().split(b"\n")[1:-1] if journal.exists() else []
    return [_parse(line + b"\n")["task"] for line in lines]


def start_child(script: Path, out: Path, go="-", pause=0.03):
    proc = subprocess.Popen([sys.executable, str(script), str(out), str(go), str(pause)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_random_sigkills_and_restarts_end_with_the_rows_of_an_uninterrupted_run(
        tmp_path, uninterrupted):
    seed = int(os.environ.get("INDEXER_LAB_KILL_SEED", time.time_ns() % 2**31))
    rng = random.Random(seed)
    print(f"kill seed {seed} (INDEXER_LAB_KILL_SEED={seed} repeats this run)")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = tmp_path / "s.parquet"
    # kill once the journal holds k tasks, k random and rising, plus a random few ms (a
    # kill can land inside a write); the last target is "all tasks": during compaction
    targets = sorted(rng.sample(range(1, TASKS), 4)) + [TASKS]
    history = []
    for target in targets:
        proc = start_child(script, out)
        deadline = time.monotonic() + 60
        while len(journal_tasks(out)) < target and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.03))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        history.append((target, len(journal_tasks(out)), proc.returncode))
    print("kill rounds (target, tasks in journal, exit):", history)
    assert sum(rc == -signal.SIGKILL for *_, rc in history) >= 4
    assert any(0 < n < TASKS for _, n, _ in history)  # at least one kill mid-sweep

    redone = []
    final = sweep.run(Grid.of(**SMALL), out, progress=False, after_task=redone.append)
    assert len(redone) == TASKS - history[-1][1]  # what the journal held was not redone
    pd.testing.assert_frame_equal(comparable(final), uninterrupted)
    pd.testing.assert_frame_equal(comparable(pd.read_parquet(out)), uninterrupted)
    tasks = journal_tasks(out)
    assert len(tasks) == len(set(tasks)) == TASKS
    assert not out.with_name(out.name + ".tmp").exists()


def test_two_sweeps_started_together_on_one_file_never_corrupt_it(tmp_path, uninterrupted):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    refusals = 0
    for round_ in range(3):
        out, go = tmp_path / f"s{round_}.parquet", tmp_path / f"go{round_}"
        procs = [start_child(script, out, go, pause=0.02) for _ in range(2)]
        go.touch()  # both start at once
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        assert any(rc == 0 for rc, _ in results), results
        for rc, err in results:
            if rc != 0:  # the loser is refused with one clear line, nothing else
                assert rc == 3 and "another sweep is writing it now" in err, err
                refusals += 1
        tasks = journal_tasks(out)
        assert len(tasks) == len(set(tasks)) == TASKS
        pd.testing.assert_frame_equal(comparable(pd.read_parquet(out)), uninterrupted)
        again = []  # the refused one, rerun, finds everything done
        sweep.run(Grid.of(**SMALL), out, progress=False, after_task=again.append)
        assert again == []
    assert refusals >= 1, "the two sweeps never overlapped"


def _rewrite_header(journal: Path, schema) -> None:
    lines = journal.read_bytes().split(b"\n", 1)
    header = _parse(lines[0] + b"\n")
    header["schema"] = schema
    journal.write_bytes(_line(header) + lines[1])


def _set_table_schema(table: Path, schema) -> None:
    t = pq.read_table(table)
    meta = dict(t.schema.metadata)
    if schema is None:
        del meta[PARQUET_KEY]
    else:
        header = json.loads(meta[PARQUET_KEY])
        header["schema"] = schema
        meta[PARQUET_KEY] = json.dumps(header).encode()
    pq.write_table(t.replace_schema_metadata(meta), table)


# the schema versions around this one: a file of the previous version is the likely older one
@pytest.mark.parametrize("where, schema, word", [
    ("journal", 0, "older"), ("journal", SCHEMA_VERSION - 1, "older"),
    ("journal", SCHEMA_VERSION + 1, "newer"), ("table", 0, "older"), ("table", None, "older"),
    ("table", 7, "newer")])
def test_a_result_file_of_another_schema_is_reported_never_overwritten(tmp_path, where, schema,
                                                                        word):
    grid = Grid.of(**SMALL)
    out = tmp_path / "s.parquet"
    journal = out.with_name(out.name + ".journal")
    sweep.run(grid, out, progress=False)
    if where == "journal":
        _rewrite_header(journal, schema)
        out.unlink()
    else:
        _set_table_schema(out, schema)
        journal.unlink()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(StoreError, match=rf"is from an? {word} indexer-lab \(result schema "
                                         rf"{schema if schema is not None else 0}, this version"):
        sweep.run(grid, out, progress=False)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    after.pop(out.name + ".lock", None)
    before.pop(out.name + ".lock", None)
    assert after == before  # nothing rewritten, nothing added


def test_a_rerun_after_an_upgrade_sets_the_older_tables_aside(tmp_path):
    """The main job reruns in the same folder: an older schema's table and journal are moved
    into older-schema-<N>/ (kept, byte for byte), this schema's and foreign files stay."""
    from indexer_lib.sweep.store import set_aside_older, stored_schema

    grid = Grid.of(**SMALL)
    old, new = tmp_path / "old.parquet", tmp_path / "new.parquet"
    sweep.run(grid, old, progress=False)
    sweep.run(grid, new, progress=False)
    journal = old.with_name(old.name + ".journal")
    _set_table_schema(old, SCHEMA_VERSION - 1)
    _rewrite_header(journal, SCHEMA_VERSION - 1)
    (tmp_path / "notes.parquet").write_bytes(b"not ours")
    kept = {p.name: p.read_bytes() for p in (old, journal)}
    assert stored_schema(old) == stored_schema(journal) == SCHEMA_VERSION - 1
    assert stored_schema(new) == SCHEMA_VERSION and stored_schema(tmp_path / "notes.parquet") is None
    moved = set_aside_older(tmp_path)
    aside = tmp_path / f"older-schema-{SCHEMA_VERSION - 1}"
    assert moved == [aside / old.name, aside / journal.name]
    assert {p.name: p.read_bytes() for p in moved} == kept
    assert new.exists() and (tmp_path / "notes.parquet").exists() and not old.exists()
    assert len(sweep.run(grid, old, progress=False)) == grid.num_rows  # starts over


def test_a_finished_sweeps_journal_and_lock_are_tidied_and_rebuilt(tmp_path):
    """The headless runner leaves tables only: a finished table's journal and lock go; the next
    run on it rebuilds the journal from the table and redoes nothing; an unfinished journal stays."""
    from indexer_lib.sweep.store import tidy_finished

    grid = Grid.of(**SMALL)
    out = tmp_path / "s.parquet"
    journal, lock = out.with_name(out.name + ".journal"), out.with_name(out.name + ".lock")
    first = sweep.run(grid, out, progress=False)
    lock.touch()  # as a sweep leaves it
    assert set(tidy_finished(tmp_path)) == {journal, lock} and out.exists()
    assert not journal.exists() and not lock.exists()
    again = sweep.run(grid, out, progress=False)  # the journal rebuilt from the table
    assert journal.exists() and len(again) == len(first)
    pd.testing.assert_frame_equal(again.drop(columns=["date"]), first.drop(columns=["date"]), check_like=True)
    with open(journal, "ab") as f:  # a task only the journal holds: it is the only copy
        f.write(_line({"task": "not in the table", "rows": []}))
    assert tidy_finished(tmp_path) == [] and journal.exists()


BIG = textwrap.dedent("""
    import sys, time
    from indexer_lib import sweep
    from indexer_lib.sweep.grid import Grid
    def status_mib(field):  # this process's own memory (ru_maxrss would count a forking
        # parent's pages: Linux carries the peak across fork and exec)
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    # 50 concurrencies x 50 ISLs (16..800 tokens, OSL 1) x 2 strategies x 4 budgets x 5 free
    # GiB = 100,000 points (rows) in 5,000 tasks
    grid = Grid.of(concurrency=tuple(range(1, 51)), isl=tuple(range(16, 816, 16)),
                osl=(1,), budget_mb=(64, 128, 256, 512), strategy=("vllm", "causal"),
                free_gib=(1, 2, 2.63, 4, 8))
    assert grid.num_rows == 100_000
    # a one-task sweep first: the baseline includes every module a sweep loads (torch...)
    sweep.run(Grid.of(concurrency=(1,), isl=(16,), osl=(1,), budget_mb=(64,), strategy=("vllm",)),
              sys.argv[1] + ".warm.parquet", progress=False)
    base = status_mib("VmRSS")
    start = time.perf_counter()
    path = sweep.run(grid, sys.argv[1], as_frame=False)
    seconds = time.perf_counter() - start
    peak = status_mib("VmHWM")
    print(f"RESULT {seconds:.1f} {base:.1f} {peak:.1f}")
""")


def test_a_100k_point_grid_runs_in_bounded_memory_with_a_progress_bar(tmp_path):
    script = tmp_path / "big.py"
    script.write_text(BIG)
    out = tmp_path / "big.parquet"
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seconds, base, peak = map(float, proc.stdout.split("RESULT")[1].split())
    growth = peak - base
    print(f"100,000 points in {seconds:.1f} s; RSS {base:.0f} MiB before, peak {peak:.0f} MiB "
          f"(+{growth:.0f} MiB); journal {out.with_name(out.name + '.journal').stat().st_size / 2**20:.0f} MiB")
    # the progress bar ran to the end (tqdm writes to stderr)
    assert "sweep (model): 100%" in proc.stderr and "5000/5000" in proc.stderr
    meta = pq.ParquetFile(out).metadata
    assert meta.num_rows == 100_000 and meta.num_row_groups > 1  # streamed in row groups
    ids = pq.read_table(out, columns=["task", "budget_mb", "free_gib"]).to_pandas()
    assert not ids.duplicated().any() and ids["task"].nunique() == 5000
    # 100,000 rows held as Python dicts take ~240 MiB (the store before it streamed);
    # streamed, the sweep's memory does not grow with the grid
    assert growth < 120, f"peak RSS grew by {growth:.0f} MiB"
    first = sweep.to_frame(list(sweep.model_rows(Grid.of(
        concurrency=(1,), isl=(16,), osl=(1,), budget_mb=(64, 128, 256, 512),
        strategy=("vllm",), free_gib=(1, 2, 2.63, 4, 8)))))
    head = pq.ParquetFile(out).read_row_group(0).to_pandas().head(len(first))
    pd.testing.assert_series_equal(head["peak_bytes"], first["peak_bytes"], check_names=False)

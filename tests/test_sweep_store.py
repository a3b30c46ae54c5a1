"""The sweep's result store: durable, resumable, never overwrites what is not its own."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from indexer_lib.sweep import rows as sweep
from indexer_lib.sweep.grid import MODES, Grid
from indexer_lib.sweep.store import ResultStore, StoreError

SMALL = dict(concurrency=(1, 8, 32), isl=(2048, 10240), budget_mb=(128, 512),
             strategy=("n-only", "vllm", "causal"))
KEY = ["task", "concurrency", "isl", "strategy", "budget_mb", "free_gib"]
RESULT_COLUMNS = ["peak_bytes", "peak_transient_bytes", "worst_chunks", "total_chunks", "oom"]


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[KEY + RESULT_COLUMNS].sort_values(KEY).reset_index(drop=True)


def test_model_rows_match_the_frontier(tmp_path):
    grid = Grid.of(**SMALL)
    frame = sweep.run(grid, tmp_path / "s.parquet", progress=False)
    # the frontier's rows: computed in memory, without the store
    ref = pd.DataFrame(list(sweep.model_rows(grid)))
    merged = frame.merge(ref, on=["concurrency", "isl", "strategy", "budget_mb"], suffixes=("", "_f"))
    # n-only reads no budget: one row per workload (budget_mb NaN), the others one per budget
    assert len(merged) == len(frame) == grid.num_rows == 3 * 2 * (1 + 2 + 2)
    assert frame[frame["strategy"] == "n-only"]["budget_mb"].isna().all()
    for col in ["peak_bytes", "peak_transient_bytes", "worst_chunks", "total_chunks", "oom"]:
        assert (merged[col].astype(object) == merged[f"{col}_f"].astype(object)).all(), col
    assert set(frame["mode"]) == {"model"}
    for col in ("git_sha", "versions", "date", "device"):
        assert frame[col].notna().all()


def test_restart_skips_done_tasks_and_changes_nothing(tmp_path):
    out = tmp_path / "s.parquet"
    grid = Grid.of(**SMALL)
    first = sweep.run(grid, out, progress=False)
    calls = []
    second = sweep.run(grid, out, progress=False, after_task=calls.append)
    assert calls == []  # nothing recomputed
    pd.testing.assert_frame_equal(comparable(first), comparable(second))


SWEEP_SCRIPT = textwrap.dedent("""
    import sys, time
    from indexer_lib import sweep
    from indexer_lib.sweep.grid import Grid
    grid = Grid.of(concurrency=(1, 8, 32), isl=(2048, 10240), budget_mb=(128, 512),
                strategy=("n-only", "vllm", "causal"))
    # slow each task down so the parent can kill the sweep mid-way
    sweep.run(grid, sys.argv[1], progress=False, after_task=lambda t: time.sleep(0.05))
""")


def journal_records(out: Path) -> int:
    journal = out.with_name(out.name + ".journal")
    return journal.read_bytes().count(b"\n") - 1 if journal.exists() else 0


@pytest.mark.parametrize("kill_after", [2, 7, 13])
def test_sigkill_mid_sweep_loses_and_duplicates_nothing(tmp_path, kill_after):
    out = tmp_path / "s.parquet"
    script = tmp_path / "run.py"
    script.write_text(SWEEP_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(out)])
    deadline = time.monotonic() + 60
    while journal_records(out) < kill_after and proc.poll() is None:
        assert time.monotonic() < deadline, "the sweep never got going"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = journal_records(out)
    assert proc.returncode == -signal.SIGKILL and done_before >= kill_after
    assert not out.exists()  # killed before the end: only the journal holds the work

    grid = Grid.of(**SMALL)
    recomputed = []
    resumed = sweep.run(grid, out, progress=False, after_task=recomputed.append)
    total_tasks = 3 * 2 * 3
    assert len(recomputed) == total_tasks - done_before  # finished tasks were not redone
    fresh = sweep.run(grid, tmp_path / "fresh.parquet", progress=False)
    pd.testing.assert_frame_equal(comparable(resumed), comparable(fresh))
    assert not resumed.duplicated(KEY).any()
    assert journal_records(out) == total_tasks
    # and the compacted table says the same
    pd.testing.assert_frame_equal(comparable(pd.read_parquet(out)), comparable(fresh))


def test_torn_last_line_is_cut_and_redone(tmp_path):
    out = tmp_path / "s.parquet"
    grid = Grid.of(**SMALL)
    full = sweep.run(grid, out, progress=False)
    out.unlink()
    journal = out.with_name(out.name + ".journal")
    data = journal.read_bytes()
    journal.write_bytes(data[:-40])  # a kill in the middle of the last write
    redone = []
    again = sweep.run(grid, out, progress=False, after_task=redone.append)
    assert len(redone) == 1
    pd.testing.assert_frame_equal(comparable(again), comparable(full))


def test_damaged_middle_line_is_reported_and_kept(tmp_path):
    out = tmp_path / "s.parquet"
    grid = Grid.of(**SMALL)
    sweep.run(grid, out, progress=False)
    out.unlink()
    journal = out.with_name(out.name + ".journal")
    lines = journal.read_bytes().split(b"\n")
    lines[3] = lines[3][:20] + b"X" + lines[3][21:]
    damaged = b"\n".join(lines)
    journal.write_bytes(damaged)
    with pytest.raises(StoreError, match="line 4 is damaged"):
        sweep.run(grid, out, progress=False)
    assert journal.read_bytes() == damaged


def test_foreign_and_corrupt_files_are_reported_never_overwritten(tmp_path):
    grid = Grid.of(**SMALL)
    foreign = tmp_path / "foreign.parquet"
    pd.DataFrame({"a": [1, 2]}).to_parquet(foreign)
    before = foreign.read_bytes()
    with pytest.raises(StoreError, match="not an indexer-lab sweep result"):
        sweep.run(grid, foreign, progress=False)
    assert foreign.read_bytes() == before

    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(StoreError, match="not a readable Parquet file"):
        sweep.run(grid, corrupt, progress=False)
    assert corrupt.read_bytes() == b"PAR1 this is not parquet"

    journal = tmp_path / "j.parquet.journal"
    journal.write_bytes(b"hello\n")
    with pytest.raises(StoreError, match="does not start with an indexer-lab sweep header"):
        sweep.run(grid, tmp_path / "j.parquet", progress=False)
    assert journal.read_bytes() == b"hello\n"


def test_a_different_grid_is_refused(tmp_path):
    out = tmp_path / "s.parquet"
    sweep.run(Grid.of(**SMALL), out, progress=False)
    before = out.read_bytes()
    other = Grid.of(**{**SMALL, "isl": (2048, 4096)})
    with pytest.raises(StoreError, match=r"different sweep \(isl: \[2048, 10240\] there, \[2048, 4096\] now\)"):
        sweep.run(other, out, progress=False)
    assert out.read_bytes() == before


def test_a_second_writer_is_refused(tmp_path):
    header = {"grid_hash": "x", "spec": {}}
    with ResultStore(tmp_path / "s.parquet", header):
        with pytest.raises(StoreError, match="another sweep is writing it now"):
            with ResultStore(tmp_path / "s.parquet", header):
                pass


def test_a_finished_table_without_its_journal_resumes(tmp_path):
    out = tmp_path / "s.parquet"
    grid = Grid.of(**SMALL)
    first = sweep.run(grid, out, progress=False)
    out.with_name(out.name + ".journal").unlink()
    calls = []
    second = sweep.run(grid, out, progress=False, after_task=calls.append)
    assert calls == []
    pd.testing.assert_frame_equal(comparable(first), comparable(second))


def test_trace_and_measure_modes_fail_clearly_or_run(tmp_path):
    grid = Grid.of(concurrency=(1,), isl=(2048,), budget_mb=(64,), strategy=("vllm",))
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="measure mode needs a CUDA GPU"):
            sweep.run(grid, tmp_path / "m.parquet", sweep.RunSettings(mode="measure"),
                      progress=False)
        assert not (tmp_path / "m.parquet.journal").exists()  # refused before any work
    frame = sweep.run(grid, tmp_path / "t.parquet", sweep.RunSettings(mode="trace"),
                      progress=False)
    assert list(frame["mode"]) == ["trace"]
    # the executor allocates at least the modelled logits + metadata of its worst chunk
    assert frame["peak_transient_bytes"].iloc[0] >= frame["model_peak_transient_bytes"].iloc[0] * 0.9


def test_a_strategy_without_a_budget_is_planned_traced_and_measured_once():
    grid = Grid.of(concurrency=(8,), isl=(2048,), budget_mb=(128, 512, 2048), strategy=("n-only", "vllm"),
                free_gib=(2.63, 20.0))
    per_mode = {mode: [(t.strategy, t.budgets_mb, t.frees_gib) for t in grid.tasks(mode)] for mode in MODES}
    # (strategy, budgets, free GiBs) per task: n-only once, with no budget; vllm once per budget
    assert per_mode["model"] == [("n-only", (None,), (2.63, 20.0)), ("vllm", (128, 512, 2048), (2.63, 20.0))]
    assert [t for t in per_mode["trace"] if t[0] == "n-only"] == [("n-only", (None,), (2.63, 20.0))]
    assert [t for t in per_mode["measure"] if t[0] == "n-only"] == [("n-only", (None,), (2.63,)),
                                                                    ("n-only", (None,), (20.0,))]
    assert len(per_mode["measure"]) == 2 + 3 * 2
    ids = [t.id for t in grid.tasks("measure") if "|n-only" in t.id]
    assert ids and not any("budget" in i for i in ids)
    frame = sweep.to_frame(list(sweep.model_rows(grid)))
    assert len(frame) == grid.num_rows == 2 + 3 * 2
    # the frontier grid of issue 15's baseline (ISL to 32K): 48 n-only rows instead of 288 (one per
    # budget before); the default grid now reaches GLM-5's max_model_len: 72 workloads
    grid = Grid.of(isl=(2048, 4096, 8192, 10240, 16384, 32768))
    assert grid.num_rows == 48 * (1 + 3 * 6) == 912
    grid = Grid.of()
    assert grid.isl[-3:] == (65536, 131072, 202752) and grid.num_rows == 72 * (1 + 3 * 6)


def test_a_sweep_journalled_before_a_setting_existed_resumes_where_it_is_at_its_default(tmp_path):
    """A store whose spec lacks a setting added since (its header rewritten without it, as an older
    indexer-lab wrote it) holds the same sweep while the setting is at its default: it resumes
    and plans nothing again; the setting at another value is a different sweep, named."""
    from indexer_lib.sweep.store import _line, _parse

    out = tmp_path / "s.parquet"
    grid = Grid.of(**SMALL)
    first = sweep.run(grid, out, progress=False)
    out.unlink()  # the journal alone: its header is the one read
    journal = out.with_name(out.name + ".journal")
    lines = journal.read_bytes().splitlines(keepends=True)
    header = _parse(lines[0])
    for name in ("kv_cache_dtype", "mem_fraction_static", "indexer_tp_shard_min_rows"):
        del header["spec"][name]
    header.pop("defaults")
    header["grid_hash"] = sweep.spec_hash(header["spec"])
    journal.write_bytes(_line(header) + b"".join(lines[1:]))
    calls = []
    again = sweep.run(grid, out, progress=False, after_task=calls.append)
    assert calls == []
    pd.testing.assert_frame_equal(comparable(first), comparable(again))
    out.unlink()
    with pytest.raises(StoreError, match=r"different sweep \(kv_cache_dtype: None there, 'fp8' now, "):
        sweep.run(Grid.of(**SMALL, kv_cache_dtype="fp8", kv_cache_tokens="auto", tp=8), out, progress=False)

"""``indexer-lab frontier`` loses nothing: a bad --out is refused before any work, Ctrl-C keeps the
finished tasks in the journal and the same command resumes them, and a file at --out that is not
this grid's table is refused and left as it is (``--replace`` replaces it)."""
from __future__ import annotations

import io
import os
from pathlib import Path

import pandas as pd
import pytest

from indexer_lib.cli import main
from indexer_lib.cli.main import build_parser
from indexer_lib.cli.options import grid_from_args
from indexer_lib.runmode import HEADLESS_ENV
from indexer_lib.sweep import results
from indexer_lib.sweep import rows as sweep_rows
from indexer_lib.sweep.grid import Grid

# a small grid: four tasks (two concurrencies x two ISLs, one strategy), seconds to model
SMALL = ["frontier", "--model", "glm-5", "--concurrency", "1,16", "--isl", "2048,10240", "--budget-mb", "512",
         "--strategy", "vllm"]
TASKS = 4


def small_grid() -> Grid:
    return grid_from_args(build_parser().parse_args([*SMALL, "--out", "x.csv"]))


def frontier(capsys, out, *more):
    code = main([*SMALL, "--out", str(out), *more])
    stdout, stderr = capsys.readouterr()
    return code, stdout, stderr


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def no_leftovers(folder: Path) -> None:
    left = [p.name for p in folder.rglob("*") if p.name.endswith((".tmp", ".lock", ".probe"))]
    assert left == [], left


@pytest.fixture
def computed(monkeypatch):
    """The ids of the tasks modelled (in this process), in order."""
    ids = []
    real = sweep_rows.model_task

    def counting(grid, task, time_model, prov):
        ids.append(task.id)
        return real(grid, task, time_model, prov)

    monkeypatch.setattr(sweep_rows, "model_task", counting)
    return ids


def interrupt_at(monkeypatch, k: int) -> None:
    """Ctrl-C as the k-th task (counted from 1) starts, in this process."""
    real = sweep_rows.model_task
    seen = []

    def interrupting(grid, task, time_model, prov):
        seen.append(task.id)
        if len(seen) == k:
            raise KeyboardInterrupt
        return real(grid, task, time_model, prov)

    monkeypatch.setattr(sweep_rows, "model_task", interrupting)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The small grid's table from one uninterrupted run."""
    out = tmp_path_factory.mktemp("reference") / "frontier.csv"
    assert main([*SMALL, "--out", str(out)]) == 0
    return out


# -- a bad --out -----------------------------------------------------------------------------

def bad_paths(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    (tmp_path / "a-folder.csv").mkdir()
    (tmp_path / "notes.txt").write_text("a regular file")
    return {
        "a folder": (tmp_path / "a-folder.csv", "is a folder"),
        "under a file": (tmp_path / "notes.txt" / "x.csv", "is not a folder"),
        "deeper under a file": (tmp_path / "notes.txt" / "sub" / "x.parquet", "is not a folder"),
        "unknown extension": (tmp_path / "x.txt", "must end in .csv or .parquet"),
        "under /proc": (Path("/proc/indexer-lab-test/x.csv"), "cannot write in '/proc'"),
    }


@pytest.mark.parametrize("case", ["a folder", "under a file", "deeper under a file", "unknown extension",
                                  "under /proc"])
def test_a_bad_out_is_one_line_before_any_work_and_creates_nothing(case, tmp_path, capsys, computed):
    out, rule = bad_paths(tmp_path)[case]
    before = files(tmp_path)
    code, stdout, stderr = frontier(capsys, out)
    assert code == 2 and stdout == ""
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert stderr.startswith(f"indexer-lab frontier: error: --out {str(out)!r}: ") and rule in stderr
    assert computed == []  # refused before the first task
    assert files(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["a-folder.csv", "notes.txt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a 0o500 folder anyway: nothing to refuse")
def test_an_unwritable_folder_is_refused_before_any_work(tmp_path, capsys, computed):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        for out in (locked / "x.csv", locked / "sub" / "x.csv"):
            code, _, stderr = frontier(capsys, out)
            assert code == 2 and stderr.count("\n") == 1
            assert f"--out {str(out)!r}: cannot write in {str(locked)!r} (Permission denied)" in stderr
        assert computed == [] and list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


def test_the_path_rule_is_the_sweeps_too(tmp_path):
    grid = Grid.of(concurrency=(1,), isl=(2048,), budget_mb=(512,), strategy=("vllm",))
    with pytest.raises(ValueError, match=r"table path '.*x\.csv': must end in \.parquet"):
        sweep_rows.run(grid, tmp_path / "x.csv", progress=False)
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="is not a folder"):
        sweep_rows.run(grid, tmp_path / "f" / "x.parquet", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


# -- Ctrl-C and the rerun --------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 3])
def test_ctrl_c_keeps_the_finished_tasks_and_the_rerun_computes_only_the_rest(
        k, tmp_path, capsys, monkeypatch, reference):
    out = tmp_path / "results" / "frontier.csv"
    journal = out.with_name(out.name + ".journal")
    interrupt_at(monkeypatch, k)
    code, stdout, stderr = frontier(capsys, out)
    assert code == 130 and "Traceback" not in stderr
    assert stderr == (f"indexer-lab frontier: interrupted: {k - 1} of {TASKS} tasks kept in {journal}; "
                      "run the same command again to resume\n")
    assert not out.exists() and journal.exists()
    assert journal.read_bytes().count(b"\n") == 1 + (k - 1)  # the header, one line per finished task
    no_leftovers(tmp_path)

    monkeypatch.undo()
    ids = []
    real = sweep_rows.model_task
    monkeypatch.setattr(sweep_rows, "model_task", lambda *a: ids.append(a[1].id) or real(*a))
    code, stdout, stderr = frontier(capsys, out)
    assert code == 0 and stderr == ""
    assert len(ids) == TASKS - (k - 1) and len(set(ids)) == len(ids)  # only the missing ones
    kept_line = f"{k - 1} tasks read from {journal}, {TASKS - (k - 1)} computed"
    assert (kept_line in stdout) == (k > 1)  # said when the journal held some
    assert f"{TASKS} points (modelled) in" in stdout and "largest ISL without OOM" in stdout
    assert out.read_bytes() == reference.read_bytes()
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(reference))
    no_leftovers(tmp_path)


def test_ctrl_c_in_worker_processes_is_one_line_and_resumes(tmp_path, capsys, monkeypatch, reference):
    """With --workers the interrupt comes back from a worker; the tasks before it are kept."""
    out = tmp_path / "frontier.csv"
    grid_ids = [task.id for task in small_grid().tasks("model")]
    real = sweep_rows.model_task

    def interrupting(grid, task, time_model, prov):
        if task.id == grid_ids[2]:
            raise KeyboardInterrupt
        return real(grid, task, time_model, prov)

    monkeypatch.setattr(sweep_rows, "model_task", interrupting)  # the forked workers inherit it
    code, _, stderr = frontier(capsys, out, "--workers", "2")
    assert code == 130 and stderr.count("\n") == 1 and "interrupted: 2 of 4 tasks kept in" in stderr
    monkeypatch.undo()
    code, stdout, _ = frontier(capsys, out, "--workers", "2")
    assert code == 0 and f"2 tasks read from {out}.journal, 2 computed" in stdout
    assert out.read_bytes() == reference.read_bytes()


def test_the_rows_are_model_rows_in_grid_order(tmp_path, capsys, reference):
    expected = sweep_rows.to_frame(list(sweep_rows.model_rows(small_grid())))
    assert reference.read_bytes() == results.csv_bytes(expected)  # the same columns, rows and order
    out = tmp_path / "frontier.parquet"
    assert frontier(capsys, out)[0] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), expected)


def test_a_finished_table_is_recognised_and_nothing_is_computed(tmp_path, capsys, computed):
    for name in ("frontier.csv", "frontier.parquet"):
        out = tmp_path / name
        assert frontier(capsys, out)[0] == 0
        before = files(tmp_path)
        computed.clear()
        code, stdout, _ = frontier(capsys, out)
        assert code == 0 and computed == [] and f"{TASKS} tasks read from {out}.journal, 0 computed" in stdout
        assert files(tmp_path) == before  # the table is left as it is
    # a Parquet table carries the grid's header: recognised without its journal too
    out = tmp_path / "frontier.parquet"
    Path(f"{out}.journal").unlink()
    table = out.read_bytes()
    code, stdout, _ = frontier(capsys, out)
    assert code == 0 and computed == [] and out.read_bytes() == table
    no_leftovers(tmp_path)


# -- a file at --out that is not this grid's table --------------------------------------------

def test_another_grids_table_or_a_foreign_file_is_refused_and_left_as_it_is(tmp_path, capsys, computed):
    other = ["--isl", "2048"]  # given after SMALL's: the other grid
    csv, parquet = tmp_path / "other.csv", tmp_path / "other.parquet"
    for out in (csv, parquet):
        assert frontier(capsys, out, *other)[0] == 0
    foreign_csv, foreign_parquet = tmp_path / "mine.csv", tmp_path / "mine.parquet"
    foreign_csv.write_text("a,b\n1,2\n")
    pd.DataFrame({"a": [1, 2]}).to_parquet(foreign_parquet)
    edited = tmp_path / "edited.csv"  # this grid's table, changed by hand since
    assert frontier(capsys, edited)[0] == 0
    edited.write_bytes(edited.read_bytes().replace(b"vllm", b"VLLM"))
    before = files(tmp_path)
    computed.clear()
    cases = {csv: "holds a different sweep (isl: [2048] there, [2048, 10240] now)",
             parquet: "holds a different sweep (isl: [2048] there, [2048, 10240] now)",
             foreign_csv: "has no journal beside it to say which grid it holds",
             foreign_parquet: "is not an indexer-lab sweep result",
             edited: "is not the table its journal edited.csv.journal gives"}
    for out, why in cases.items():
        code, stdout, stderr = frontier(capsys, out)
        assert code == 2 and stdout == "" and stderr.count("\n") == 1, stderr
        assert why in stderr and stderr.rstrip().endswith("--replace replaces it")
    assert computed == [] and files(tmp_path) == before  # byte for byte, nothing added

    for out in cases:  # --replace: this grid's table in their place
        code, stdout, stderr = frontier(capsys, out, "--replace")
        assert code == 0 and f"-> {out}" in stdout
        table = pd.read_csv(out) if out.suffix == ".csv" else pd.read_parquet(out)
        assert len(table) == TASKS and sorted(set(table["isl"])) == [2048, 10240]
        assert frontier(capsys, out)[0] == 0  # and it is recognised as this grid's now
    no_leftovers(tmp_path)


# -- the final write -------------------------------------------------------------------------

def test_a_failure_while_writing_the_table_leaves_no_temporary(tmp_path, capsys, monkeypatch):
    def half_then_fail(frame, path, metadata):
        path.write_bytes(b"PAR1 half a table")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results, "_write_parquet", half_then_fail)
    out = tmp_path / "frontier.parquet"
    code, _, stderr = frontier(capsys, out)
    assert code == 3 and stderr.count("\n") == 1 and "No space left on device" in stderr
    assert not out.exists() and Path(f"{out}.journal").exists()
    no_leftovers(tmp_path)

    def half_then_ctrl_c(frame, path, metadata):
        path.write_bytes(b"PAR1 half a table")
        raise KeyboardInterrupt

    monkeypatch.setattr(results, "_write_parquet", half_then_ctrl_c)
    code, _, stderr = frontier(capsys, out)
    assert code == 130 and f"interrupted: {TASKS} of {TASKS} tasks kept in {out}.journal" in stderr
    assert not out.exists()
    no_leftovers(tmp_path)

    monkeypatch.undo()
    csv = tmp_path / "frontier.csv"
    monkeypatch.setattr(Path, "replace", lambda self, target: (_ for _ in ()).throw(OSError(18, "rename failed")))
    code, _, stderr = frontier(capsys, csv)
    monkeypatch.undo()
    assert code == 3 and "rename failed" in stderr
    assert not csv.exists()
    no_leftovers(tmp_path)


# -- progress --------------------------------------------------------------------------------

class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("headless", [False, True])
def test_a_progress_bar_on_a_terminal_unless_headless(headless, tmp_path, monkeypatch, capsys):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    if headless:
        monkeypatch.setenv(HEADLESS_ENV, "1")
    else:
        monkeypatch.delenv(HEADLESS_ENV, raising=False)
    assert main([*SMALL, "--out", str(tmp_path / "f.csv")]) == 0
    shown = terminal.getvalue()
    assert ("frontier:" in shown and f"/{TASKS}" in shown) != headless, shown

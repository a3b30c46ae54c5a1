"""The frontier's table (``indexer-lab frontier``): a model grid's rows, journalled task by task in
the sweep store (``sweep.store``) and written at the end as one CSV or Parquet file.

The journal (``<table>.journal``) names the grid in its header, so a rerun of the same grid
resumes it (only the tasks it lacks are computed) and a rerun of another grid is refused, naming
the difference.  The rows are ``model_rows``' (no provenance columns), in the grid's order.

The journal stays beside the finished table, as the sweep store keeps it: it is the table's
record.  A Parquet table carries the same header in its schema metadata, so it is recognised even
without its journal; a CSV carries no metadata, so a CSV counts as this grid's finished table
only when its journal is this grid's and the CSV holds, byte for byte, the table the journal
gives.  Any other file at the table's path (another grid's table, a CSV without its journal, an
edited CSV, a foreign file) is refused and left as it is, unless ``replace``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from ..runmode import headless
from ..timemodel.model import TimeModel
from .executors import Local, Ray
from .grid import Grid
from .results import check_table_path, csv_bytes, write_table
from .rows import (SYNC_SECONDS, RunSettings, TaskIds, _model_task_rows, spec_defaults, spec_hash, spec_of,
                   tagged, to_frame, with_steps_evaluated)
from .store import ResultStore, StoreError


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a journalled run; its message says what the journal kept."""


@dataclass
class FrontierTable:
    rows: list[dict]  # in the grid's order
    path: Path
    journal: Path
    kept: int  # tasks found in the journal
    computed: int  # tasks computed by this run
    notes: list[str]  # what opening the journal repaired or replaced


def frontier_header(grid: Grid) -> dict:
    """The journal's header: the grid's model-mode spec, marked as the frontier's rows (a sweep's
    rows carry provenance columns: the two never share a table)."""
    spec = {**spec_of(grid, RunSettings()), "table": "frontier"}
    return {"grid_hash": spec_hash(spec), "spec": spec, "defaults": spec_defaults()}


def frontier_table(grid: Grid, out: str | Path, executor: Local | Ray = Local(), replace: bool = False,
                   progress: bool = True) -> FrontierTable:
    """Compute (or resume) the grid's modelled rows into the table ``out`` (.csv or .parquet).

    ``replace``: a file at ``out`` that is not this grid's table is replaced (an interrupted run
    of this grid is still resumed).  ``progress``: a bar on stderr (when it is a terminal and the
    run is not headless).  Ctrl-C raises ``Interrupted``; ``StoreError``: ``out`` is not this
    grid's, nothing computed."""
    out = check_table_path(out)
    if isinstance(executor, Ray):
        executor.connect()  # an unreachable cluster says so before the store is touched
    order = TaskIds(grid, "model")
    total = sum(1 for _ in order)
    with ResultStore(out, frontier_header(grid), SYNC_SECONDS["model"], replace=replace) as store:
        kept = len(store.done)
        if not replace:
            _check_csv(store, order)
        try:
            computed = _compute_missing(grid, store, executor, progress, total)
            rows = list(store.iter_rows(order))
            if computed or replace or not out.exists():  # a finished table read again is left as it is
                write_table(to_frame(rows), out, store.table_metadata())
        except KeyboardInterrupt:
            raise Interrupted(f"{len(store.done)} of {total} tasks kept in {store.journal}; "
                              "run the same command again to resume") from None
    return FrontierTable(rows, out, store.journal, kept, computed, store.notes)


def _check_csv(store: ResultStore, order: TaskIds) -> None:
    """StoreError unless a CSV already at the table's path is what this grid's journal gives."""
    if store.path.suffix != ".csv" or not store.path.exists():
        return
    if store.path.read_bytes() != csv_bytes(to_frame(list(store.iter_rows(order)))):
        raise StoreError(f"{store.path} is not the table its journal {store.journal.name} gives "
                         "(edited since, or written by another run): left as it is (move it away "
                         "or choose another output)")


def _compute_missing(grid: Grid, store: ResultStore, executor: Local | Ray, progress: bool, total: int) -> int:
    """Compute the tasks the journal lacks, each journalled as it comes; how many were computed."""
    from tqdm import tqdm

    todo = (task for task in grid.tasks("model") if task.id not in store.done)
    if executor == Local():  # in this process: the steps of one request or two evaluated together first
        todo = with_steps_evaluated(grid, todo)
    time_model = TimeModel.published()
    computed = 0
    items = ((grid, task, time_model, {}) for task in todo)  # {}: no provenance, as model_rows
    # disable=None: no bar unless stderr is a terminal; none in a headless run either
    with tqdm(total=total, initial=len(store.done), desc="frontier", unit="task", leave=False,
              disable=True if not progress or headless() else None) as bar, \
            contextlib.closing(executor.map(_model_task_rows, items)) as done:  # closed: workers stop on Ctrl-C
        for tid, rows in done:
            store.append(tid, tagged(tid, rows))
            computed += 1
            bar.update(1)
    return computed

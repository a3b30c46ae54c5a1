"""Layer 9, grids and where they run: a grid's points computed, traced or measured, into tables.

- ``grid``: ``Grid``, the one grid every frontier, sweep, notebook and dashboard runs: four frozen
  parts (``grid_plan``, ``scheduler_settings``, ``deployment``, ``axes``), each a set of
  settings declared once (``setting``: its field, its help, how an option reads it);
- ``rows``: a grid's rows in ``model``, ``trace`` or ``measure`` mode (each point the worst step
  of its schedule, ``indexer_lib.search``), as a frame, or run into a resumable store;
- ``store``, ``results``: the journalled Parquet store and where a table is written, with
  provenance;
- ``executors``, ``cluster``: where a grid's tasks run (this process, worker processes, Ray).
"""
from .executors import Local, Ray, executor_of
from .grid import MODES, NO_BUDGET_MB, Grid, Task, same_budget
from .results import check_table_path, write_table
from .rows import RunSettings, at_free_memory, model_rows, run, schedule_of, to_frame

__all__ = ["Local", "Ray", "executor_of", "MODES", "NO_BUDGET_MB", "Grid", "Task", "same_budget", "check_table_path",
           "write_table", "RunSettings", "at_free_memory", "model_rows", "run", "schedule_of", "to_frame"]

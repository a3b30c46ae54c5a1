#!/usr/bin/env python
"""Execute the notebooks headless with papermill, from a YAML parameter file.

    python scripts/run_notebooks.py notebooks/params/default.yaml [--run-name NAME]
        [--results DIR] [--only 01_oom_frontier] [--jobs N]

Writes results/<run-name>/notebooks/*.ipynb (executed), figures/ (PNG + SVG) and
tables/, then prints where they are and a three-line summary.  Parameters are
checked before any kernel starts: a bad one is reported in one line, exit 2;
a notebook that fails is reported in one line, exit 1.  The notebooks run at once, one per
CPU core (``--jobs``), each in its own kernel.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
sys.path.insert(0, str(REPO))  # run from a checkout without installing, too

from indexer_lib.notebook.params import NOTEBOOK_PARAMETERS, ParameterError, check_values, names  # noqa: E402


def load_run(path: Path) -> dict:
    try:
        spec = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ParameterError(f"{path}: cannot read it as YAML ({e})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("notebooks"), dict):
        raise ParameterError(f"{path}: needs a 'notebooks' mapping (name: parameters)")
    unknown = set(spec) - {"run_name", "common", "notebooks"}
    if unknown:
        raise ParameterError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))} "
                             "(known: run_name, common, notebooks)")
    return spec


def notebook_parameters(spec: dict, name: str, out_dir: Path) -> dict:
    """common (where the notebook takes the name) + the notebook's own block, checked with the
    notebook's other parameters at their defaults (its parameters cell)."""
    if name not in NOTEBOOK_PARAMETERS:
        raise ParameterError(f"unknown notebook {name!r}: must be one of {', '.join(NOTEBOOK_PARAMETERS)}")
    common = spec.get("common") or {}
    own = spec["notebooks"].get(name) or {}
    if not isinstance(common, dict) or not isinstance(own, dict):
        raise ParameterError(f"parameters of {name}: must be a mapping of name: value")
    params = {k: v for k, v in common.items() if k in names(name)}
    unknown_common = [k for k in common if not any(k in names(n) for n in NOTEBOOK_PARAMETERS)]
    if unknown_common:
        raise ParameterError(f"common parameter {unknown_common[0]!r}: no notebook takes it")
    params.update(own)
    params["output_dir"] = str(out_dir)
    data_dir = Path(params.get("data_dir", "data/h200"))
    params["data_dir"] = str(data_dir if data_dir.is_absolute() else REPO / data_dir)
    check_values(name, params)
    return params


class _PapermillGuesses(logging.Filter):
    """Drops papermill's guesses about the parameters cell: it cannot read a line with two
    '=' (``engine = "vllm==0.32.0"``) and then calls the parameter unknown.  Every
    parameter is checked here before a kernel starts (``notebook_parameters``), and an
    unknown or bad one stops the run with one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not message.startswith(("Unable to parse line", "Passed unknown parameter"))


@contextlib.contextmanager
def headless_kernels():
    """The kernels started inside know they run headless (dashboards show their first state, no
    progress bars) and that a figure breaking the figure style stops the run (unless the caller
    set ``INDEXER_LAB_STRICT_FIGURES=0``); this process's environment is as it was afterwards."""
    from indexer_lib.runmode import HEADLESS_ENV, STRICT_FIGURES_ENV

    settings = {HEADLESS_ENV: "1", STRICT_FIGURES_ENV: os.environ.get(STRICT_FIGURES_ENV, "1")}
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def duplicated_figures(figures: Path, since: float) -> bool:
    """Whether two figures this run wrote draw the same data (each pair said in one line): one of
    them answers nothing the other does not."""
    from indexer_lib.notebook.figure_check import duplicate_figures

    written = [p for p in figures.glob("*.png") if p.stat().st_mtime >= since] if figures.exists() else []
    problems = duplicate_figures(written)
    for line in problems:
        print(f"duplicate figure: {line}", file=sys.stderr)
    return bool(problems)


def execute(name: str, params: dict, out_dir: Path, notebooks: Path) -> tuple[float, str | None]:
    """Executes one notebook headless: (seconds, None) or (seconds, the one-line failure)."""
    import papermill as pm

    t0 = time.perf_counter()
    try:
        pm.execute_notebook(notebooks / f"{name}.ipynb", out_dir / "notebooks" / f"{name}.ipynb",
                            parameters=params, cwd=str(notebooks), kernel_name="python3",
                            progress_bar=False, log_output=False)
    except pm.PapermillExecutionError as e:
        return time.perf_counter() - t0, f"failed in cell {e.exec_count}: {e.ename}: {e.evalue}"
    return time.perf_counter() - t0, None


def execute_all(plan: list[tuple[str, dict]], out_dir: Path, jobs: int) -> int:
    """Executes the notebooks in order, ``jobs`` at a time (each in its own kernel: they share no
    state), printing each as it ends.  After a failure no other notebook starts; the ones running
    finish and keep what they wrote."""
    waiting, running, failed = list(plan), {}, False
    with headless_kernels(), ThreadPoolExecutor(jobs) as pool:
        while running or (waiting and not failed):
            while waiting and not failed and len(running) < jobs:
                name, params = waiting.pop(0)
                running[pool.submit(execute, name, params, out_dir, NOTEBOOKS)] = name
            ended, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in ended:
                name = running.pop(future)
                seconds, failure = future.result()
                if failure is None:
                    print(f"{name}: done in {seconds:.1f} s", flush=True)
                    continue
                failed = True
                print(f"{name}: {failure}", file=sys.stderr)
                print(f"the executed notebook, with the error: {out_dir / 'notebooks' / name}.ipynb",
                      file=sys.stderr)
    return 1 if failed else 0


def run(params_file: Path, run_name: str | None, results: Path, only: list[str], jobs: int = 1) -> int:
    for logger in ("papermill", "papermill.translators"):
        logging.getLogger(logger).addFilter(_PapermillGuesses())

    spec = load_run(params_file)
    run_name = run_name or spec.get("run_name") or params_file.stem
    out_dir = (results / run_name).resolve()
    names = [n for n in spec["notebooks"] if not only or n in only]
    if only and set(only) - set(names):
        raise ParameterError(f"--only {', '.join(sorted(set(only) - set(names)))}: "
                             f"not in {params_file}")
    # every notebook's parameters are checked before the first kernel starts
    plan = [(name, notebook_parameters(spec, name, out_dir)) for name in names]
    (out_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    # a rerun after an upgrade: the older sweep tables go aside (kept), the job starts over
    from indexer_lib.sweep.store import set_aside_older, tidy_finished

    for path in set_aside_older(out_dir / "tables"):
        print(f"an older indexer-lab's sweep table, kept: {path}")
    start, started = time.perf_counter(), time.time()
    if execute_all(plan, out_dir, jobs):
        return 1
    tidy_finished(out_dir / "tables")  # the finished sweeps' journals and locks: tables only
    if duplicated_figures(out_dir / "figures", started - 1):
        return 1
    summary = [p.read_text().strip() for p in sorted((out_dir / "tables").glob("summary_*.txt"))]
    (out_dir / "summary.txt").write_text("\n".join(summary) + "\n")
    figures = sorted((out_dir / "figures").glob("*.png")) if (out_dir / "figures").exists() else []
    rel = out_dir.relative_to(REPO) if out_dir.is_relative_to(REPO) else out_dir
    print(f"\n{len(plan)} notebooks in {time.perf_counter() - start:.1f} s -> {rel}/")
    print(f"  executed notebooks: {rel}/notebooks/")
    print(f"  figures (PNG + SVG): {rel}/figures/ ({len(figures)} figures)")
    print(f"  tables: {rel}/tables/")
    print("Summary:")
    for line in summary:
        print(f"  {line}")
    return 0


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a whole number of notebooks, at least 1")
    return int(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("params", type=Path, help="YAML parameter file (notebooks/params/*.yaml)")
    parser.add_argument("--run-name", help="results/<run-name>/ (default: the file's run_name)")
    parser.add_argument("--results", type=Path, default=REPO / "results",
                        help="folder that holds the runs (default: results/)")
    parser.add_argument("--only", action="append", default=[], help="run only this notebook")
    parser.add_argument("--jobs", type=_jobs, default=os.cpu_count() or 1,
                        help="notebooks executed at once, each in its own kernel (default: one per CPU core)")
    args = parser.parse_args(argv)
    try:
        return run(args.params, args.run_name, args.results, args.only, args.jobs)
    except ParameterError as e:
        print(f"run_notebooks: parameter error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""How fast the frontier and its dashboard answer, this checkout next to an earlier one.

    .venv/bin/python scripts/bench_speed.py                  # against 0ab2fb1 (before the speed work)
    .venv/bin/python scripts/bench_speed.py --before HEAD~3 --repeats 3 --main
    .venv/bin/python scripts/bench_speed.py --before HEAD~5 --only frontier-v4-flash

The earlier commit is checked out into a temporary git worktree; every measurement runs in
its own process (``PYTHONPATH`` pointing at one checkout or the other), before and after
alternating, so machine noise falls on both.  Measured, one process each:

- the dashboard (``FrontierDashboard``) on issue 15's 8 x 6 grid (ISL to 32K): each control
  changed at least 20 times, p50 and p95 of the time until its figure and table are
  recomputed, and the engine dropdown with the releases' own chunkers (strategy ``engine``);
  notebook 04's ``AutoDashboard``: 20 free-GiB moves;
- the frontier grid's rows (``indexer-lab frontier``'s path: ``sweep.model_rows`` over a ``Grid``,
  each row with its worst step's detail; before the one grid, ``frontier_rows``) on issue 15's
  default grid (ISL to 32K, 1152 points) and on the
  long-context grid (GLM-5, ISL 4K-202,752 x concurrency 1-64, 1008 points); since n-only's
  rows are stored once per workload instead of once per budget, the same grids give 912 and
  798 rows (the same plans);
- this checkout only (the earlier code takes minutes on them): the dashboard and
  the frontier on today's default grids, whose ISL axis reaches GLM-5's max_model_len
  (8 x 9 and 1368 points);
- the frontier on DeepSeek-V4-Flash's default grid (``indexer-lab frontier --model
  deepseek-v4-flash``: 8 x 9 x 19, its ISL axis up to max_model_len, 1,048,576 tokens), on
  both checkouts where the earlier one knows the model;
- every model of ``data/models/`` (``frontier-models``): its frontier on its default grid, and
  (``dashboard-models``, this checkout only) its dashboard on its default axis, on the vllm
  strategy and on the release's own chunker, each of the budget, the strategy and the free GiB
  changed 20 times;
- this checkout only (the earlier code has no ledger): ``indexer-lab deploy``'s ledger of a long
  agentic workload (``ledger-agentic``: GLM-5.3-Flash on vLLM 0.33.0 at a 1M max_model_len, 2,000
  prompts of 10K to 1M tokens, 64 at a time, a 9,000-token shared prefix), the caching allocator
  over every step included;
- with ``--main``: the headless main job (``scripts/run_notebooks.py``, default parameters;
  since the default ISL axis reaches max_model_len, the two checkouts run different grids).

Each figure is printed next to the goal of issue 15 and the ratio before / after.  The issue
measured the code before it (0ab2fb1) on another machine; where ``--before`` is that commit, the
two grids' times before, against the issue's own figures (4.7 s and 35.4 s), say how much slower
or faster this machine is, and "goal here" is each goal scaled by that factor.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOALS_MS = {"dashboard p95": 150, "dashboard free GiB p95": 60, "frontier default grid": 1000,
            "frontier long-context grid": 2000, "main job": 180_000,  # issue 15's
            "frontier V4-Flash default grid to max_model_len": 5000,  # the project's, on a 2-core machine
            "ledger long agentic workload (2,000 prompts)": 10_000}
# what issue 15 measured the code before it at, on the machine it was filed from: the two grids
# measured here before the change, against these, say how fast this machine is
ISSUE_NOW_MS = {"frontier default grid": 4700, "frontier long-context grid": 35_400}
ISSUE_BEFORE = "0ab2fb1"  # the code the issue measured
DEFAULT_ISL = (2048, 4096, 8192, 10240, 16384, 32768)  # issue 15's default grid, 1152 points
# the earlier code takes minutes, or has no ledger
AFTER_ONLY = ("dashboard-max-model-len", "frontier-max-model-len", "dashboard-models", "ledger-agentic")
KINDS = ("dashboard", "frontier-default", "frontier-long", "dashboard-max-model-len", "frontier-max-model-len",
         "frontier-v4-flash", "frontier-models", "dashboard-models", "ledger-agentic")
LONG_CONTEXT = dict(model="glm-5", isl=(4096, 16384, 32768, 65536, 131072, 202752),
                    concurrency=(1, 2, 4, 8, 16, 32, 64))


def frontier_rows():
    """``rows(**axes)``: the frontier grid's rows on whichever checkout runs, ``indexer-lab
    frontier``'s own path (``sweep.model_rows`` over a ``Grid``; before the one grid,
    ``frontier_rows`` over a ``FrontierGrid``), imported before any timing starts."""
    try:
        Grid, model_rows = of_sweep("Grid"), of_sweep("model_rows")
    except ImportError:
        FrontierGrid, rows = earlier("study.frontier", "FrontierGrid"), earlier("study.frontier", "frontier_rows")
        return lambda **axes: list(rows(FrontierGrid(**axes)))
    return lambda **axes: list(model_rows(grid_of(Grid, axes)))


# where an earlier checkout kept what ``indexer_lib.sweep`` holds now (a module inside indexer_lib)
EARLIER = {"Grid": "study.grid", "model_rows": "study.sweep"}


def of_sweep(name: str):
    """A name of ``indexer_lib.sweep``, or of the module that held it in an earlier checkout
    (ImportError where there is none)."""
    try:
        return getattr(importlib.import_module("indexer_lib.sweep"), name)
    except ImportError:
        return earlier(EARLIER[name], name)


def of_presets(name: str):
    """A name of ``indexer_lib.presets``, or of the module that held the presets in an earlier
    checkout."""
    try:
        return getattr(importlib.import_module("indexer_lib.presets"), name)
    except ImportError:
        return earlier("shapes", name)


def earlier(module: str, name: str):
    """``name`` of ``indexer_lib.<module>`` in an earlier checkout (ImportError where it has none)."""
    try:
        return getattr(importlib.import_module(f"indexer_lib.{module}"), name)
    except AttributeError:
        raise ImportError(f"no {name} in {module}") from None


def grid_of(grid_class, settings: dict):
    """A grid from its settings by name, on either checkout: ``Grid.of`` where the grid is made
    of parts, the flat ``Grid(...)`` before."""
    return getattr(grid_class, "of", grid_class)(**settings)


def dashboard(isl):
    """The frontier dashboard (the vllm strategy, 512 MiB) on this ISL axis (None: the default)."""
    from indexer_lib.notebook.widgets import FrontierDashboard

    try:
        Grid = of_sweep("Grid")
    except ImportError:
        return FrontierDashboard() if isl is None else FrontierDashboard(isl=isl)
    return FrontierDashboard(grid_of(Grid, dict(isl=isl, strategy=("vllm",))), budget_mb=512)


def model_dashboards() -> dict:
    """Every model's frontier dashboard on its default axis (ISL to its max_model_len, 512 MiB),
    once on the vllm strategy and once on the release's own chunker (``engine``, where notebook
    01's dashboard opens): each of the budget, the strategy and the free GiB changed 20 times."""
    from indexer_lib.notebook.widgets import FrontierDashboard
    known_models = of_presets("known_models")

    Grid = of_sweep("Grid")

    moves = {"budget_mb": [64, 128, 256, 512, 1024, 2048],
             "strategy": ["vllm", "causal", "per-request", "n-only", "engine"],
             "free_gib": [1.0, 2.0, 2.63, 4.0, 8.0, 16.0]}
    out = {}
    for model in sorted(known_models()):
        for strategy in ("vllm", "engine"):
            dash = FrontierDashboard(grid_of(Grid, dict(model=model, strategy=(strategy,))), budget_mb=512)
            on = "" if strategy == "vllm" else "engine "
            for name, values in moves.items():
                out[f"dashboard {model} {on}{name}"] = moved(dash.controls[name], values, 20)
    return out


def moved(control, values: list, times: int) -> list[float]:
    """Milliseconds of each of ``times`` changes of a dashboard control, cycling through ``values``
    (never setting the value it holds)."""
    out = []
    for i in range(times):
        value = values[i % len(values)]
        if control.value == value:
            value = values[(i + 1) % len(values)]
        start = time.perf_counter()
        control.value = value
        out.append(1e3 * (time.perf_counter() - start))
    return out


def measure(kind: str) -> dict:
    """Runs in a worker process, on whichever checkout PYTHONPATH names."""
    grids = {"frontier-default": ("frontier default grid", dict(isl=DEFAULT_ISL)),
             "frontier-long": ("frontier long-context grid", LONG_CONTEXT),
             "frontier-max-model-len": ("frontier default grid to max_model_len", {})}
    if kind == "frontier-v4-flash":
        try:
            get_model = of_presets("get_model")

            get_model("deepseek-v4-flash")
        except Exception:  # an earlier checkout without the model: nothing to compare
            return {}
        grids[kind] = ("frontier V4-Flash default grid to max_model_len", dict(model="deepseek-v4-flash"))
    if kind == "frontier-models":
        known_models = of_presets("known_models")

        rows, out = frontier_rows(), {}
        for model in sorted(known_models()):
            start = time.perf_counter()
            try:
                rows(model=model)
            except ValueError:  # an earlier checkout that cannot plan the model: nothing to compare
                continue
            out[f"frontier {model} default grid"] = [1e3 * (time.perf_counter() - start)]
        return out
    if kind == "dashboard-models":
        return model_dashboards()
    if kind == "ledger-agentic":
        from indexer_lib.ledger.deployment import Server, deployment_ledger
        from indexer_lib.workload import ClosedLoopWorkload

        workload = ClosedLoopWorkload(64, 505_000, 64, shared_prefix=9000, num_prompts=2000, random_range_ratio=0.98)
        start = time.perf_counter()
        d = deployment_ledger(Server("glm-5.3-flash", "vllm==0.33.0", max_model_len=1_048_576), workload)
        return {"ledger long agentic workload (2,000 prompts)": [1e3 * (time.perf_counter() - start)],
                "steps": d.run.prefill_steps}
    if kind in grids:
        name, axes = grids[kind]
        rows = frontier_rows()
        start = time.perf_counter()
        n = len(rows(**axes))
        return {name: [1e3 * (time.perf_counter() - start)], "points": n}
    if kind in ("dashboard", "dashboard-max-model-len"):
        long_axis = kind == "dashboard-max-model-len"
        dash = dashboard(None if long_axis else DEFAULT_ISL)
        prefix = "dashboard to max_model_len" if long_axis else "dashboard"
        moves = {"budget_mb": [64, 128, 256, 512, 1024, 2048],
                 "strategy": ["vllm", "causal", "per-request", "n-only"],
                 "free_gib": [1.0, 2.0, 2.63, 4.0, 8.0, 16.0],
                 "max_num_batched_tokens": [4096, 8192, 16384],
                 "shared_prefix": [0, 1024, 2048],
                 # the releases' own chunkers (strategy "engine"): vLLM's budget on DeepGEMM 2.8 and
                 # before it, its workspace packing, SGLang's rows against the batch's K
                 "engine": ["sglang==0.5.23", "vllm==0.19.0", "vllm==0.15.1", "vllm==0.33.0"]}
        out = {}
        for name, values in moves.items():
            if name == "engine":
                dash.controls["budget_mb"].value = 512
                dash.controls["strategy"].value = "engine"
            times = moved(dash.controls[name], values, max(20, len(values)))
            out[f"{prefix} {'engine (own chunkers)' if name == 'engine' else name}"] = times
        if long_axis:
            return out
        from indexer_lib.notebook.widgets import AutoDashboard

        auto = AutoDashboard()  # notebook 04's widget: candidates evaluated once per deployment
        times = []
        for i in range(20):
            start = time.perf_counter()
            auto.controls["free_gib"].value = (1.0, 2.0, 2.63, 4.0, 8.0)[i % 5]
            times.append(1e3 * (time.perf_counter() - start))
        out["auto dashboard free_gib"] = times
        return out
    if kind == "main":
        with tempfile.TemporaryDirectory() as results:
            start = time.perf_counter()
            subprocess.run([sys.executable, str(Path.cwd() / "scripts" / "run_notebooks.py"),
                            "notebooks/params/default.yaml", "--results", results, "--run-name", "bench"],
                           check=True, capture_output=True)
            return {"main job": [1e3 * (time.perf_counter() - start)]}
    raise ValueError(f"unknown measurement {kind!r}")


def run_worker(checkout: Path, kind: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_speed.py"), "--worker", kind],
                          cwd=checkout, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{kind} on {checkout}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def percentile(values, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default=ISSUE_BEFORE, help="the earlier commit (default: before issue 15's speed work)")
    p.add_argument("--repeats", type=int, default=2, help="before/after rounds, alternating")
    p.add_argument("--main", action="store_true", help="also time the headless main job (minutes)")
    p.add_argument("--only", nargs="+", choices=KINDS + ("main",), metavar="KIND",
                   help=f"measure only these ({', '.join(KINDS)}, main)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker)))
        return 0
    if args.repeats < 1:
        p.error(f"--repeats {args.repeats}: must be >= 1")
    kinds = list(args.only) if args.only else list(KINDS) + (["main"] if args.main else [])
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(before), args.before],
                       check=True)
        try:
            results = {"before": {}, "after": {}}
            for round_ in range(args.repeats):
                for kind in kinds:
                    sides = (("before", before), ("after", REPO))[::1 if round_ % 2 == 0 else -1]
                    for side, checkout in sides:
                        if side == "before" and kind in AFTER_ONLY:
                            continue
                        for key, values in run_worker(checkout, kind).items():
                            if isinstance(values, list):
                                results[side].setdefault(key, []).extend(values)
                        print(f"  round {round_ + 1}: {kind} ({side}) done", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)], check=False)
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    print(f"before: {args.before}; after: {sha} (this checkout); {args.repeats} rounds, alternating")
    factor = machine_factor(results["before"]) if same_commit(args.before, ISSUE_BEFORE) else None
    if factor is not None:
        print(f"this machine ran the code before issue 15 {factor:.2f}x as long as the machine the issue "
              f"measured it on (geometric mean over the two grids); 'goal here' is the goal times that")
    print(f"{'what':<48} {'before p50/p95 ms':>20} {'after p50/p95 ms':>20} {'ratio p95':>10} {'goal ms':>8} "
          f"{'goal here':>10}")
    for key in results["after"]:
        b, a = results["before"].get(key, []), results["after"][key]
        goal = GOALS_MS.get(key, GOALS_MS["dashboard free GiB p95"] if key.endswith("free_gib")
                            else GOALS_MS["dashboard p95"] if "dashboard" in key else None)
        bp = f"{statistics.median(b):.0f}/{percentile(b, 0.95):.0f}" if b else "-"
        ratio = f"{percentile(b, 0.95) / percentile(a, 0.95):.1f}x" if b else "-"
        here = f"{goal * factor:.0f}" if goal and factor is not None and key != "main job" else "-"
        print(f"{key:<48} {bp:>20} {statistics.median(a):>10.0f}/{percentile(a, 0.95):<9.0f} {ratio:>10} "
              f"{goal if goal else '-':>8} {here:>10}")
    return 0


def same_commit(a: str, b: str) -> bool:
    def sha(rev):
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], capture_output=True, text=True).stdout.strip()
    return sha(a) == sha(b)


def machine_factor(before: dict) -> float | None:
    """How much longer this machine takes than the one issue 15 measured on: the geometric mean,
    over the two grids, of the earlier code's time here over the issue's figure (None where a
    grid was not measured)."""
    ratios = [statistics.median(before[key]) / ms for key, ms in ISSUE_NOW_MS.items() if before.get(key)]
    if len(ratios) != len(ISSUE_NOW_MS):
        return None
    return statistics.geometric_mean(ratios)


if __name__ == "__main__":
    raise SystemExit(main())

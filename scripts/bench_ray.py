"""A model sweep of about 100,000 points, locally and on a local Ray instance, in one run.

    .venv/bin/python scripts/bench_ray.py            # needs pip install -e ".[cluster]"
    .venv/bin/python scripts/bench_ray.py --cpus 2 --small

Prints points per second for both (the same grid, the same table: checked), Ray's start-up,
and the overhead of one Ray task (a no-op through ``study.cluster.ordered_map``, one item per
task), from which the gain of a larger cluster can be read.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexer_lib.study import cluster, sweep  # noqa: E402

# 16 x 10 x 2 workloads x 4 strategies x 6 budgets x 13 free GiB = 99,840 points, 1,280 model tasks
GRID = sweep.SweepGrid(concurrency=(1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 96, 128),
                       isl=(1024, 2048, 3072, 4096, 6144, 8192, 10240, 12288, 16384, 32768), osl=(64, 256),
                       budget_mb=(64, 128, 256, 512, 1024, 2048),
                       free_gib=(0.5, 1, 1.5, 2, 2.63, 3, 4, 6, 8, 12, 16, 24, 32))
SMALL = sweep.SweepGrid(concurrency=(4, 16, 64), isl=(2048, 8192), free_gib=(1, 2.63, 8))


def noop(x):
    return x


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance (default 2)")
    p.add_argument("--small", action="store_true", help=f"a {SMALL.num_rows}-point grid instead")
    args = p.parse_args()
    grid = SMALL if args.small else GRID
    import ray

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        local = sweep.run(grid, Path(tmp) / "local.parquet", progress=False)
        local_s = time.perf_counter() - start

        start = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        init_s = time.perf_counter() - start
        start = time.perf_counter()
        on_ray = sweep.run(grid, Path(tmp) / "ray.parquet", progress=False, executor="ray")
        ray_s = time.perf_counter() - start

        n = 2000
        start = time.perf_counter()
        assert list(cluster.ordered_map(noop, ((i,) for i in range(n)), batch=1)) == list(range(n))
        per_task = (time.perf_counter() - start) / n
        ray.shutdown()
    same = local.drop(columns=["date"]).equals(on_ray.drop(columns=["date"]))
    tasks = sum(1 for _ in sweep.tasks(grid, "model"))
    print(f"grid: {grid.num_rows} points, {tasks} model tasks ({cluster.BATCH} per Ray task)")
    print(f"local, one process:          {local_s:7.1f} s  {grid.num_rows / local_s:9.0f} points/s")
    print(f"Ray, {args.cpus} CPUs (this machine): {ray_s:7.1f} s  {grid.num_rows / ray_s:9.0f} points/s "
          f"(+ {init_s:.1f} s to start Ray)")
    print(f"one Ray task's overhead: {1e3 * per_task:.2f} ms (a no-op, one item per task, {n} tasks)")
    print(f"tables equal: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

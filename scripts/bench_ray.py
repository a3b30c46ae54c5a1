"""A model sweep of about 100,000 points, locally and on a local Ray instance, in one run.

    .venv/bin/python scripts/bench_ray.py            # needs pip install -e ".[cluster]"
    .venv/bin/python scripts/bench_ray.py --cpus 2 --small

Prints points per second for both (the same grid, the same table: checked), Ray's start-up,
and the overhead of one Ray task (a no-op through ``sweep.cluster.ordered_map``, one item per
task), from which the gain of a larger cluster can be read.  Then a measure sweep on the
emulated CUDA device (tests/fake_cuda.py), locally and on Ray with fake GPUs (one point per
GPU task, each in a fresh worker, as Ray runs GPU tasks): seconds per point and the
overhead of a GPU task, and what an 8-GPU node would take for a grid of that many points.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the emulated CUDA device

import fake_cuda  # noqa: E402
from indexer_lib.sweep import cluster, rows as sweep  # noqa: E402
from indexer_lib.sweep.executors import Ray  # noqa: E402
from indexer_lib.sweep.grid import Grid  # noqa: E402

# 16 x 10 x 2 workloads x 4 strategies x 6 budgets x 13 free GiB = 99,840 points, 1,280 model tasks;
# n-only reads no budget, so its rows are one per workload and free GiB: 79,040 rows
GRID = Grid.of(concurrency=(1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 96, 128),
            isl=(1024, 2048, 3072, 4096, 6144, 8192, 10240, 12288, 16384, 32768), osl=(64, 256),
            budget_mb=(64, 128, 256, 512, 1024, 2048),
            free_gib=(0.5, 1, 1.5, 2, 2.63, 3, 4, 6, 8, 12, 16, 24, 32))
SMALL = Grid.of(concurrency=(4, 16, 64), isl=(2048, 8192), free_gib=(1, 2.63, 8))
# 16 measured points on the emulated device (8 GiB): vLLM's own chunker and n-only, 0.18.1
MEASURE_GRID = Grid.of(concurrency=(1, 8, 32, 64), isl=(4096, 10240), budget_mb=(512,),
                    strategy=("n-only", "vllm"), free_gib=(2.63,), engine=("vllm==0.18.1",))
MEASURE = sweep.RunSettings(mode="measure", repeats=1)


def emulated_gpu():
    return fake_cuda.EmulatedCuda(8 * fake_cuda.GIB)


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
        sweep.run(MEASURE_GRID, Path(tmp) / "m-local.parquet", MEASURE, progress=False, device=emulated_gpu())
        measure_local_s = time.perf_counter() - start

        start = time.perf_counter()
        ray.init(num_cpus=args.cpus, num_gpus=args.cpus, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        init_s = time.perf_counter() - start
        for module in (sys.modules[__name__], fake_cuda):  # Ray's workers cannot import them
            ray.cloudpickle.register_pickle_by_value(module)
        start = time.perf_counter()
        on_ray = sweep.run(grid, Path(tmp) / "ray.parquet", progress=False, executor=Ray())
        ray_s = time.perf_counter() - start

        n = 2000
        start = time.perf_counter()
        assert list(cluster.ordered_map(noop, ((i,) for i in range(n)), batch=1)) == list(range(n))
        per_task = (time.perf_counter() - start) / n
        start = time.perf_counter()
        sweep.run(MEASURE_GRID, Path(tmp) / "m-ray.parquet", MEASURE, progress=False, device=emulated_gpu,
                  executor=Ray())
        measure_ray_s = time.perf_counter() - start
        ray.shutdown()
    same = local.drop(columns=["date"]).equals(on_ray.drop(columns=["date"]))
    tasks = sum(1 for _ in grid.tasks("model"))
    print(f"grid: {grid.num_rows} points, {tasks} model tasks ({cluster.BATCH} per Ray task)")
    print(f"local, one process:          {local_s:7.1f} s  {grid.num_rows / local_s:9.0f} points/s")
    print(f"Ray, {args.cpus} CPUs (this machine): {ray_s:7.1f} s  {grid.num_rows / ray_s:9.0f} points/s "
          f"(+ {init_s:.1f} s to start Ray)")
    print(f"one Ray task's overhead: {1e3 * per_task:.2f} ms (a no-op, one item per task, {n} tasks)")
    print(f"tables equal: {same}")
    points = MEASURE_GRID.num_rows
    per_point = measure_local_s / points
    # on Ray the GPUs (fake: --cpus of them, on --cpus cores) each run one point at a time
    gpu_task = measure_ray_s * args.cpus / points - per_point
    print(f"measure, emulated device: {points} points, locally {per_point:.2f} s per point; on Ray "
          f"with {args.cpus} fake GPUs {measure_ray_s:.1f} s, i.e. {gpu_task:.2f} s per GPU task on top "
          "(a fresh worker per point: process start, torch and indexer_lib imported)")
    for gpus in (1, 8):
        print(f"  a {points}-point measure grid on {gpus} GPU(s) of one node: about "
              f"{points * (per_point + gpu_task) / gpus:.1f} s on Ray, {points * per_point:.1f} s in one "
              "local process (estimated from the two figures above)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Benchmark: the default headless sweep end to end, and model-mode points per second.

    python scripts/bench_sweep.py [--skip-notebooks]

1. ``scripts/run_notebooks.py notebooks/params/default.yaml`` into a temporary folder:
   wall time including kernel starts (goal: under 3 minutes on 2 cores);
2. the sweep's default grid (a ``sweep.grid.Grid`` at ISLs 2,048-32,768) in ``model`` mode
   into a fresh store (journal, fsync at most once a second, compaction included): rows per
   second;
3. the same grid resumed: how long skipping finished work takes.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-notebooks", action="store_true")
    args = parser.parse_args()
    from indexer_lib.sweep import rows as sweep
    from indexer_lib.sweep.grid import Grid

    print(f"cores: {os.cpu_count()}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_notebooks:
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, str(REPO / "scripts" / "run_notebooks.py"),
                                   str(REPO / "notebooks" / "params" / "default.yaml"),
                                   "--results", tmp], capture_output=True, text=True)
            elapsed = time.perf_counter() - start
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                return 1
            status = "within" if elapsed < 180 else "OVER"
            print(f"default headless sweep (3 notebooks, papermill, kernel starts included): "
                  f"{elapsed:.1f} s end to end ({status} the 180 s goal)")

        # the sweep's default grid: Grid's own default ISLs go up to max_model_len (202,752)
        grid = Grid.of(isl=(2048, 4096, 8192, 10240, 16384, 32768))
        out = Path(tmp) / "bench.parquet"
        start = time.perf_counter()
        frame = sweep.run(grid, out, progress=False)
        elapsed = time.perf_counter() - start
        print(f"model mode, default grid: {len(frame)} points (point x strategy rows) in "
              f"{elapsed:.2f} s = {len(frame) / elapsed:.0f} points/s "
              f"(store: journal + fsync once a second + Parquet)")
        start = time.perf_counter()
        sweep.run(grid, out, progress=False)
        print(f"resume of the finished sweep: {time.perf_counter() - start:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

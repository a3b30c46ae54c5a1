#!/usr/bin/env python
"""Every engine release on the field's two deployments, as one table (every number modelled).

For each vLLM (0.11.0-0.33.0) and SGLang (0.5.3-0.5.23) release: its own chunker at its
default setting (vLLM: VLLM_SPARSE_INDEXER_MAX_LOGITS_MB; SGLang: the budget it measures
with the deployment's free memory), every step of the schedule at the deployment's
highest concurrency: the worst step's transient peak, its chunks, and the lowest
concurrency at which the release runs out of memory (``study.releases``).  The time it
takes is measured.

    .venv/bin/python scripts/bench_engines.py [--free-gib 2.63]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexer_lib.engines import engine_names, get_engine  # noqa: E402
from indexer_lib.study.releases import deployments, release_rows  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--free-gib", type=float, default=None, help="default: each deployment's (2.63)")
    args = p.parse_args()
    names = engine_names()
    start = time.perf_counter()
    table: dict[str, dict] = {n: {} for n in names}
    for deployment in deployments():
        for row in release_rows(deployment, names, args.free_gib):
            cell = table[row["engine"]].setdefault(deployment, {"first_oom": None})
            if row["oom"] and cell["first_oom"] is None:
                cell["first_oom"] = row["concurrency"]
            cell.update(peak=row["peak_transient_gib"], chunks=row["worst_chunks"], conc=row["concurrency"])
    seconds = time.perf_counter() - start
    heads = list(deployments())
    print("modelled: the worst step at the highest concurrency; first OOM: the lowest concurrency that runs out")
    print(" " * 36 + "".join(f" | {h:<33}" for h in heads))
    print(f"{'release':<22}{'DeepGEMM':>14}" + f" | {'peak GiB':>10} {'chunks':>7} {'first OOM':>13}" * len(heads))
    for name in names:
        line = f"{name:<22}{get_engine(name).deepgemm_rules:>14}"
        for h in heads:
            c = table[name][h]
            oom = "-" if c["first_oom"] is None else f"concurrency {c['first_oom']}"
            line += f" | {c['peak']:10.2f} {c['chunks']:7d} {oom:>13}"
        print(line)
    print(f"{len(names)} releases x {len(heads)} deployments in {seconds:.1f} s "
          f"({seconds / len(names) * 1e3:.0f} ms per release, measured on this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

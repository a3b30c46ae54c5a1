"""Replayed vs modelled peaks, and how long a replay takes, for every replayable vLLM release.

    .venv/bin/python scripts/bench_replay.py                 # table on stdout
    .venv/bin/python scripts/bench_replay.py --csv data/replay/vllm_replay.csv

Each release replays the field's cases, a 202,752-token GLM-5 step and 50 random steps
(``indexer_lib.run.replay_cases``) through its own code on the meta device.  Printed per
case: chunks, replayed and modelled peak (``temporaries="replay"``), their difference, what our
executor's H200 path would be counted at (``temporaries="deepgemm"``, the frontier's default),
and what the step needs beyond the profile run's peak.  Then, per release: seconds per step
of the replay itself, and the process's start-up (importing vLLM), measured in this run.
"""
from __future__ import annotations

import argparse
import csv
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from indexer_lib.run.replay import engine_python, replay_cases  # noqa: E402
from indexer_lib.run.replay_cases import field_cases, random_cases  # noqa: E402
from indexer_lib.memory import make_plan, memory_report  # noqa: E402
from indexer_lib.plan import PlanSettings  # noqa: E402
from indexer_lib.workload import StepBatch  # noqa: E402

RELEASES = ("vllm==0.33.0", "vllm==0.30.0", "vllm==0.20.0", "vllm==0.19.0", "vllm==0.15.1")
MIB = 2**20


def executor_peak(engine: str, case, r) -> int:
    plan = make_plan(StepBatch.from_lengths(r.query_lens, r.seq_lens), "engine",
                     None if r.budget_mb is None else r.budget_mb << 20, PlanSettings(r.model, engine))
    return memory_report(plan, topk_rows=case.max_num_batched_tokens, temporaries="deepgemm").peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, help="also write the table here (with provenance columns)")
    parser.add_argument("--random", type=int, default=50, help="random steps per release (default 50)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    cases = field_cases() + random_cases(args.random, seed=0)
    rows, summary = [], []
    for engine in RELEASES:
        try:
            engine_python(engine)
        except ValueError as e:
            print(f"{engine}: skipped ({e})")
            continue
        start = time.perf_counter()
        results = replay_cases(engine, "glm-5", cases)
        wall = time.perf_counter() - start
        replay_seconds = sum(r.seconds for _, r in results)
        summary.append((engine, len(results), replay_seconds / len(results), wall - replay_seconds,
                        sum(r.difference_bytes != 0 for _, r in results)))
        for case, r in results:
            row = r.to_row()
            row["case"] = case.name
            row["executor_deepgemm_peak_bytes"] = executor_peak(engine, case, r)
            row.update(provenance="replayed on the meta device (CPU) by scripts/bench_replay.py",
                       commit=commit, machine=f"{platform.machine()} {platform.python_version()}")
            rows.append(row)
    print(f"{'engine':>13} {'case':>42} {'chunks':>6} {'replayed MiB':>13} {'modelled MiB':>13} "
          f"{'diff B':>7} {'executor MiB':>13} {'beyond profile run MiB':>22}")
    for row in rows:
        if row["case"].startswith("random") and row["case"] not in ("random 0", "random 1"):
            continue  # the table prints the field's cases and two random ones; the CSV has all
        beyond = row["unreserved_bytes"] / MIB
        print(f"{row['engine']:>13} {row['case'][:42]:>42} {row['chunks']:>6} "
              f"{row['replayed_peak_bytes'] / MIB:>13.1f} {row['modelled_peak_bytes'] / MIB:>13.1f} "
              f"{row['difference_bytes']:>7} {row['executor_deepgemm_peak_bytes'] / MIB:>13.1f} "
              f"{beyond:>22.1f}")
    print()
    for engine, n, per_step, startup, differing in summary:
        print(f"{engine}: {n} steps, model == replay on {n - differing}; replay {1e3 * per_step:.1f} ms "
              f"per step, plus {startup:.1f} s once (the process's start, importing vLLM)")
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {len(rows)} rows to {args.csv}")
    return 0 if all(s[4] == 0 for s in summary) else 1


if __name__ == "__main__":
    sys.exit(main())

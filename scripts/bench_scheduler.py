"""Time to produce a full schedule: vLLM's own scheduler vs the built-in simulator.

    .venv/bin/python scripts/bench_scheduler.py [--repeat 3] [--quick]

Per scenario of issue 8 (sync and async), measured in one run: vLLM's Scheduler /
AsyncScheduler driven closed-loop by ``indexer_lib.workload.vllm_scheduler`` (building the
scheduler included, importing vLLM not: that is paid once, printed apart) and
``indexer_lib.workload.simulate``; best of ``--repeat`` runs each, and the ratio.
The simulator should be at least 10x faster: that is why sweeps default to it.
Needs vLLM (bash scripts/install_vllm.sh).
"""
from __future__ import annotations

import argparse
import sys
import time

from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, simulate

SCENARIOS = [
    ("single prefill", ClosedLoopWorkload(64, 10_240, 512), dict(max_num_batched_tokens=8192)),
    ("partial prefills", ClosedLoopWorkload(64, 10_240, 512),
     dict(max_num_batched_tokens=8192, long_prefill_token_threshold=256)),
    ("shared prefix", ClosedLoopWorkload(64, 115_000, 512, shared_prefix=111_500),
     dict(max_num_batched_tokens=8192)),
    ("large steps", ClosedLoopWorkload(16, 16_384, 512), dict(max_num_batched_tokens=32_768)),
]
GOAL = 10.0


def best_time(fn, repeat: int) -> tuple[float, int]:
    best, n = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        n = sum(1 for _ in fn())
        best = min(best, time.perf_counter() - start)
    return best, n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement (best is kept)")
    p.add_argument("--quick", action="store_true", help="one run each, sync only")
    args = p.parse_args(argv)
    repeat = 1 if args.quick else max(1, args.repeat)

    from indexer_lib.workload import vllm_scheduler

    start = time.perf_counter()
    try:
        vllm_scheduler.vllm_modules()
    except vllm_scheduler.VllmUnavailable as e:
        print(f"bench_scheduler: {e}", file=sys.stderr)
        return 2
    print(f"vLLM {vllm_scheduler.vllm_version()}: import {time.perf_counter() - start:.1f} s "
          f"(once, not in the figures); best of {repeat} run(s) per cell")
    print(f"{'scenario':<17} {'mode':<5} {'steps':>6} {'vLLM s':>8} {'simulator s':>12} "
          f"{'ratio':>8}  goal >= {GOAL:g}x")
    worst_ratio = float("inf")
    for name, workload, settings in SCENARIOS:
        for async_scheduling in ((False,) if args.quick else (False, True)):
            config = SchedulerConfig(**settings, async_scheduling=async_scheduling)
            t_vllm, n_vllm = best_time(lambda: vllm_scheduler.schedule(workload, config), repeat)
            t_sim, n_sim = best_time(lambda: simulate(workload, config), repeat)
            if n_vllm != n_sim:
                print(f"{name}: {n_vllm} steps from vLLM, {n_sim} from the simulator", file=sys.stderr)
            ratio = t_vllm / t_sim
            worst_ratio = min(worst_ratio, ratio)
            print(f"{name:<17} {'async' if async_scheduling else 'sync':<5} {n_vllm:>6} "
                  f"{t_vllm:>8.3f} {t_sim:>12.4f} {ratio:>7.0f}x  "
                  f"{'ok' if ratio >= GOAL else 'BELOW GOAL'}")
    print(f"slowest ratio {worst_ratio:.0f}x (goal >= {GOAL:g}x)")
    return 0 if worst_ratio >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())

"""Write the frontier's results for a fixed set of grids, as a reference to compare
another version of the planners with (``tests/test_frontier_reference.py``).

    PYTHONPATH=<a checkout> .venv/bin/python scripts/frontier_reference.py --out tests/data/frontier_reference.json.gz

The grids: the long-context grid (GLM-5, ISL 4K-202,752 x concurrency 1-64, every budget
and field strategy) and 200 random single points (model, engine release, strategy,
budget, free GiB, scheduler settings, temporaries drawn from a fixed seed).  Run with
``PYTHONPATH`` pointing at the checkout whose planners are the reference; the file records
that checkout's commit.
"""
from __future__ import annotations

import argparse
import gzip
import inspect
import json
import random
import subprocess
from pathlib import Path

from indexer_lib.sweep.grid import Grid
from indexer_lib.sweep.rows import model_rows

LONG_CONTEXT = dict(model="glm-5", isl=(4096, 16384, 32768, 65536, 131072, 202752),
                    concurrency=(1, 2, 4, 8, 16, 32, 64))
RESULTS = ("worst_step", "worst_rows", "worst_kv_tokens", "worst_chunks", "peak_bytes", "peak_transient_bytes",
           "max_chunks", "total_chunks", "over_budget", "budget_bytes", "oom")
KEYS = ("concurrency", "isl", "budget_mb", "strategy", "free_gib")
ENGINES = ("vllm==0.33.0", "vllm==0.32.0", "vllm==0.19.0", "vllm==0.15.1", "vllm==0.11.0",
           "sglang==0.5.23", "sglang==0.5.12", "sglang==0.5.3")
STRATEGIES = ("n-only", "vllm", "per-request", "causal", "kv-split", "fixed-shape", "engine")
MAX_LEN = {"glm-5": 202_752, "deepseek-v3.2": 163_840}


def random_grids(count: int = 200, seed: int = 0) -> list[dict]:
    """Single-point grids that cover the planners' branches; combinations a build cannot run
    (kv-split and fixed-shape on a compressed-only DeepGEMM) are drawn again."""
    rng = random.Random(seed)
    grids = []
    while len(grids) < count:
        model = rng.choice(tuple(MAX_LEN))
        engine = rng.choice(ENGINES)
        strategy = rng.choice(STRATEGIES)
        if engine == "vllm==0.33.0" and strategy in ("kv-split", "fixed-shape"):
            continue
        isl = rng.choice((rng.randint(512, 16_384), rng.randint(16_384, MAX_LEN[model] - 512)))
        grids.append(dict(
            model=model, engine=engine, strategy=(strategy,), isl=(isl,),
            concurrency=(rng.choice((1, 2, 3, 4, 8, 16, 24, 32, 48, 64)),),
            osl=rng.choice((1, 8, 64, 512)),
            budget_mb=(rng.choice((16, 64, 100, 256, 512, 1024, 2048, 4096)),),
            free_gib=(rng.choice((0.5, 1.0, 2.2, 2.63, 8.0, 20.0)),),
            shared_prefix=rng.choice((0, 0, isl // 2)),
            max_num_batched_tokens=rng.choice((2048, 4096, 8192, 16384, 32768)),
            max_num_seqs=rng.choice((16, 64, 256)),
            long_prefill_token_threshold=rng.choice((0, 256, 1024)),
            temporaries=rng.choice(("deepgemm", "reference", None)),
        ))
    return grids


def results(grid: dict) -> list[dict]:
    g = Grid.of(**grid)
    # the sweep's rows hold budget_mb as a float (None: no budget read); the reference names it
    # as the grid does
    named = {float(mb): mb for mb in g.budget_mb}
    return [{**{k: r[k] for k in KEYS + RESULTS}, "budget_mb": named.get(r["budget_mb"])} for r in model_rows(g)]


def as_json(grid: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in grid.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    source = Path(inspect.getfile(Grid)).resolve().parents[2]  # the checkout imported
    commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    cases = [{"grid": as_json(LONG_CONTEXT), "rows": results(LONG_CONTEXT)}]
    cases += [{"grid": as_json(g), "rows": results(g)} for g in random_grids()]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"planners_commit": commit, "cases": cases}, separators=(",", ":")) + "\n"
    with (gzip.open if args.out.endswith(".gz") else open)(args.out, "wt") as f:
        f.write(text)
    print(f"{len(cases)} grids, {sum(len(c['rows']) for c in cases)} rows from {source} ({commit}) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The planners and the memory model, however they are sped up, give the frontier the same
worst steps, bytes and chunk counts as the reference planners did, on the long-context grid
and on 200 random points (``tests/data/frontier_reference.json.gz``, written by
``scripts/frontier_reference.py`` from the commit it names, before the planners were
sped up; the few cases a deliberate change of the modelled scheduler moved are recorded again,
and the file names them, the commit and why under ``rerecorded``)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from indexer_lib.sweep.grid import Grid
from indexer_lib.sweep.rows import model_rows

REFERENCE = Path(__file__).resolve().parent / "data" / "frontier_reference.json.gz"


def load() -> dict:
    with gzip.open(REFERENCE, "rt") as f:
        return json.load(f)


# the scheduler the reference was recorded on where its grid named none (the grid's defaults
# then; today a grid's defaults are each release's own)
RECORDED_SCHEDULER = {"max_num_batched_tokens": (8192,), "max_num_seqs": (256,),
                      "long_prefill_token_threshold": (256,), "async_scheduling": False}


def grid_of(spec: dict) -> Grid:
    # lists become tuples, a scalar (osl, engine, ...) a one-value axis
    return Grid.of(**{**RECORDED_SCHEDULER, **spec})


def test_the_reference_holds_the_long_context_grid_and_200_random_points():
    ref = load()
    assert len(ref["planners_commit"]) == 40
    # recorded again: only cases on releases whose lone request is capped by the threshold
    assert len(ref["rerecorded"]["commit"]) == 40 and len(ref["rerecorded"]["cases"]) <= 10
    long_context, *points = ref["cases"]
    assert long_context["grid"]["isl"][-1] == 202_752 and len(long_context["rows"]) == 7 * 6 * 6 * 4
    assert len(points) >= 200
    assert len({json.dumps(p["grid"], sort_keys=True) for p in points}) == len(points)
    strategies = {p["grid"]["strategy"][0] for p in points}
    assert strategies >= {"n-only", "vllm", "per-request", "causal", "kv-split", "fixed-shape", "engine"}


def every_budget(rows: list[dict], budgets_mb) -> list[dict]:
    """The rows as the reference stored them: a strategy that reads no budget (budget_mb None,
    one row) once per budget of the grid."""
    out = []
    for r in rows:
        out += [r] if r["budget_mb"] is not None else [{**r, "budget_mb": mb} for mb in budgets_mb]
    return out


def in_order(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


@pytest.mark.fullscale
@pytest.mark.parametrize("which", ["long-context", "random points"])
def test_the_frontier_equals_the_reference_planners(which):
    ref = load()
    cases = ref["cases"][:1] if which == "long-context" else ref["cases"][1:]
    for case in cases:
        grid = grid_of(case["grid"])
        rows = list(model_rows(grid))
        ours = [{k: r[k] for k in case["rows"][0]} for r in rows]
        assert in_order(every_budget(ours, grid.budget_mb)) == in_order(case["rows"]), case["grid"]
        # computed and shown once: one row per workload and free GiB for a strategy without a budget
        once = [r for r in ours if r["budget_mb"] is None]
        assert len({(r["concurrency"], r["isl"], r["strategy"], r["free_gib"]) for r in once}) == len(once)
        assert len(rows) == grid.num_rows

"""A warm prefix cache (every prompt cached before the run, a rerun of the same seeded prompts):
the workload, the grid's rows, the command lines that take it, and what it refuses."""
from __future__ import annotations

import tempfile

import pandas as pd
import pytest

from indexer_lib.cli.auto import parse_workload
from indexer_lib.cli.main import main
from indexer_lib.notebook.plots import with_lengths
from indexer_lib.engines import release_scheduler
from indexer_lib.sweep import Grid, model_rows
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, simulate
from indexer_lib.workload.simulator import WARM_CACHE


def test_each_request_computes_its_last_block_with_its_whole_prompt():
    w = ClosedLoopWorkload(64, 10240, 64, warm_cache=True)
    steps = [s for s in simulate(w, release_scheduler("vllm==0.16.0", 64, "h200", speculative_tokens=1)) if s.batch]
    first = steps[0].batch
    assert first.step == 0 and first.num_rows == 64 * 64 and first.num_kv_tokens == 64 * 10240
    assert all(r.context_len == 10176 and r.query_len == 64 for r in first.requests)
    assert w.label == "warm cache"
    # a prompt one token past a block boundary computes that token alone (no drafts)
    w = ClosedLoopWorkload(2, 129, 1, warm_cache=True)
    (step, *_) = [s for s in simulate(w, SchedulerConfig(block_size=64)) if s.batch]
    assert [(r.context_len, r.query_len) for r in step.batch.requests] == [(128, 1), (128, 1)]


def test_the_grid_names_a_warm_cache_in_every_row():
    grid = Grid.of(model="glm-5", engine=("vllm==0.16.0",), strategy=("engine",), concurrency=(64,), isl=(10240,),
                   free_gib=(5.56,), warm_cache=True, budget_mb=(512,))
    (row,) = model_rows(grid)
    assert row["warm_cache"] is True and row["oom"]
    assert (row["worst_rows"], row["worst_kv_tokens"]) == (4096, 655_360)
    (cold,) = model_rows(grid.where(warm_cache=False))
    assert cold["warm_cache"] is False and cold["worst_kv_tokens"] < 20_000


def test_command_lines_take_a_warm_cache():
    assert parse_workload("64x10240x64:warm").warm_cache
    assert parse_workload("64x10240x64:r=0.5:warm").random_range_ratio == 0.5
    assert not parse_workload("64x10240x64").warm_cache
    with pytest.raises(ValueError, match="each at most once"):
        parse_workload("64x10240x64:warm:warm")


def test_a_warm_cache_with_a_finite_kv_cache_is_refused():
    w = ClosedLoopWorkload(8, 4096, 64, warm_cache=True)
    with pytest.raises(ValueError, match="without a warm cache"):
        list(simulate(w, SchedulerConfig(num_kv_blocks=200)))


def test_a_warm_cache_is_named_wherever_its_numbers_are(capsys):
    grid = Grid.of(model="glm-5", engine=("vllm==0.16.0",), strategy=("engine",), concurrency=(64,), isl=(10240,),
                   free_gib=(5.56,), warm_cache=True, budget_mb=(512,))
    frame = pd.DataFrame(model_rows(grid))
    assert WARM_CACHE in with_lengths("frontier", frame)
    assert WARM_CACHE not in with_lengths("frontier", frame.assign(warm_cache=False))
    with tempfile.TemporaryDirectory() as out:
        assert main(["frontier", "--model", "glm-5", "--engine", "vllm==0.16.0", "--strategy", "engine",
                     "--concurrency", "64", "--isl", "10240", "--free-gib", "5.56", "--warm-cache",
                     "--out", f"{out}/f.csv"]) == 0
    assert f"prefix cache: {WARM_CACHE}" in capsys.readouterr().out

"""The grid composed of four frozen parts: each checked once when made, named in one line when
bad; a change by name replaces only the part that holds it, and what was derived from the
others is kept; the command line's options and the notebooks' grids come from the parts' fields."""
from __future__ import annotations

import pickle
from dataclasses import fields

import pytest

from indexer_lib.checks import BadValue
from indexer_lib.cli.main import build_parser
from indexer_lib.cli.options import grid_from_args
from indexer_lib.sweep import grid as grid_module
from indexer_lib.sweep.grid import Grid
from indexer_lib.sweep.rows import spec_defaults, spec_of, RunSettings

# the settings by the names the tables, the journals and the notebooks' parameters use
FLAT_NAMES = {"model", "concurrency", "isl", "osl", "budget_mb", "strategy", "free_gib", "shared_prefix",
              "random_range_ratio", "mix", "length_seed", "max_num_batched_tokens", "max_num_seqs",
              "long_prefill_token_threshold", "async_scheduling", "speculative_tokens", "kv_cache_tokens",
              "gpu_memory_utilization", "kv_cache_dtype", "mem_fraction_static", "tp", "engine",
              "deepgemm_version", "padded", "temporaries", "workload_source", "gpu"}


def test_the_grid_is_four_parts_and_every_setting_is_in_one_of_them():
    assert [f.name for f in fields(Grid)] == ["plan", "scheduler", "deployment", "axes"]
    names = Grid.setting_names()
    assert len(names) == len(set(names)) and FLAT_NAMES <= set(names)
    grid = Grid.of(model="GLM-5", concurrency=[1, 8], isl=(2048,), budget_mb=64, engine="vllm", tp=1)
    assert grid.plan.model == grid.model == "glm-5" and grid.axes.concurrency == grid.concurrency == (1, 8)
    assert grid.budget_mb == (64.0,) and grid.engine == ("vllm==0.33.0",)
    assert grid.flat()["isl"] == (2048,) and set(grid.flat()) == set(names)
    with pytest.raises(TypeError, match="Grid has no setting 'budget'"):
        Grid.of(budget=64)
    with pytest.raises(AttributeError):
        grid.budget


def test_the_journal_spec_names_each_setting_flat():
    grid = Grid.of(concurrency=(1,), isl=(2048,), strategy=("vllm",))
    spec = spec_of(grid, RunSettings())
    # every setting by name, the default GPU left out (older journals)
    assert set(spec) == set(Grid.setting_names()) - {"gpu"} | {"mode"} and FLAT_NAMES - {"gpu"} <= set(spec)
    assert spec["isl"] == [2048] and spec["engine"] == ["vllm==0.33.0"] and spec["budget_mb"][0] == 64.0
    defaults = spec_defaults()
    assert defaults["isl"] is None and defaults["concurrency"] == [1, 4, 8, 16, 24, 32, 48, 64]
    assert FLAT_NAMES <= set(defaults)


@pytest.mark.parametrize("settings, part, name, message", [
    (dict(concurrency=0), "axes", "concurrency", "concurrency 0: must be a whole number >= 1"),
    (dict(max_num_seqs=0), "scheduler", "max_num_seqs", "max_num_seqs 0: must be a whole number >= 1"),
    (dict(tp=0), "deployment", "tp", "tp 0: must be a whole number >= 1"),
    (dict(gpu="h900"), "plan", "gpu", "h900"),
    (dict(budget_mb=()), "axes", "budget_mb", "budget_mb is empty"),
])
def test_a_bad_setting_is_refused_by_its_own_part_in_one_line(settings, part, name, message):
    with pytest.raises(BadValue, match=message) as e:
        Grid.PARTS[part](**settings)
    assert e.value.name == name and "\n" not in str(e.value)
    with pytest.raises(BadValue, match=message):
        Grid.of(**settings)


def test_moving_an_axis_replaces_the_axes_alone_and_derives_nothing_again(monkeypatch):
    grid_module.kv_caches.cache_clear()  # derived afresh here, whatever other tests derived
    grid = Grid.of(concurrency=(1, 16), isl=(2048, 10240), strategy=("vllm",), kv_cache_tokens="auto",
                   tp=8)
    derived = []
    real = grid_module.Deployment.kv_cache
    monkeypatch.setattr(grid_module.Deployment, "kv_cache", lambda self, *a: derived.append(a) or real(self, *a))
    made = []
    real_check = grid_module.GridPlan.check
    monkeypatch.setattr(grid_module.GridPlan, "check", lambda self: made.append(self) or real_check(self))
    moved = grid.where(budget_mb=128, free_gib=4.0, shared_prefix=1024)
    assert moved.budget_mb == (128.0,) and moved.free_gib == (4.0,) and moved.shared_prefix == (1024,)
    assert (moved.plan, moved.scheduler, moved.deployment) == (grid.plan, grid.scheduler, grid.deployment)
    assert moved.plan is grid.plan and moved.deployment is grid.deployment and moved.axes is not grid.axes
    assert moved.kv_cache(moved.engine[0]) == grid.kv_cache(grid.engine[0]) and derived == [] and made == []
    assert moved.where(budget_mb=128.0).axes is moved.axes  # the value it holds: nothing is made
    tokens = moved.where(max_num_batched_tokens=4096)  # a scheduler setting: the plan stays
    assert tokens.plan is grid.plan and tokens.schedulers(grid.engine[0])[0].max_num_batched_tokens == 4096
    assert made == [] and derived == []  # nor is the KV cache derived again
    other = moved.where(engine="vllm==0.19.0")  # a plan setting: made again, its KV cache derived again
    assert made and derived and other.kv_cache("vllm==0.19.0").engine == "vllm==0.19.0"


def test_a_grid_made_by_parts_or_by_name_is_one_grid_and_pickles_whole():
    by_name = Grid.of(concurrency=(1, 16), isl=(2048,), engine=("sglang==0.5.23",), mem_fraction_static=0.85)
    by_parts = Grid(Grid.PARTS["plan"](engine="sglang==0.5.23"), Grid.PARTS["scheduler"](),
                    Grid.PARTS["deployment"](mem_fraction_static=0.85),
                    Grid.PARTS["axes"](concurrency=(1, 16), isl=(2048,)))
    assert by_name == by_parts and hash(by_name) == hash(by_parts)
    back = pickle.loads(pickle.dumps(by_name))
    assert back == by_name and back.not_default() == by_name.not_default() == "mem_fraction_static=0.85 (default 0.9)"
    assert back.schedulers("sglang==0.5.23") == by_name.schedulers("sglang==0.5.23")


def test_the_frontier_command_has_an_option_for_every_setting_and_builds_the_grid_from_them():
    parser = build_parser()
    args = parser.parse_args(["frontier", "--concurrency", "1,8", "--isl", "2048,4096", "--osl", "16",
                              "--budget-mb", "64", "--strategy", "vllm,causal", "--free-gib", "3", "--seed", "2",
                              "--random-range-ratio", "0.5", "--mix", "0.1x8192", "--shared-prefix", "512",
                              "--max-num-batched-tokens", "4096", "--no-async-scheduling", "--tp", "2",
                              "--engine", "vllm==0.19.0", "--no-padding", "--temporaries", "none", "--gpu", "H100"])
    assert FLAT_NAMES <= set(vars(args))
    grid = grid_from_args(args)
    assert grid == Grid.of(concurrency=(1, 8), isl=(2048, 4096), osl=16, budget_mb=64, strategy=("vllm", "causal"),
                           free_gib=3, length_seed=2, random_range_ratio=0.5, mix="0.1x8192", shared_prefix=512,
                           max_num_batched_tokens=4096, async_scheduling=False, tp=2, engine="vllm==0.19.0",
                           padded=False, temporaries=None, gpu="h100")
    default = grid_from_args(parser.parse_args(["frontier"]))
    assert default == Grid.of()  # each option's default is its setting's


def test_a_dashboard_move_makes_again_only_the_part_its_control_is_in():
    from indexer_lib.notebook.widgets import FrontierDashboard

    dash = FrontierDashboard(Grid.of(concurrency=(1, 16), isl=(2048, 10240), strategy=("vllm",)), budget_mb=512)
    first = dash.grid
    dash.controls["budget_mb"].value = 1024
    moved = dash.grid
    assert (moved.plan, moved.scheduler, moved.deployment) == (first.plan, first.scheduler, first.deployment)
    assert moved.plan is first.plan and moved.scheduler is first.scheduler and moved.deployment is first.deployment
    assert moved.budget_mb == (1024.0,) and set(dash.frame["budget_mb"]) == {1024.0}
    dash.controls["max_num_batched_tokens"].value = 4096
    assert dash.grid.plan is first.plan and dash.grid.scheduler is not first.scheduler
    assert set(dash.frame["max_num_batched_tokens"]) == {4096}
    dash.controls["engine"].value = "vllm==0.19.0"
    assert dash.grid.plan is not first.plan and set(dash.frame["engine"]) == {"vllm==0.19.0"}

"""The plan settings, the strategies' registry and the grid: checked once when made, named in one
line when bad, hashable and picklable (worker processes and Ray get them)."""
from __future__ import annotations

import pickle

import pytest

from indexer_lib.checks import BadValue
from indexer_lib.plan import STRATEGIES, PlanSettings, get_strategy, strategy_names
from indexer_lib.memory import make_plan
from indexer_lib.sweep.executors import Local
from indexer_lib.sweep.grid import Grid
from indexer_lib.sweep.rows import model_rows
from indexer_lib.workload import StepBatch


@pytest.mark.parametrize("kwargs, name, message", [
    (dict(model="llama"), "model", "unknown model 'llama'"),
    (dict(engine="vllm==9"), "engine", "unknown engine release 'vllm==9'"),
    (dict(deepgemm_version="9.9"), "deepgemm_version", "unknown DeepGEMM version '9.9'"),
    (dict(padded="yes"), "padded", "must be true or false"),
    (dict(workspace_tokens=0), "workspace_tokens", "must be a whole number >= 1"),
    (dict(temporaries="gpu"), "temporaries", "must be one of reference, deepgemm, replay, None"),
    (dict(temporaries="engine"), "temporaries", "temporaries 'engine' is now spelled 'replay'"),
    (dict(engine="vllm==0.12.0", temporaries="replay"), "temporaries", "vllm==0.12.0 has no replayed path"),
])
def test_bad_settings_are_refused_when_made_naming_the_setting(kwargs, name, message):
    with pytest.raises(BadValue, match=message) as e:
        PlanSettings(**kwargs)
    assert e.value.name == name and "\n" not in str(e.value)


def test_settings_resolve_the_release_and_are_one_cache_key():
    bare, full = PlanSettings("glm-5", "vllm"), PlanSettings("glm-5", "vllm==0.33.0")
    assert bare == full and hash(bare) == hash(full) and bare.engine == "vllm==0.33.0"
    assert (bare.deepgemm, bare.workspace, bare.workspace_lifetime) == ("2.8", 40 * 202_752, "persistent")
    assert PlanSettings("glm-5", "vllm", deepgemm_version="2.6").deepgemm == "2.6"  # the what-if
    assert PlanSettings("glm-5").deepgemm == "2.6" and PlanSettings("glm-5").workspace == 40 * 202_752
    # the engine's own chunker runs its release's build and arithmetic, whatever ours are asked
    own = get_strategy("engine").runs_under(PlanSettings("glm-5", "vllm", deepgemm_version="2.6"))
    assert (own.deepgemm, own.padded, own.engine) == ("2.8", False, "vllm==0.33.0")
    assert get_strategy("engine").runs_under(PlanSettings("glm-5")).engine == "vllm==0.33.0"


def test_used_settings_and_grids_pickle_to_equal_ones_with_their_hash_made_afresh():
    settings = PlanSettings("glm-5", "sglang", temporaries="deepgemm")
    settings.counters, settings.own_chunker, hash(settings)  # what a plan computes and keeps
    back = pickle.loads(pickle.dumps(settings))
    assert back == settings and hash(back) == hash(settings) and "_hash" not in pickle.loads(
        pickle.dumps(settings)).__dict__
    grid = Grid.of(concurrency=(1, 16), isl=(2048, 10240), budget_mb=(512,), strategy=("vllm", "engine"))
    here = list(model_rows(grid))  # plans with the grid's settings in this process first
    assert list(model_rows(grid, Local(2))) == here  # then in worker processes, pickled


def test_the_registry_names_every_strategy_and_refuses_unknown_ones_and_options():
    assert list(STRATEGIES) == ["n-only", "vllm", "per-request", "causal", "kv-split", "fixed-shape", "engine"]
    assert strategy_names("field") == ("n-only", "vllm", "per-request", "causal")
    assert strategy_names("beyond") == ("kv-split", "fixed-shape") and strategy_names("engine") == ("engine",)
    assert get_strategy("causal", compressed=True).compressed is True
    assert get_strategy(get_strategy("per-request"), pack_factor=2.0).pack_factor == 2.0
    with pytest.raises(BadValue, match="unknown strategy 'fastest': must be one of n-only, vllm"):
        get_strategy("fastest")
    with pytest.raises(BadValue, match=r"strategy 'vllm' has no option 'compressed' \(it has no options\)"):
        get_strategy("vllm", compressed=True)
    with pytest.raises(BadValue, match=r"no option 'width' \(its options: fixed_width\)"):
        get_strategy("fixed-shape", width=4)
    # what each says it is, asked instead of its name
    budgets = {n: get_strategy(n).budget_source(None) for n in STRATEGIES}
    assert budgets["n-only"] == "none" and budgets["vllm"] == budgets["causal"] == "given"
    assert get_strategy("engine").budget_source(PlanSettings(engine="sglang").profile) == "measured"
    assert [n for n in STRATEGIES if get_strategy(n).needs_full_layout] == ["kv-split", "fixed-shape"]
    assert [n for n in STRATEGIES if not get_strategy(n).by_shapes] == ["kv-split", "fixed-shape"]


def test_a_strategy_needing_the_full_layout_is_refused_on_a_compressed_only_build():
    batch = StepBatch.from_lengths([256], [1024])
    with pytest.raises(BadValue, match="strategy 'kv-split' needs DeepGEMM's full logits layout; DeepGEMM 2.8"):
        make_plan(batch, "kv-split", 1 << 20, PlanSettings(engine="vllm==0.33.0"))
    with pytest.raises(BadValue, match="strategy 'fixed-shape' needs") as e:
        Grid.of(strategy=("fixed-shape",))  # the grid refuses it when made, not at its first point
    assert e.value.name == "strategy"
    assert make_plan(batch, "kv-split", 1 << 20, PlanSettings(engine="vllm==0.32.0")).num_chunks >= 1


@pytest.mark.parametrize("kwargs, name", [
    (dict(concurrency=(1, 0)), "concurrency"), (dict(isl=(300_000,)), "isl"), (dict(osl=()), "osl"),
    (dict(shared_prefix=(300_000,)), "shared_prefix"), (dict(max_num_batched_tokens=(1 << 40,)), "max_num_batched_tokens"),
    (dict(budget_mb=(0,)), "budget_mb"), (dict(free_gib=(-1,)), "free_gib"), (dict(engine=("tgi",)), "engine"),
    (dict(workload_source="trace"), "workload_source"), (dict(temporaries="gpu"), "temporaries"),
])
def test_a_bad_grid_is_refused_when_made_naming_the_axis(kwargs, name):
    with pytest.raises(BadValue) as e:
        Grid.of(**kwargs)
    assert e.value.name == name and "\n" not in str(e.value)


def test_the_grids_tasks_are_records_whose_ids_name_the_point():
    grid = Grid.of(concurrency=(4,), isl=(2048,), budget_mb=(64, 512), strategy=("n-only", "vllm"), free_gib=(1, 2))
    model = list(grid.tasks("model"))
    assert [t.id for t in model] == ["glm-5|c4|isl2048|osl64|prefix0|mnbt8192|seqs1024|thr0|vllm==0.33.0|n-only",
                                     "glm-5|c4|isl2048|osl64|prefix0|mnbt8192|seqs1024|thr0|vllm==0.33.0|vllm"]
    assert model[0].budgets_mb == (None,) and model[1].budgets_mb == (64, 512)
    measure = [t.id.rsplit("|", 2)[1:] for t in grid.tasks("measure")]
    assert measure[:2] == [["n-only", "free1"], ["n-only", "free2"]] and ["budget64", "free1"] in measure
    assert grid.num_rows == (1 + 2) * 2 == len(list(model_rows(grid)))

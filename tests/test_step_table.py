"""Steps of one request or two, evaluated together (``fast.step_table``: the strategy's own split on
arrays of steps) by the field's strategies and by every release's own path, give what
``StepOutcomes`` gives each step, and the frontier's worst step and a grid's rows are the same
with them as without."""
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from indexer_lib.checks import BadValue
from indexer_lib.fast import StepOutcomes
from indexer_lib.fast.step_table import step_table
from indexer_lib.plan import PlanSettings, get_strategy
from indexer_lib.presets import GIB, MIB
from indexer_lib import search
from indexer_lib.sweep import rows as sweep
from indexer_lib.sweep.grid import Grid
from indexer_lib.workload import PrefillRequest, StepBatch

from test_plan_shapes import SETUPS  # its settings variants

STRATEGIES = ("n-only", "vllm", "per-request", "causal")
MODELS = ("glm-5", "deepseek-v3.2", "deepseek-v4-flash", "qwen3.8-flash-next")
KIB = 1024
BUDGETS = [KIB, 16 * MIB, 64 * MIB, 300 * MIB, 2 * GIB]

requests = st.builds(PrefillRequest, context_len=st.integers(0, 1_100_000), query_len=st.integers(1, 9000))
# short prompts too: few rows against little K, where the cut's many runs and empty widths are
short = st.builds(PrefillRequest, context_len=st.integers(0, 3000), query_len=st.integers(1, 3000))


def plan_settings(model, setup, temporaries):
    try:
        return PlanSettings(model, temporaries=temporaries, **setup)
    except BadValue:  # V4-Flash's compressed K: modelled on some releases only
        return None


def step_by_step(strategy, settings, topk_rows, batches, budget):
    outcomes = StepOutcomes(strategy, settings, topk_rows, batches[0])
    return [outcomes.at_budgets(batch, [budget])[0] for batch in batches]


def assert_each_step(got, want, labels):
    """The evaluated outcomes (``LoneOutcomes``' arrays) are the plain path's, step by step."""
    assert len(want) == len(got.transient)
    for k, o in enumerate(want):
        assert (int(got.transient[k]), int(got.peak[k]), int(got.chunks[k]), bool(got.over_budget[k])) == \
            (o.transient, o.peak, o.chunks, o.over_budget), labels[k]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.one_of(requests, short), min_size=1, max_size=25),
       strategy=st.sampled_from(STRATEGIES), budget=st.sampled_from(BUDGETS),
       setup=st.sampled_from(SETUPS), temporaries=st.sampled_from(["deepgemm", None]),
       model=st.sampled_from(MODELS), topk_rows=st.sampled_from([None, 8192]))
def test_steps_of_one_request_give_each_steps_outcome(steps, strategy, budget, setup, temporaries, model, topk_rows):
    plan = plan_settings(model, setup, temporaries)
    assume(plan is not None)
    budget = None if strategy == "n-only" else budget
    evaluator = step_table(strategy, plan, topk_rows)
    assert evaluator is not None  # every one of these settings is reproduced
    batches = [StepBatch((r,)) for r in steps]
    got = evaluator.at_budget([r.query_len for r in steps], [r.context_len for r in steps], budget)
    assert_each_step(got, step_by_step(strategy, plan, topk_rows, batches, budget), steps)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.one_of(requests, short), st.one_of(requests, short)), min_size=1, max_size=20),
       strategy=st.sampled_from(STRATEGIES), budget=st.sampled_from(BUDGETS),
       setup=st.sampled_from(SETUPS), temporaries=st.sampled_from(["deepgemm", None]),
       model=st.sampled_from(MODELS), topk_rows=st.sampled_from([None, 8192]))
def test_steps_of_two_requests_give_each_steps_outcome(steps, strategy, budget, setup, temporaries, model,
                                                       topk_rows):
    """A step of two requests: packed together where the first fits alone and both fit (the
    field's monotone packing), else each planned on its own; identical requests too."""
    plan = plan_settings(model, setup, temporaries)
    assume(plan is not None)
    budget = None if strategy == "n-only" else budget
    steps = steps + [(a, a) for a, _ in steps[:3]]  # a run of two identical requests
    evaluator = step_table(strategy, plan, topk_rows)
    got = evaluator.at_budget([a.query_len for a, _ in steps], [a.context_len for a, _ in steps], budget,
                              second=([b.query_len for _, b in steps], [b.context_len for _, b in steps]))
    assert_each_step(got, step_by_step(strategy, plan, topk_rows, [StepBatch(pair) for pair in steps], budget), steps)


def test_a_pack_factor_that_weighs_areas_is_left_to_the_plain_path():
    """A pack factor above 1 weighs each chunk's areas request by request: planned one step at a time."""
    assert step_table(get_strategy("per-request", pack_factor=2.0), PlanSettings("glm-5", temporaries="deepgemm"),
                      None) is None


ENGINE_CASES = [("glm-5", "vllm==0.33.0"), ("glm-5", "vllm==0.19.0"), ("glm-5", "vllm==0.15.1"),
                ("deepseek-v3.2", "vllm==0.11.0"), ("deepseek-v4-flash", "vllm==0.33.0"),
                ("deepseek-v4-flash", "vllm==0.26.0"), ("deepseek-v4-pro", "vllm==0.32.0"),
                ("glm-5.3-flash", "vllm==0.33.0"), ("glm-5.2", "vllm==0.33.0"), ("glm-5", "sglang==0.5.23"),
                ("deepseek-v3.2", "sglang==0.5.3"), ("glm-5.2", "sglang==0.5.9"),
                ("deepseek-v4-flash", "sglang==0.5.23"), ("deepseek-v4-pro", "sglang==0.5.21"),
                ("deepseek-v4-flash", "sglang==0.5.17"), ("glm-5.3-flash", "sglang==0.5.23"),
                ("glm-5", "trtllm==1.4.0rc4"), ("deepseek-v3.2", "trtllm==1.3.0rc27"),
                ("deepseek-v4-flash", "trtllm==1.3.0rc15.post1"), ("glm-5.3-flash", "trtllm==1.4.0rc4"),
                ("qwen3.8-flash-next", "sglang==0.5.23")]


def random_steps(rng: random.Random, count: int) -> list[PrefillRequest]:
    """Long prompts' chunks against up to a million tokens, short ones, ones at or below top-k,
    and first chunks (nothing cached; a few rows: no compressed K yet)."""
    def one():
        kind = rng.randrange(5)
        if kind == 0:
            return PrefillRequest(rng.randrange(0, 1_100_000), rng.choice([1, rng.randrange(1, 9000), 8192]))
        if kind == 1:
            return PrefillRequest(rng.randrange(0, 3000), rng.randrange(1, 3000))
        if kind == 2:
            return PrefillRequest(rng.randrange(0, 1000), rng.randrange(1, 200))
        if kind == 3:
            return PrefillRequest(0, rng.randrange(1, 9000))
        return PrefillRequest(0, rng.randrange(1, 4))
    return [one() for _ in range(count)]


@pytest.mark.parametrize("case", ENGINE_CASES + [("deepseek-v4.1-flash", "vllm==0.33.0"),
                                                 ("deepseek-v4.1-flash", "sglang==0.5.23"),
                                                 ("qwen3.8-flash-next", "vllm==0.33.0")])
@pytest.mark.parametrize("temporaries", ["deepgemm", None])
def test_a_releases_own_chunker_is_evaluated_together(case, temporaries):
    """The ``engine`` strategy on vLLM releases: their chunker packs as ``vllm`` (the logits budget)
    or ``n-only`` (the workspace, before it), the previous chunk's logits alive while the next is
    allocated, and no logits where the release skips them (compressed and pooled K at or below
    top-k); steps of one request and of two, every DeepSeek-V4.1 kind; vLLM's QSA path (every
    row of the step against one width, each slice a view of one workspace); SGLang's DSA path
    (the step's rows against all its K, in slices where they break the budget, above the element
    gate; one call before its budget), its C4 path (the page table's width, or one long request's
    own K; one call before 0.5.21), its kpool path (every request's pooled K in whole index
    pages; no logits at or below top-k tokens), its QSA path (the step's longest K, slices of a
    multiple of 128 / heads rows) and its torch scores for DeepSeek-V4.1 (request by request,
    the previous chunk alive); TensorRT-LLM's chunks of query rows (requests packed while they
    fit, a longer one in blocks against its K up to the block's last row, each tiled at the
    element cap, one pass for a step of one chunk with nothing cached) and its kpool path (every
    row in one call as wide as the block table)."""
    model, engine = case
    rng = random.Random(f"{model} {engine} {temporaries}")
    plan = PlanSettings(model, engine, temporaries=temporaries)
    kinds = [plan.where(kind=k.name) for k in plan.preset.indexing_kinds] if plan.preset.multi_kind else [plan]
    for on in kinds:
        for topk_rows in (None, 8192):
            evaluator = step_table("engine", on, topk_rows)
            assert evaluator is not None
            # a path that reads no budget is asked without one (and, where it reads none at all,
            # with the budgets too)
            for budget in [None] if evaluator.budget_read == "none" else BUDGETS + [None] * (
                    evaluator.budget_read == "any"):
                # and steps of two requests too long to share a chunk past 512K entries of K: the
                # second's first tile allocated while the first's last is alive
                steps = random_steps(rng, 24) + [PrefillRequest(600_000, 800), PrefillRequest(0, 7500),
                                                 PrefillRequest(900_000, 8192), PrefillRequest(1000, 4000)]
                for batches in ([StepBatch((r,)) for r in steps],
                                [StepBatch(pair) for pair in zip(steps[::2], steps[1::2])]):
                    requests = list(zip(*(b.requests for b in batches)))
                    second = None if len(requests) == 1 else ([r.query_len for r in requests[1]],
                                                              [r.context_len for r in requests[1]])
                    got = evaluator.at_budget([r.query_len for r in requests[0]],
                                              [r.context_len for r in requests[0]], budget, second)
                    assert_each_step(got, step_by_step("engine", on, topk_rows, batches, budget),
                                     [(on.kind, topk_rows, budget, b.requests) for b in batches])


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_long_prompts_chunks_at_every_budget(model, strategy):
    """A long prompt's chunks against up to a million tokens of context, at the default grid's
    settings (vllm==0.33.0, the H200 path's temporaries)."""
    plan = PlanSettings(model, engine="vllm==0.33.0", temporaries="deepgemm")
    rng = random.Random(7)
    steps = [PrefillRequest(rng.randrange(0, 1_050_000, 8192), 8192 - rng.randrange(2)) for _ in range(20)]
    steps += [PrefillRequest(0, 1), PrefillRequest(0, 9000), PrefillRequest(3, 1)]
    batches = [StepBatch((r,)) for r in steps]
    evaluator = step_table(strategy, plan, 8192)
    assert evaluator is not None
    for budget in ([None] if strategy == "n-only" else [KIB] + [mb * MIB for mb in (64, 128, 256, 512, 1024, 2048)]):
        got = evaluator.at_budget([r.query_len for r in steps], [r.context_len for r in steps], budget)
        assert_each_step(got, step_by_step(strategy, plan, 8192, batches, budget), steps)


def test_every_releases_own_path_is_evaluated_together():
    """Each release the project models a model on has its own path (``plan.release_path``), and
    every path is evaluated for arrays of steps."""
    from indexer_lib.engines import gpu_refusal
    from indexer_lib.engines.profiles import engines_for
    from indexer_lib.plan import release_path
    from indexer_lib.presets import get_model, known_models

    for model in known_models():
        preset = get_model(model)
        for engine in engines_for(preset):
            if gpu_refusal(engine, "h200") is not None:
                continue  # ATOM runs only on ROCm: test_atom evaluates its path on an AMD GPU
            settings = PlanSettings(model, engine, temporaries="deepgemm")
            kinds = [settings.where(kind=k.name) for k in preset.indexing_kinds] if preset.multi_kind else [settings]
            for on in kinds:
                assert release_path(on.own_chunker) is not None, (model, engine, on.kind)
                assert step_table("engine", on, None) is not None, (model, engine, on.kind)


def test_what_it_does_not_reproduce_is_declined():
    assert step_table("kv-split", PlanSettings("glm-5", temporaries="deepgemm"), None) is None
    assert step_table("fixed-shape", PlanSettings("glm-5", temporaries="deepgemm"), None) is None
    assert step_table("engine", PlanSettings("glm-5", "sglang==0.5.23", temporaries="reference"), None) is None
    assert step_table("vllm", PlanSettings("glm-5", temporaries="reference"), None) is None
    # a build without the compressed layout: the plain path says so
    assert step_table(get_strategy("causal", compressed=True), PlanSettings("glm-5", deepgemm_version="2.1"),
                      None) is None
    # a budget the strategy refuses: the plain path refuses it
    evaluator = step_table("vllm", PlanSettings("glm-5", temporaries="deepgemm"), None)
    assert evaluator.at_budget([1], [0], None) is None


def schedules():
    """Steps of one request and of several, some repeated (a schedule's distinct steps recur)."""
    one = st.builds(lambda r: (r,), st.one_of(requests, short))
    many = st.lists(st.one_of(requests, short), min_size=2, max_size=6).map(tuple)
    return st.lists(st.one_of(one, one, many), min_size=1, max_size=30).map(
        lambda steps: [StepBatch(rs, step=i) for i, rs in enumerate(steps + steps[: len(steps) // 3])])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=schedules(), strategy=st.sampled_from(STRATEGIES), setup=st.sampled_from(SETUPS),
       temporaries=st.sampled_from(["deepgemm", None]), model=st.sampled_from(MODELS),
       topk_rows=st.sampled_from([None, 8192]))
def test_the_worst_steps_are_the_same_with_steps_evaluated_together(batches, strategy, setup, temporaries,
                                                                        model, topk_rows):
    plan = plan_settings(model, setup, temporaries)
    assume(plan is not None)
    budgets = [None] if strategy == "n-only" else [KIB, 16 * MIB, 64 * MIB, 300 * MIB, 2 * GIB]
    schedule = search.Schedule(batches)
    fast = search.worst_steps(schedule, strategy, budgets, plan, topk_rows)
    plain = search.worst_steps(schedule, strategy, budgets, plan, topk_rows, tables=False)
    assert fast == plain


@pytest.mark.parametrize("model", MODELS)
def test_the_default_grids_settings_are_evaluated_together(model):
    """The default grids (vllm==0.33.0, DeepGEMM 2.8's compressed layout only, the H200 path's
    temporaries): every one of their field strategies' settings is reproduced, none declined."""
    grid = Grid.of(model=model)
    for engine in grid.engine:
        for strategy in grid.strategy:
            if strategy in STRATEGIES:
                assert step_table(strategy, grid.settings(engine), 8192) is not None, (engine, strategy)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.one_of(requests, short), min_size=1, max_size=20),
       strategy=st.sampled_from(STRATEGIES), budget=st.sampled_from(BUDGETS),
       temporaries=st.sampled_from(["deepgemm", None]), topk_rows=st.sampled_from([None, 8192]),
       engine=st.sampled_from(["vllm==0.33.0", "sglang==0.5.23"]))
def test_deepseek_v4_1s_kinds_are_evaluated_one_at_a_time(steps, strategy, budget, temporaries, topk_rows, engine):
    """DeepSeek-V4.1 kind by kind: c2 on K compressed by 2, the c1 candidate source and consumers
    on each request's last 128 rows, in steps of one request and of two; on vLLM 0.33.0's dense
    path and on SGLang 0.5.23's torch path (its scores counted plain, its equal rows sliced at
    the padded stride, as ``Budgeting`` does)."""
    budget = None if strategy == "n-only" else budget
    model = PlanSettings("deepseek-v4.1-flash", engine, temporaries=temporaries)
    batches = [StepBatch((r,)) for r in steps]
    for kind in model.preset.indexing_kinds:
        on = model.where(kind=kind.name)
        evaluator = step_table(strategy, on, topk_rows)
        assert evaluator is not None
        got = evaluator.at_budget([r.query_len for r in steps], [r.context_len for r in steps], budget)
        assert_each_step(got, step_by_step(strategy, on, topk_rows, batches, budget),
                         [(kind.name, r) for r in steps])
        pairs = list(zip(steps, steps[1:] + steps[:1]))  # and steps of two requests
        got = evaluator.at_budget([a.query_len for a, _ in pairs], [a.context_len for a, _ in pairs], budget,
                                  second=([b.query_len for _, b in pairs], [b.context_len for _, b in pairs]))
        assert_each_step(got, step_by_step(strategy, on, topk_rows, [StepBatch(p) for p in pairs], budget),
                         [(kind.name, p) for p in pairs])
    schedule = search.Schedule([StepBatch((r,), step=i) for i, r in enumerate(steps)]
                                 + [StepBatch(p, step=len(steps) + i) for i, p in enumerate(zip(steps, steps[1:]))])
    budgets = [budget]
    assert search.worst_steps(schedule, strategy, budgets, model, topk_rows) == \
        search.worst_steps(schedule, strategy, budgets, model, topk_rows, tables=False)


pair = st.tuples(st.one_of(requests, short), st.one_of(requests, short))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two=st.booleans(), first=st.lists(pair, min_size=1, max_size=15), then=st.lists(pair, min_size=1, max_size=15),
       others=st.lists(pair, min_size=0, max_size=5), strategy=st.sampled_from(STRATEGIES),
       budget=st.sampled_from(BUDGETS), model=st.sampled_from(MODELS), seed=st.integers(0, 1000))
def test_kept_outcomes_are_looked_up_as_evaluated(two, first, then, others, strategy, budget, model, seed):
    """``keep`` evaluates steps once (two calls merge), ``at_budget`` looks any mix of them up in
    any order, and a step never kept is evaluated; steps of one request and of two alike."""
    budget = None if strategy == "n-only" else budget
    cached = step_table(strategy, PlanSettings(model, engine="vllm==0.33.0", temporaries="deepgemm"), 8192)
    evaluator = type(cached)(cached.strategy, cached.settings, cached.topk_rows)  # its own table

    def lengths(steps):
        one = ([a.query_len for a, _ in steps], [a.context_len for a, _ in steps])
        return one + ((([b.query_len for _, b in steps], [b.context_len for _, b in steps]),) if two else (None,))

    evaluator.keep(*lengths(first)[:2], [budget], lengths(first)[2])
    evaluator.keep(*lengths(then + first[:2])[:2], [budget], lengths(then + first[:2])[2])
    asked = first + then + others
    random.Random(seed).shuffle(asked)
    q, c, second = lengths(asked)
    got = evaluator.at_budget(q, c, budget, second)
    want = cached.evaluate(tuple(np.array(x) for x in (q, c) + (tuple(second) if two else ())), budget)
    for a, b in zip(got, want):
        assert a.tolist() == b.tolist()
    kept = evaluator.kept[(budget, 4 if two else 2)]  # two lengths per request
    assert kept.keys.tolist() == sorted(set(kept.keys.tolist()))  # each step once, in order
    distinct = {(a.query_len, a.context_len) + ((b.query_len, b.context_len) if two else ()) for a, b in first + then}
    assert len(kept.keys) == len(distinct)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.one_of(requests, short), min_size=1, max_size=15), two=st.booleans(),
       strategy=st.sampled_from(STRATEGIES + ("engine",)), setup=st.sampled_from(SETUPS),
       model=st.sampled_from(MODELS), budgets=st.lists(st.sampled_from(BUDGETS + [None]), min_size=1, max_size=4))
def test_budgets_evaluated_together_are_each_budget_evaluated_alone(steps, two, strategy, setup, model, budgets):
    """``keep`` evaluates every budget it is given in one pass (the budget an array, a step's
    copy for each): each budget's outcomes are those of evaluating it alone."""
    on = plan_settings(model, setup, "deepgemm")
    assume(on is not None)
    table = step_table(strategy, on, 8192)
    assume(table is not None)
    table = type(table)(table.strategy, table.settings, table.topk_rows)  # its own kept tables
    second = ([r.query_len for r in reversed(steps)], [r.context_len for r in reversed(steps)]) if two else None
    q, c = [r.query_len for r in steps], [r.context_len for r in steps]
    table.keep(q, c, budgets, second)
    for budget in budgets:
        got = table.at_budget(q, c, budget, second)
        if not table.reads(budget):
            assert got is None
            continue
        lengths = tuple(np.array(x) for x in (q, c) + (tuple(second) if two else ()))
        for a, b in zip(got, table.evaluate(lengths, budget)):
            assert a.tolist() == b.tolist()


def test_kept_budgets_are_bounded_oldest_first():
    evaluator = step_table("vllm", PlanSettings("glm-5", temporaries="deepgemm"), None)
    evaluator = type(evaluator)(evaluator.strategy, evaluator.settings, evaluator.topk_rows)
    budgets = [MIB * (k + 1) for k in range(evaluator.KEPT_TABLES + 3)]
    for budget in budgets:
        evaluator.keep([8192], [1000], [budget])
    assert list(evaluator.kept) == [(b, 2) for b in budgets[3:]]
    evaluator.keep([1], [0], [budgets[3]])  # kept again: the newest
    assert list(evaluator.kept)[-1] == (budgets[3], 2)
    assert evaluator.kept[(budgets[3], 2)].keys.size == 2
    evaluator.keep([1], [0], [budgets[3]], second=([5], [9]))  # steps of two: a table of their own
    assert list(evaluator.kept)[-1] == (budgets[3], 4) and len(evaluator.kept) == evaluator.KEPT_TABLES


@pytest.mark.parametrize("model", ["deepseek-v4.1-flash", "glm-5"])
def test_a_grids_rows_are_the_same_with_its_steps_evaluated_first(model, monkeypatch):
    """``sweep.model_rows`` evaluates each batch of tasks' steps of one request together before
    planning them: the rows are those of every schedule evaluated on its own."""
    grid = Grid.of(model=model, isl=(4096, 65536, 200_000), concurrency=(1, 8), budget_mb=(64, 512))
    step_table.cache_clear()  # no evaluator keeps anything
    with monkeypatch.context() as m:
        m.setattr(sweep, "with_steps_evaluated", lambda grid, tasks: tasks)
        alone = list(sweep.model_rows(grid))
    assert not any(e.kept for e in _evaluators(grid))
    together = list(sweep.model_rows(grid))
    assert any(e.kept for e in _evaluators(grid))  # they were looked up
    assert together == alone


def _evaluators(grid):
    settings = grid.settings(grid.engine[0])
    kinds = [settings.of_kind(k.name) for k in settings.preset.indexing_kinds] if settings.preset.multi_kind \
        else [settings]
    found = [step_table(get_strategy(s), k, 8192) for s in grid.strategy for k in kinds]
    return [e for e in found if e is not None]


def test_kept_steps_are_bounded_over_every_evaluator(monkeypatch):
    """Past ``KEPT_STEPS`` steps in all, every evaluator's tables are emptied, and what was asked
    is still evaluated right."""
    from indexer_lib.fast import step_table as tables

    monkeypatch.setattr(tables, "KEPT_STEPS", 10)
    monkeypatch.setattr(tables, "_kept", [0])
    settings = PlanSettings("glm-5", temporaries="deepgemm")
    made = [step_table(s, settings, None) for s in ("vllm", "causal")]
    one, other = (type(e)(e.strategy, e.settings, e.topk_rows) for e in made)
    one.keep(list(range(1, 7)), [0] * 6, [MIB])
    other.keep(list(range(1, 5)), [0] * 4, [MIB])
    assert one.kept and other.kept and tables._kept == [10]
    other.keep([9], [9], [MIB])  # the eleventh: every table emptied, this one kept alone
    assert not one.kept and other.kept[(MIB, 2)].keys.size == 1 and tables._kept == [1]
    got = one.at_budget([3], [0], MIB)
    assert got.transient.tolist() == made[0].evaluate((np.array([3]), np.array([0])), MIB).transient.tolist()

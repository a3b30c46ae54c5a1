"""A frontier plans steps by their chunks' shapes (``plan_shapes``, ``shapes_peak``): the same
strategy code as ``make_plan`` with another builder, and the same peak as ``memory_report``.
These tests hold the two paths equal on random batches and settings, and check that a request
sliced alone is remembered exactly (its slices and its budget interval)."""
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer_lib.memory import memory_report, shapes_peak
from indexer_lib.plan import SHAPE_STRATEGIES, make_plan, plan_shapes
from indexer_lib.plan import builders
from indexer_lib.plan.builders import ShapeBuilder
from indexer_lib.shapes import MIB
from indexer_lib.workload import PrefillRequest, StepBatch

requests = st.builds(PrefillRequest, context_len=st.integers(0, 300_000), query_len=st.integers(1, 9000))
batches = st.lists(requests, min_size=1, max_size=40).map(lambda rs: StepBatch(tuple(rs)))
# the project's DeepGEMM, the compressed-only 2.8, the oldest; engines with each workspace lifetime
setups = st.sampled_from([
    dict(),
    dict(deepgemm_version="2.1"),
    dict(engine="vllm==0.33.0"),  # DeepGEMM 2.8: the compressed layout only
    dict(engine="vllm==0.12.0"),  # a K buffer per chunk
    dict(engine="vllm==0.19.0", padded=False),
    dict(engine="sglang==0.5.23"),  # the K workspace and top-k output per call
    dict(workspace_tokens=200_000),  # small enough that some requests break it
])


def both_ways(batch, strategy, budget_mb, setup, backend, model="glm-5"):
    budget = None if strategy == "n-only" else int(budget_mb * MIB)
    plan = make_plan(batch, strategy, budget, model=model, **setup)
    report = memory_report(plan, topk_rows=8192, backend=backend)
    shaped = plan_shapes(batch, strategy, budget, model=model, **setup)
    transient, peak = shapes_peak(shaped, topk_rows=8192, backend=backend)
    return plan, report, shaped, transient, peak


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches, strategy=st.sampled_from(SHAPE_STRATEGIES), budget_mb=st.sampled_from([1, 16, 64, 300, 2048]),
       setup=setups, backend=st.sampled_from(["deepgemm", None]), model=st.sampled_from(["glm-5", "deepseek-v3.2"]))
def test_the_shapes_give_the_plans_count_limits_interval_and_peak(batch, strategy, budget_mb, setup, backend, model):
    plan, report, shaped, transient, peak = both_ways(batch, strategy, budget_mb, setup, backend, model)
    assert shaped.num_chunks == plan.num_chunks
    assert shaped.over_budget == plan.over_budget
    assert shaped.plan.budget_stable == plan.budget_stable
    assert (transient, peak) == (report.peak_transient, report.peak)
    distinct = dict.fromkeys((c.num_rows, c.logits_cols, c.compressed, c.alloc_rows, c.kv_tokens, c.gather)
                             for c in plan.chunks)
    assert shaped.shapes == tuple(distinct)
    assert shaped.plan.chunks == ()
    assert shaped.plan == plan.__class__(**{**plan.__dict__, "chunks": ()})


def test_a_request_sliced_alone_is_remembered_with_its_budget_interval():
    rng = random.Random(7)
    steps = [StepBatch(tuple(PrefillRequest(rng.choice([0, 4096, 131072]), rng.choice([256, 8192]))
                             for _ in range(rng.randint(1, 12)))) for _ in range(60)]
    budgets = [int(mb * MIB) for mb in (16, 64, 256)]
    for strategy in ("vllm", "causal"):
        builders._LONE.clear()
        cold = [make_plan(s, strategy, b, model="glm-5") for s in steps for b in budgets]
        assert len(builders._LONE) < len(steps) * len(budgets)  # the same requests came back
        warm = [make_plan(s, strategy, b, model="glm-5") for s in steps for b in budgets]
        assert warm == cold
        assert [p.budget_stable for p in warm] == [p.budget_stable for p in cold]
        # a remembered slicing narrows the interval as the slicing did: the plan holds at both ends
        for plan in warm[:40]:
            low, high = plan.budget_stable
            for budget in (max(low, 1), 4 * low + 1 if high is None else high - 1):
                builders._LONE.clear()
                assert make_plan(plan.batch, strategy, budget, model="glm-5").chunks == plan.chunks


def test_what_the_shapes_cannot_count_is_refused_by_name():
    batch = StepBatch((PrefillRequest(100_000, 4096),))
    with pytest.raises(ValueError, match="'kv-split'.*plan_shapes plans one of n-only"):
        plan_shapes(batch, "kv-split", 64 * MIB)
    shaped = plan_shapes(batch, "vllm", 64 * MIB)
    with pytest.raises(ValueError, match="backend 'reference'.*windows"):
        shapes_peak(shaped, backend="reference")
    with pytest.raises(ValueError, match="logits_alive 2"):
        shapes_peak(shaped._replace(plan=shaped.plan.__class__(**{**shaped.plan.__dict__, "logits_alive": 2})))
    with pytest.raises(ValueError, match="column-split"):
        ShapeBuilder(batch, None).add(0, 1, 0, 4, 256, True, False, kv_start=256)


runs = st.lists(st.tuples(st.integers(1, 2048), st.integers(0, 250_000), st.integers(1, 40)), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=runs, strategy=st.sampled_from(["n-only", "vllm", "per-request", "causal", "kv-split", "fixed-shape"]),
       budget_mb=st.sampled_from([0.5, 16, 64, 256, 2048]), version=st.sampled_from(["2.6", "2.8"]),
       workspace=st.sampled_from([None, 400_000]))
def test_runs_of_identical_requests_planned_at_once_give_the_request_by_request_plan(runs, strategy, budget_mb,
                                                                                    version, workspace):
    """A run of identical requests is decided once (sliced alone, or packed in equal groups):
    the same chunks, shapes and budget interval as asking request by request."""
    if version == "2.8" and strategy in ("kv-split", "fixed-shape"):
        return
    requests = tuple(PrefillRequest(ctx, q) for q, ctx, count in runs for _ in range(count))
    batch, one_by_one = StepBatch(requests), StepBatch(requests)
    one_by_one.__dict__["repeats"] = [1] * len(requests)  # every request its own run
    if workspace is not None and max(batch.seq_lens) > workspace:
        workspace = None
    budget = None if strategy == "n-only" else max(1, round(budget_mb * MIB))
    plans = [make_plan(b, strategy, budget, workspace, "glm-5", version) for b in (batch, one_by_one)]
    assert plans[0].chunks == plans[1].chunks and plans[0].budget_stable == plans[1].budget_stable
    if strategy in SHAPE_STRATEGIES:
        shaped = [plan_shapes(b, strategy, budget, workspace, "glm-5", version) for b in (batch, one_by_one)]
        assert shaped[0] == shaped[1]

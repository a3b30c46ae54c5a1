"""A frontier plans steps by their chunks' shapes (``plan_shapes``, ``shapes_peak``): the same
strategy code as ``make_plan`` with another builder, and the same peak as ``memory_report``.
These tests hold the two paths equal on random batches and settings, and check that a request
sliced alone is remembered exactly (its slices and its budget interval).  The temporaries a peak
counts are the plan settings' (``PlanSettings.temporaries``)."""
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer_lib.engines import get_engine
from indexer_lib.fast import ShapeBuilder, ShapePlanner, ShapesPeak, plan_shapes, shapes_peak
from indexer_lib.fast import shapes as fast_shapes
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.plan import STRATEGIES, Budgeting, Piece, PlanSettings, get_strategy, strategy_names
from indexer_lib.presets import MIB
from indexer_lib.workload import PrefillRequest, StepBatch

SHAPE_STRATEGIES = tuple(n for n in STRATEGIES if get_strategy(n).by_shapes)


def budget_bytes(strategy, budget_mb, engine=None):
    """The strategy's budget at ``budget_mb`` (None where it reads none)."""
    return get_strategy(strategy).budget_bytes(budget_mb, None, PlanSettings(engine=engine))


requests = st.builds(PrefillRequest, context_len=st.integers(0, 300_000), query_len=st.integers(1, 9000))
batches = st.lists(requests, min_size=1, max_size=40).map(lambda rs: StepBatch(tuple(rs)))
# the project's DeepGEMM, the compressed-only 2.8, the oldest; engines with each workspace lifetime
SETUPS = [
    dict(),
    dict(deepgemm_version="2.1"),
    dict(engine="vllm==0.33.0"),  # DeepGEMM 2.8: the compressed layout only
    dict(engine="vllm==0.12.0"),  # a K buffer per chunk
    dict(engine="vllm==0.19.0", padded=False),
    dict(engine="sglang==0.5.23"),  # the K workspace and top-k output per call
    dict(workspace_tokens=200_000),  # small enough that some requests break it
]
setups = st.sampled_from(SETUPS)


def both_ways(batch, strategy, budget_mb, setup, temporaries, model="glm-5"):
    budget = None if strategy == "n-only" else int(budget_mb * MIB)
    settings = PlanSettings(model, temporaries=temporaries, **setup)
    plan = make_plan(batch, strategy, budget, settings)
    report = memory_report(plan, topk_rows=8192, temporaries=temporaries)
    shaped = plan_shapes(batch, strategy, budget, settings)
    transient, peak = shapes_peak(shaped, topk_rows=8192)  # the settings' temporaries
    return plan, report, shaped, transient, peak


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches, strategy=st.sampled_from(strategy_names("field")),
       budget_mb=st.sampled_from([1, 16, 64, 300, 2048]), setup=setups,
       temporaries=st.sampled_from(["deepgemm", None]), model=st.sampled_from(["glm-5", "deepseek-v3.2"]))
def test_the_shapes_give_the_plans_count_limits_interval_and_peak(batch, strategy, budget_mb, setup, temporaries,
                                                                  model):
    plan, report, shaped, transient, peak = both_ways(batch, strategy, budget_mb, setup, temporaries, model)
    assert shaped.num_chunks == plan.num_chunks
    assert shaped.over_budget == plan.over_budget
    assert shaped.plan.budget_stable == plan.budget_stable
    assert (transient, peak) == (report.peak_transient, report.peak)
    distinct = dict.fromkeys((c.num_rows, c.logits_cols, c.compressed, c.alloc_rows, c.kv_tokens, c.gather,
                              c.alloc_bytes) for c in plan.chunks)
    assert tuple(dict.fromkeys(fast_shapes.expand(shaped.shapes))) == tuple(distinct)
    assert shaped.plan.chunks == ()
    assert shaped.plan == plan.__class__(**{**plan.__dict__, "chunks": ()})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.one_of(batches, st.lists(st.builds(PrefillRequest, context_len=st.integers(0, 4000),
                                                   query_len=st.integers(1, 3000)),
                                         min_size=1, max_size=8).map(lambda rs: StepBatch(tuple(rs)))),
       strategy=st.sampled_from(strategy_names("field") + ("engine",)),
       budget_mb=st.sampled_from([1, 16, 64, 300, 2048]), temporaries=st.sampled_from(["deepgemm", None]),
       model=st.sampled_from(["deepseek-v4-flash", "deepseek-v4-pro"]))
def test_a_compressed_indexer_plans_the_same_by_shapes(batch, strategy, budget_mb, temporaries, model):
    """DeepSeek-V4's C4 indexer (K in entries of 4 tokens) on vLLM 0.33.0: the shapes give the
    plan's count, limits, interval and peak, as for an uncompressed one."""
    settings_ = PlanSettings(model, "vllm==0.33.0", temporaries=temporaries)
    budget = None if strategy == "n-only" else int(budget_mb * MIB)
    plan = make_plan(batch, strategy, budget, settings_)
    report = memory_report(plan, topk_rows=8192, temporaries=temporaries)
    shaped = plan_shapes(batch, strategy, budget, settings_)
    transient, peak = shapes_peak(shaped, topk_rows=8192)
    assert plan.batch.kv_ratio == 4 and plan.batch.seq_lens == tuple(s // 4 for s in batch.seq_lens)
    assert shaped.num_chunks == plan.num_chunks and shaped.over_budget == plan.over_budget
    assert shaped.plan.budget_stable == plan.budget_stable
    assert (transient, peak) == (report.peak_transient, report.peak)
    rows = sorted((c.token_start, c.token_end) for c in plan.chunks)
    if plan.chunks:  # every query row covered once
        assert rows[0][0] == 0 and rows[-1][1] == batch.num_rows
        assert all(a[1] == b[0] for a, b in zip(rows, rows[1:]))


# an engine's own chunker of each kind: vLLM's workspace packing with a K buffer per chunk and
# with one workspace, its logits budget (before and on the compressed-only DeepGEMM 2.8),
# SGLang's one call, its query rows against the batch's K (with and without skipping the logits
# of steps no longer than top-k), TensorRT-LLM's row chunks (without and with the element cap)
ENGINES = ["vllm==0.12.0", "vllm==0.15.1", "vllm==0.19.0", "vllm==0.33.0", "sglang==0.5.3", "sglang==0.5.6",
           "sglang==0.5.23", "trtllm==1.3.0rc15.post1", "trtllm==1.4.0rc4"]
short_or_long = st.one_of(batches, st.lists(st.builds(PrefillRequest, context_len=st.integers(0, 1500),
                                                      query_len=st.integers(1, 600)),
                                            min_size=1, max_size=6).map(lambda rs: StepBatch(tuple(rs))))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=short_or_long, engine=st.sampled_from(ENGINES), budget_mb=st.sampled_from([0.25, 1, 16, 64, 300, 2048]),
       temporaries=st.sampled_from(["deepgemm", None]), model=st.sampled_from(["glm-5", "deepseek-v3.2"]))
def test_an_engines_own_chunker_by_shapes_and_neighbours_gives_its_plans_count_interval_and_peak(
        batch, engine, budget_mb, temporaries, model):
    """The ``engine`` strategy keeps the previous chunk's logits alive while the next chunk's are
    allocated (vLLM's and SGLang's chunk loops): its peak, from the distinct pairs of neighbouring
    shapes, is ``memory_report``'s over every chunk."""
    budget = budget_bytes("engine", budget_mb, engine)
    on = PlanSettings(model, engine, temporaries=temporaries)
    plan = make_plan(batch, "engine", budget, on)
    report = memory_report(plan, topk_rows=8192, temporaries=temporaries)
    shaped = plan_shapes(batch, "engine", budget, on)
    assert shaped.plan.logits_alive == get_engine(engine).logits_alive
    assert (shaped.num_chunks, shaped.over_budget) == (plan.num_chunks, plan.over_budget)
    assert shaped.plan.budget_stable == plan.budget_stable
    assert shapes_peak(shaped, topk_rows=8192) == (report.peak_transient, report.peak)
    shape = (lambda c: (c.num_rows, c.logits_cols, c.compressed, c.alloc_rows, c.kv_tokens, c.gather, c.alloc_bytes))
    assert set(fast_shapes.expand(shaped.shapes)) == {shape(c) for c in plan.chunks}
    if shaped.pairs is not None:
        assert set(shaped.pairs) == {(shape(a) if a else None, shape(b))
                                     for a, b in zip((None,) + plan.chunks, plan.chunks)}


def test_neighbours_decide_a_peak_where_two_logits_are_alive():
    """One 64K prompt on vLLM 0.33.0's own chunker: with the previous chunk's logits alive the peak
    is above the largest chunk alone, and the shapes give it exactly."""
    batch = StepBatch((PrefillRequest(0, 65536),))
    on = PlanSettings("glm-5", "vllm==0.33.0", temporaries="deepgemm")
    plan = make_plan(batch, "engine", 512 * MIB, on)
    shaped = plan_shapes(batch, "engine", 512 * MIB, on)
    report = memory_report(plan, topk_rows=8192)
    assert plan.num_chunks > 2 and len(shaped.pairs) >= 2
    alone = max(c.logits + c.metadata + c.running + c.kv_buffer + c.temporaries for c in report.chunks)
    assert report.peak_transient > alone
    assert shapes_peak(shaped, topk_rows=8192)[0] == report.peak_transient


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(batches, min_size=2, max_size=8, unique_by=lambda b: b.num_kv_tokens), strategy=st.sampled_from(SHAPE_STRATEGIES),
       budgets_mb=st.lists(st.sampled_from([1, 16, 64, 300, 2048]), min_size=1, max_size=3),
       setup=setups, temporaries=st.sampled_from(["deepgemm", None]), topk_rows=st.sampled_from([None, 8192]))
def test_one_planner_and_one_peak_counter_serve_many_steps_and_budgets(steps, strategy, budgets_mb, setup, temporaries,
                                                                      topk_rows):
    """A frontier resolves the settings once (``ShapePlanner``, ``ShapesPeak`` from a plan of the first
    step) and plans every step and budget with them: each equals that step's own ``make_plan`` and
    ``memory_report``, whatever was planned before it (an engine without a workspace gathers each
    step's own K; the top-k buffer is each step's rows when no row count is given)."""
    if strategy == "engine":
        setup = {k: v for k, v in setup.items() if k not in ("deepgemm_version", "padded", "workspace_tokens")}
        setup.setdefault("engine", "sglang==0.5.6")
    on = PlanSettings("glm-5", temporaries=temporaries, **setup)
    planner = ShapePlanner(strategy, on)
    peak_of = ShapesPeak(planner.record(steps[0]))
    for batch in steps:
        for budget_mb in budgets_mb:
            budget = budget_bytes(strategy, budget_mb, setup.get("engine"))
            try:
                plan = make_plan(batch, strategy, budget, on)
            except ValueError:  # an engine that plans this step against no budget refuses it: both ways
                with pytest.raises(ValueError):
                    planner.shapes(batch, budget)
                continue
            report = memory_report(plan, topk_rows=topk_rows, temporaries=temporaries)
            step = planner.shapes(batch, budget)
            assert (step.num_chunks, step.over_budget, step.budget_stable, step.workspace_tokens) == \
                (plan.num_chunks, plan.over_budget, plan.budget_stable, plan.workspace_tokens)
            rows = batch.num_rows if topk_rows is None else topk_rows
            assert peak_of(step.shapes, step.pairs, step.workspace_tokens, rows) == \
                (report.peak_transient, report.peak)


def test_a_request_sliced_alone_is_remembered_with_its_budget_interval():
    # the memo of cuts serves the shape path (make_plan cuts every request afresh)
    rng = random.Random(7)
    steps = [StepBatch(tuple(PrefillRequest(rng.choice([0, 4096, 131072]), rng.choice([256, 8192]))
                             for _ in range(rng.randint(1, 12)))) for _ in range(60)]
    budgets = [int(mb * MIB) for mb in (16, 64, 256)]
    on = PlanSettings("glm-5")
    for strategy in ("vllm", "causal"):
        fast_shapes._CUTS.clear()
        cold = [plan_shapes(s, strategy, b, on) for s in steps for b in budgets]
        assert fast_shapes._CUTS.entries < len(steps) * len(budgets)  # the same requests came back
        warm = [plan_shapes(s, strategy, b, on) for s in steps for b in budgets]
        assert warm == cold
        assert [p.plan.budget_stable for p in warm] == [p.plan.budget_stable for p in cold]
        # and both are the plain plan's, counts and interval
        plain = [make_plan(s, strategy, b, on) for s in steps for b in budgets]
        assert [(p.num_chunks, p.plan.budget_stable) for p in warm] == [(p.num_chunks, p.budget_stable) for p in plain]
        # a remembered slicing narrows the interval as the slicing did: the plan holds at both ends
        for shaped, plan in zip(warm[:40], plain):
            low, high = shaped.plan.budget_stable
            for budget in (max(low, 1), 4 * low + 1 if high is None else high - 1):
                fast_shapes._CUTS.clear()
                again = plan_shapes(plan.batch, strategy, budget, on)
                assert (again.num_chunks, again.over_budget, again.shapes) == \
                    (shaped.num_chunks, shaped.over_budget, shaped.shapes)
                assert make_plan(plan.batch, strategy, budget, on).chunks == plan.chunks


def test_what_the_shapes_cannot_count_is_refused_by_name():
    batch = StepBatch((PrefillRequest(100_000, 4096),))
    with pytest.raises(ValueError, match="'kv-split'.*plan it with make_plan"):
        plan_shapes(batch, "kv-split", 64 * MIB)
    with pytest.raises(ValueError, match="temporaries 'reference'.*windows"):
        shapes_peak(plan_shapes(batch, "vllm", 64 * MIB, PlanSettings(temporaries="reference")))
    shaped = plan_shapes(batch, "vllm", 64 * MIB, PlanSettings(temporaries="deepgemm"))
    with pytest.raises(ValueError, match="logits_alive 2"):
        shapes_peak(shaped._replace(plan=shaped.plan.__class__(**{**shaped.plan.__dict__, "logits_alive": 2})))
    b = Budgeting(PlanSettings(), 64 * MIB, batch.num_kv_tokens)
    with pytest.raises(ValueError, match="column-split"):
        ShapeBuilder(batch, b).add(Piece(0, 1, 0, 4, 256, True, False, kv_start=256))


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
    on = PlanSettings("glm-5", None, version, workspace_tokens=workspace)
    plans = [make_plan(b, strategy, budget, on) for b in (batch, one_by_one)]
    assert plans[0].chunks == plans[1].chunks and plans[0].budget_stable == plans[1].budget_stable
    if strategy in SHAPE_STRATEGIES:
        shaped = [plan_shapes(b, strategy, budget, on) for b in (batch, one_by_one)]
        assert shaped[0] == shaped[1]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups, temporaries=st.sampled_from(["deepgemm", None]),
       model=st.sampled_from(["glm-5", "deepseek-v3.2", "deepseek-v4-flash"]),
       shapes=st.lists(st.tuples(st.integers(1, 9000), st.integers(1, 1_100_000), st.booleans(),
                                 st.one_of(st.none(), st.integers(1, 9000)), st.integers(1, 1_100_000),
                                 st.booleans()), min_size=1, max_size=4))
def test_a_shapes_fast_total_is_the_memory_models(setup, temporaries, model, shapes):
    """``memory.ChunkBytes`` (a chunk's bytes from its shape, what the frontier sums) gives
    ``chunk_memory``'s total for any shape, alone and after any other shape whose logits are still
    alive."""
    if model == "deepseek-v4-flash":  # its compressed indexer is modelled on these releases only
        setup = dict(engine="sglang==0.5.23" if setup.get("engine", "").startswith("sglang") else "vllm==0.33.0")
    on = PlanSettings(model, temporaries=temporaries, **setup)
    peak_of = ShapesPeak(ShapePlanner("vllm", on).record(StepBatch((PrefillRequest(0, 8),))))
    shapes = [fast_shapes.ChunkShape(*s) for s in shapes]
    for shape in shapes:
        assert peak_of._shape_total(shape) == peak_of.memory_total((None, shape))
    for before in [None] + shapes:
        for shape in shapes:
            assert peak_of._pair_total((before, shape)) == peak_of.memory_total((before, shape))


@settings(max_examples=300, deadline=None)
@given(rows=st.integers(-1, 20_000), width=st.integers(-1, 2_000_000), k=st.integers(0, 4096),
       block_bytes=st.sampled_from([1, 4096, 2**20, 128 * 2**20]))
def test_the_topk_counter_is_the_topk_bound(rows, width, k, block_bytes):
    from indexer_lib.memory.topk_bytes import topk_counter, topk_temporaries_bytes

    assert topk_counter(k, block_bytes)(rows, width) == topk_temporaries_bytes(rows, width, k, block_bytes)


class SlicingCatcher:
    """A builder that keeps the slicing a strategy hands it for a request cut alone."""

    def __init__(self, batch, b):
        self.batch, self.b, self.slicing = batch, b, None

    def add_alone(self, i, slicing, times=1, among=True):
        self.slicing = slicing

    def runs_and_cut(self):
        """The slicing's runs, the budget interval they leave, and its slices, which ask nothing more."""
        runs = self.slicing.runs()
        interval = (self.b.stable_low, self.b.stable_high)
        slices = self.slicing.cut()
        assert (self.b.stable_low, self.b.stable_high) == interval
        return runs, interval, slices


class RowsCatcher:
    """A builder that keeps the row slices a strategy hands it for a request cut alone."""

    def __init__(self, batch, b):
        self.batch, self.b, self.run = batch, b, None

    def add_rows(self, run, times=1, among=True):
        self.run = run


@settings(max_examples=200, deadline=None)
@given(request=requests, budget_mb=st.sampled_from([None, 0.01, 1, 16, 64, 2048]), setup=setups)
def test_equal_rows_are_one_run_of_row_slices_read_alike_by_every_builder(request, budget_mb, setup):
    """vLLM's equal rows, given as one run of row slices (``RowSlices``): a plan records it slice
    by slice, slices of the same rows from the top, the first gathering; the frontier's builders
    read it as its first slice, its full slices and the rest (``equal_slices``), the same slices."""
    from indexer_lib.plan import ChunkBuilder, equal_slices
    from indexer_lib.plan.packing import slice_equal_rows

    on = PlanSettings("glm-5", **setup)
    budget = None if budget_mb is None else int(budget_mb * MIB)
    batch = StepBatch((request,))
    build = RowsCatcher(batch, Budgeting(on, budget, 10**9))
    slice_equal_rows(0, build)
    plan = ChunkBuilder(batch, Budgeting(on, budget, 10**9))
    plan.add_rows(build.run)
    slices = plan.result()
    first, full, rest = equal_slices(build.run.rows, build.run.per)
    assert [c.num_rows for c in slices] == [first] + [build.run.per] * full + ([rest] if rest else [])
    per = slices[0].rows[1]
    assert [c.rows[0] for c in slices] == list(range(0, request.query_len, per))
    assert slices[-1].rows[1] == request.query_len and all(c.num_rows == per for c in slices[:-1])
    assert [c.gather for c in slices] == [True] + [plan.every_chunk_gathers] * (len(slices) - 1)


@settings(max_examples=150, deadline=None)
@given(request=requests, budget_mb=st.sampled_from([0.001, 1, 16, 64, 300, 2048]), ratio=st.sampled_from([1, 4]),
       setup=setups)
def test_a_causal_cut_takes_the_most_rows_that_fit_and_holds_over_its_interval(request, budget_mb, ratio, setup):
    """Each causal slice has the most rows whose logits (as wide as its last row's window) fit the
    budget, or one row where none fits; the cut is the same for every budget of its interval and
    changes at its upper end."""
    from indexer_lib.plan.packing import slice_causal

    on = PlanSettings("glm-5", **setup)
    batch = StepBatch((request,)).compressed(ratio)
    r = batch.requests[0]

    def cut(budget):
        got = {}

        class Catch:
            b = Budgeting(on, budget, 10**9)

            def add_alone(self, i, slicing, times=1, among=True):
                got["slices"] = slicing.cut()

        Catch.batch = batch
        build = Catch()
        slice_causal(0, build, compressed=ratio != 1)
        return got["slices"], (build.b.stable_low, build.b.stable_high)

    budget = int(budget_mb * MIB)
    slices, (low, high) = cut(budget)
    count = on.counters[0]
    assert slices[0].q0 == 0 and slices[-1].q1 == r.query_len
    for s, after in zip(slices, slices[1:] + [None]):
        fits = count(s.q1 - s.q0, r.window(s.q1), ratio != 1) <= budget
        assert fits or (s.q1 - s.q0 == 1 and s.over)
        if after is not None:
            assert after.q0 == s.q1
            if fits:
                assert count(s.q1 + 1 - s.q0, r.window(s.q1 + 1), ratio != 1) > budget
    assert low <= budget and (high is None or budget < high)
    assert cut(low)[0] == slices and cut(max(low, (high or budget + 1) - 1))[0] == slices
    if high is not None:
        assert cut(high)[0] != slices


@settings(max_examples=150, deadline=None)
@given(request=requests, budget_mb=st.sampled_from([None, 0.001, 1, 16, 64, 300, 2048]), ratio=st.sampled_from([1, 4]),
       setup=setups, every_chunk_gathers=st.booleans())
def test_causal_runs_are_the_cut_slice_by_slice(request, budget_mb, ratio, setup, every_chunk_gathers):
    """A causal cut as runs (``Slicing.runs``, each run's slices the next rows and as wide as their
    last row's window) is its cut slice by slice, with the same budget interval; the frontier's
    record of it (``CutShapes``: a run of three or more as one ``ShapeRun``) gives back its
    shapes in order, its first and last shape and its neighbouring pairs."""
    from indexer_lib.plan.packing import slice_causal

    on = PlanSettings("glm-5", **setup)
    batch = StepBatch((request,)).compressed(ratio)
    r = batch.requests[0]
    budget = None if budget_mb is None else int(budget_mb * MIB)
    build = SlicingCatcher(batch, Budgeting(on, budget, 10**9))
    slice_causal(0, build, compressed=ratio != 1)
    assert build.slicing.growing
    runs, interval, slices = build.runs_and_cut()
    expanded = []
    for first, alike, at in runs:
        assert at is None  # one step
        m = first.q1 - first.q0
        expanded += [first] + [first._replace(q0=first.q0 + k * m, q1=first.q1 + k * m, cols=r.window(first.q1 + k * m),
                                              gather=False) for k in range(1, alike)]
    assert expanded == slices
    cut = fast_shapes.CutShapes(runs, *interval, every_chunk_gathers, r)
    shapes = [fast_shapes.ChunkShape(s.q1 - s.q0, s.cols, s.compressed, None, s.kv_tokens,
                                     s.gather or every_chunk_gathers) for s in slices]
    # distinct in order (a run may repeat a width: four rows or fewer of a 4-to-1 compressed K)
    assert list(dict.fromkeys(fast_shapes.expand(cut.shapes))) == list(dict.fromkeys(shapes))
    assert cut.count == len(slices) and (cut.first, cut.last) == (shapes[0], shapes[-1])
    assert list(cut.pairs) == list(dict.fromkeys(zip(shapes, shapes[1:])))
    assert any(type(k) is fast_shapes.ShapeRun for k in cut.shapes) == any(alike > 2 for _, alike, _ in runs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups, temporaries=st.sampled_from(["deepgemm", None]),
       model=st.sampled_from(["glm-5", "deepseek-v4-flash"]), rows=st.integers(1, 9000),
       start=st.integers(1, 1_100_000), ratio=st.sampled_from([1, 4]), count=st.integers(3, 60),
       kv_tokens=st.integers(1, 1_100_000), gather=st.booleans())
def test_a_causal_runs_total_is_its_largest_chunks(setup, temporaries, model, rows, start, ratio, count, kv_tokens,
                                                  gather):
    """A run of a causal cut counts as its largest chunk by the memory model, whether the widest
    one is taken (no term can fall as the width grows) or each is counted (the top-k's row block
    shrinks as a row widens: its bytes can fall)."""
    if model == "deepseek-v4-flash":
        setup = dict(engine="sglang==0.5.23" if setup.get("engine", "").startswith("sglang") else "vllm==0.33.0")
    on = PlanSettings(model, temporaries=temporaries, **setup)
    peak_of = ShapesPeak(ShapePlanner("causal", on).record(StepBatch((PrefillRequest(0, 8),))))
    compressed = ratio != 1
    run = fast_shapes.ShapeRun(rows, compressed, kv_tokens, gather, start, ratio, count,
                               (start + count * rows) // ratio)
    assert run.shapes()[-1].cols == run.last_cols and len(run.shapes()) == count
    assert peak_of._shape_total(run) == max(peak_of.memory_total((None, s)) for s in run.shapes())


@settings(max_examples=300, deadline=None)
@given(rows=st.integers(1, 20_000), width=st.integers(1, 2_000_000), k=st.integers(0, 4096),
       block_bytes=st.sampled_from([4096, 2**20, 128 * 2**20]), narrower=st.lists(st.integers(1, 2_000_000), max_size=8))
def test_where_one_block_holds_every_row_the_topk_bytes_only_grow_with_the_width(rows, width, k, block_bytes,
                                                                                narrower):
    from indexer_lib.memory.topk_bytes import topk_counter, topk_holds_every_row

    count = topk_counter(k, block_bytes)
    if topk_holds_every_row(k, block_bytes)(rows, width):
        widths = sorted({w for w in narrower if w <= width} | {width})
        counts = [count(rows, w) for w in widths]
        assert counts == sorted(counts)


def test_the_topk_bytes_can_fall_as_the_width_grows_where_the_block_is_full():
    """Why a causal run's middle chunks are counted where the block is full: its rows shrink as a
    row widens, and the bytes fall (128 MiB blocks, top-k 2048, 600 rows)."""
    from indexer_lib.memory.topk_bytes import topk_counter, topk_holds_every_row

    count, holds = topk_counter(2048), topk_holds_every_row(2048)
    widths = range(200_000, 200_400)
    assert not any(holds(600, w) for w in widths)
    assert any(count(600, b) < count(600, a) for a, b in zip(widths, widths[1:]))


@settings(max_examples=300, deadline=None)
@given(setup=setups, model=st.sampled_from(["glm-5", "deepseek-v4-flash"]), rows=st.integers(1, 9000),
       budget=st.integers(1, 4 << 30), compressed=st.booleans())
def test_the_widest_slice_within_a_budget_is_the_last_width_that_fits(setup, model, rows, budget, compressed):
    """``Budgeting.widest``, which a causal cut compares widths against instead of counting each
    slice: the count at that width fits the budget and one column more does not."""
    if model == "deepseek-v4-flash":
        setup = dict(engine="sglang==0.5.23" if setup.get("engine", "").startswith("sglang") else "vllm==0.33.0")
    on = PlanSettings(model, temporaries="deepgemm", **setup)
    b = Budgeting(on, budget, 10**9)
    count = on.counters[0]
    widest = b.widest(rows, compressed)
    assert widest == -1 or count(rows, widest, compressed) <= budget
    assert count(rows, widest + 1, compressed) > budget
    assert (b.stable_low, b.stable_high) == (0, None)  # it asks no question

"""Planner properties on random batches, and hand-worked cases of vLLM's rules."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer_lib.padding import DEEPGEMM_RULES
from indexer_lib.plan import KV_SPLIT_ALIGN, Budgeting, PlanSettings, get_strategy, merged_chunks, strategy_names
from indexer_lib.memory import make_plan
from indexer_lib.presets import get_model
from indexer_lib.presets import MIB
from indexer_lib.workload import PrefillRequest, StepBatch
from naive_indexer import causal_windows

PROJECT = strategy_names("field", "beyond")  # the project's six (not the engine's own chunker)
BUDGETED = [s for s in PROJECT if s != "n-only"]

requests = st.builds(
    PrefillRequest,
    context_len=st.integers(0, 5000),
    query_len=st.integers(1, 600),
)
batches = st.lists(requests, min_size=1, max_size=12).map(lambda rs: StepBatch(tuple(rs)))
versions = st.sampled_from([v for v in DEEPGEMM_RULES if DEEPGEMM_RULES[v].full_width])


def row_windows(batch, chunk):
    """(ks, ke) of every row of a chunk, in the chunk's own workspace columns."""
    reqs = batch.requests[chunk.requests[0]:chunk.requests[1]]
    ks, ke = causal_windows([r.seq_len for r in reqs], [r.query_len for r in reqs])
    return list(zip(ks, ke))[chunk.rows[0]:chunk.rows[1]]


def row_groups(plan):
    """Consecutive chunks scoring the same query rows: one group, or several column ranges."""
    groups = []
    for c in plan.chunks:
        if groups and (groups[-1][0].token_start, groups[-1][0].token_end) == (c.token_start, c.token_end):
            groups[-1].append(c)
        else:
            groups.append([c])
    return groups


def check_plan(plan):
    batch = plan.batch
    groups = row_groups(plan)
    # the row groups cover every query row once, in order
    assert groups[0][0].token_start == 0
    for a, b in zip(groups, groups[1:]):
        assert b[0].token_start == a[0].token_end
    assert groups[-1][0].token_end == batch.num_rows
    assert len({(g[0].token_start, g[0].token_end) for g in groups}) == len(groups)
    offsets = [0]
    for r in batch.requests:
        offsets.append(offsets[-1] + r.query_len)
    previous = None
    for group in groups:
        for c in group:
            r0, r1 = c.requests
            assert 0 <= r0 < r1 <= len(batch.requests)
            assert c.token_start == offsets[r0] + c.rows[0]
            assert c.token_end == offsets[r0] + c.rows[1]
            assert 0 <= c.rows[0] < c.rows[1] <= offsets[r1] - offsets[r0]
            assert c.kv_tokens == sum(r.seq_len for r in batch.requests[r0:r1])
            assert c.alloc_rows is None or c.alloc_rows >= c.num_rows
            assert c.logits_rows == (c.num_rows if c.alloc_rows is None else c.alloc_rows)
            # limits held unless flagged
            if not c.over_budget:
                assert c.kv_tokens <= plan.workspace_tokens
            # a later slice (or column range) of the same request set reuses the workspace
            same_set = previous is not None and previous.requests == c.requests
            assert c.gather == (not same_set)
            previous = c
        windows = row_windows(batch, group[0])
        if len(group) == 1:
            c = group[0]
            assert c.kv_start == 0
            # the logits are wide enough for every row's window
            if c.compressed:
                assert c.logits_cols >= max(ke - ks for ks, ke in windows)
            else:
                assert c.logits_cols >= max(ke for _, ke in windows)
                if plan.strategy == "fixed-shape":
                    assert c.logits_cols >= c.kv_tokens  # the fixed width holds every request
                else:
                    assert c.logits_cols <= c.kv_tokens
            continue
        # column ranges of one request: for every row, disjoint and covering its window
        assert all(c.requests == group[0].requests and c.num_requests == 1 and not c.compressed
                   for c in group)
        ranges = [(c.kv_start, c.kv_start + c.logits_cols) for c in group]
        assert all(lo % KV_SPLIT_ALIGN == 0 and lo < hi <= group[0].kv_tokens for lo, hi in ranges)
        for ks, ke in windows:
            cover = [(max(lo, ks), min(hi, ke)) for lo, hi in ranges if max(lo, ks) < min(hi, ke)]
            assert cover[0][0] == ks and cover[-1][1] == ke
            assert all(a[1] == b[0] for a, b in zip(cover, cover[1:]))  # disjoint, no gap
        # every range is read by some row: nothing allocated for columns no row reads
        assert ranges[-1][1] == max(ke for _, ke in windows)
    if plan.strategy == "fixed-shape":
        assert len({(c.logits_rows, c.logits_cols) for c in plan.chunks}) == 1  # one shape
        # padded up to the step's own chunks, never to the whole budget
        assert plan.chunks[0].logits_rows <= batch.num_rows


def counted(plan, chunk):
    if plan.padded:
        return chunk.logits_bytes
    return chunk.logits_rows * chunk.logits_cols * 4


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches, strategy=st.sampled_from(BUDGETED), budget=st.integers(1, 64 * MIB),
       workspace=st.integers(1, 30_000), padded=st.booleans(), version=versions,
       model=st.sampled_from(["deepseek-v3.2", "glm-5"]))
def test_budgeted_strategies_hold_every_limit(batch, strategy, budget, workspace, padded,
                                               version, model):
    plan = make_plan(batch, strategy, budget, PlanSettings(model, None, version, padded, workspace))
    check_plan(plan)
    merged = merged_chunks(plan.chunks)
    for c, column_range in zip(plan.chunks, merged):
        if not c.over_budget:
            assert counted(plan, c) <= budget
        else:
            # flagged only when even the smallest chunk breaks the budget (one row; kv-split:
            # one allocation row block, of at most 256 columns when split), or the
            # requests outgrow the workspace
            block = DEEPGEMM_RULES[version].row_multiple(get_model(model).index_heads) if padded else 1
            smallest = c.num_rows <= block and (not column_range or c.logits_cols <= KV_SPLIT_ALIGN) \
                if strategy == "kv-split" else c.num_rows == 1
            assert (smallest and counted(plan, c) > budget) or c.kv_tokens > workspace


@settings(max_examples=100, deadline=None)
@given(batch=batches, strategy=st.sampled_from(BUDGETED), budget=st.integers(1, 64 * MIB),
       padded=st.booleans(), data=st.data())
def test_plan_is_the_same_across_its_stable_budget_interval(batch, strategy, budget, padded, data):
    plan = make_plan(batch, strategy, budget, PlanSettings(padded=padded))
    low, high = plan.budget_stable
    assert low <= budget and (high is None or budget < high)
    other = data.draw(st.integers(max(low, 1), (high - 1) if high else budget * 4))
    assert make_plan(batch, strategy, other, PlanSettings(padded=padded)).chunks == plan.chunks


@settings(max_examples=100, deadline=None)
@given(batch=batches, workspace=st.integers(1, 30_000))
def test_n_only_is_bounded_by_the_workspace_alone(batch, workspace):
    plan = make_plan(batch, "n-only", None, PlanSettings(workspace_tokens=workspace))
    check_plan(plan)
    # greedy: each chunk could not take the next request
    for c in plan.chunks:
        nxt = c.requests[1]
        if c.kv_tokens <= workspace and nxt < len(batch.requests) and c.rows[0] == 0:
            assert c.kv_tokens + batch.requests[nxt].seq_len > workspace
    assert all(c.over_budget == (c.kv_tokens > workspace) for c in plan.chunks)


def spans(plan):
    return [(c.requests, c.rows, c.gather) for c in plan.chunks]


def test_vllm_slices_a_request_that_alone_breaks_the_budget():
    # E = 1000 // 4 = 250 elements; one request of 10 x 100 = 1000 > 250:
    # its own chunk, in slices of max(1, 250 // 100) = 2 rows, later slices reuse K
    batch = StepBatch.from_lengths([10, 10, 10], [100, 100, 100])
    plan = make_plan(batch, "vllm", 1000, PlanSettings(padded=False))
    assert plan.num_chunks == 15
    assert spans(plan)[:6] == [
        ((0, 1), (0, 2), True), ((0, 1), (2, 4), False), ((0, 1), (4, 6), False),
        ((0, 1), (6, 8), False), ((0, 1), (8, 10), False), ((1, 2), (0, 2), True),
    ]
    assert all(c.logits_cols == 100 and not c.over_budget for c in plan.chunks)


def test_vllm_packs_greedily_while_the_product_fits():
    # E = 100: two requests (4 rows x 20 kv = 80) fit, three (6 x 30 = 180) do not
    batch = StepBatch.from_lengths([2, 2, 2], [10, 10, 10])
    plan = make_plan(batch, "vllm", 400, PlanSettings(padded=False))
    assert spans(plan) == [((0, 2), (0, 4), True), ((2, 3), (0, 2), True)]
    assert [c.logits_cols for c in plan.chunks] == [20, 10]


def test_vllm_packs_within_the_workspace():
    batch = StepBatch.from_lengths([1, 1, 1], [10, 10, 10])
    plan = make_plan(batch, "vllm", MIB, PlanSettings(padded=False, workspace_tokens=25))
    assert spans(plan) == [((0, 2), (0, 2), True), ((2, 3), (0, 1), True)]


def test_a_request_longer_than_the_workspace_is_flagged():
    batch = StepBatch.from_lengths([4], [10])
    for strategy in PROJECT:
        budget = None if strategy == "n-only" else MIB
        plan = make_plan(batch, strategy, budget, PlanSettings(workspace_tokens=5))
        assert plan.over_budget, strategy


def test_budget_below_one_row_gives_one_row_per_chunk_flagged():
    batch = StepBatch.from_lengths([3], [1000])
    for strategy in BUDGETED:
        plan = make_plan(batch, strategy, 100)
        assert all(c.over_budget for c in plan.chunks), strategy
        if strategy == "kv-split":
            # the smallest allocation (DeepGEMM's 2-row block for H = 64) x 256-column ranges
            assert [(c.rows, c.kv_start, c.logits_cols) for c in plan.chunks] == \
                [((0, 2), s, 256) for s in (0, 256, 512)] + [((0, 2), 768, 231)] + \
                [((2, 3), s, 256) for s in (0, 256, 512)] + [((2, 3), 768, 232)]
        else:
            assert [c.num_rows for c in plan.chunks] == [1, 1, 1], strategy


def test_padded_budget_takes_fewer_rows_than_vllms_arithmetic():
    batch = StepBatch.from_lengths([4096], [4096])
    unpadded = make_plan(batch, "vllm", 16 * MIB, PlanSettings(padded=False))
    padded = make_plan(batch, "vllm", 16 * MIB, PlanSettings(deepgemm_version="2.6"))
    assert unpadded.chunks[0].num_rows == 16 * MIB // 4 // 4096 == 1024
    # stride align(4096 + 256, 256) = 4352: 16 MiB / (4352 x 4) = 963 rows, even for H = 64
    assert padded.chunks[0].num_rows == 962
    # the unpadded plan really allocates more than its budget
    assert unpadded.chunks[0].logits_bytes > 16 * MIB
    assert padded.chunks[0].logits_bytes <= 16 * MIB


def test_causal_needs_about_half_the_chunks_of_vllm_for_a_64k_prompt():
    batch = StepBatch.from_lengths([65_536], [65_536])
    vllm = make_plan(batch, "vllm", 512 * MIB)
    causal = make_plan(batch, "causal", 512 * MIB)
    assert vllm.num_chunks == 33
    assert causal.num_chunks == 18
    # early slices are narrower and take more rows
    rows = [c.num_rows for c in causal.chunks]
    assert rows == sorted(rows, reverse=True)[:1] + rows[1:] and rows[0] > rows[-1]
    assert [c.logits_cols for c in causal.chunks] == [c.token_end for c in causal.chunks]


def test_causal_compressed_packs_by_the_longest_request():
    batch = StepBatch.from_lengths([100, 100], [1000, 1000])
    on_2_6 = PlanSettings(deepgemm_version="2.6")
    full = make_plan(batch, "causal", 2 * 256 * 1200 * 4, on_2_6)
    compressed = make_plan(batch, get_strategy("causal", compressed=True), 2 * 256 * 1200 * 4, on_2_6)
    assert compressed.num_chunks == 1 and compressed.chunks[0].logits_cols == 1000
    assert compressed.chunks[0].compressed
    assert full.chunks[0].logits_cols == 2000 or full.num_chunks > 1


def test_causal_compressed_needs_deepgemm_2_2():
    batch = StepBatch.from_lengths([1], [1])
    with pytest.raises(ValueError, match="2.1 has no compressed"):
        make_plan(batch, get_strategy("causal", compressed=True), MIB, PlanSettings(deepgemm_version="2.1"))
    # 2.8 has only the compressed layout
    assert make_plan(batch, "causal", MIB, PlanSettings(deepgemm_version="2.8")).chunks[0].compressed


def test_per_request_never_packs_at_factor_one_and_packs_small_ones_above():
    batch = StepBatch.from_lengths([4, 4, 4], [4, 4, 4])
    assert make_plan(batch, "per-request", MIB).num_chunks == 3
    # two fresh 4-token prompts allocate 8 x 8 = 64 and read 2 x 10 = 20 (3.2x);
    # three allocate 144 and read 30 (4.8x)
    plan = make_plan(batch, get_strategy("per-request", pack_factor=3.5), MIB)
    assert spans(plan) == [((0, 2), (0, 8), True), ((2, 3), (0, 4), True)]
    with pytest.raises(ValueError, match="pack_factor 0.5"):
        get_strategy("per-request", pack_factor=0.5)


@pytest.mark.parametrize("strategy, budget, setup, message", [
    ("bogus", 1, {}, "unknown strategy 'bogus'"),
    ("vllm", 0, {}, "budget_bytes 0"),
    ("vllm", -5, {}, "budget_bytes -5"),
    ("vllm", None, {}, "needs a logits budget"),
    ("n-only", 1, {}, "budget_bytes must be None, not 1"),
    ("vllm", 1, dict(workspace_tokens=0), "workspace_tokens 0"),
    ("vllm", 1, dict(model="llama"), "unknown model 'llama'"),
])
def test_bad_plan_arguments_name_the_value(strategy, budget, setup, message):
    batch = StepBatch.from_lengths([1], [1])
    with pytest.raises(ValueError, match=message):  # the settings are checked as they are made
        make_plan(batch, strategy, budget, PlanSettings(**setup))


def test_an_unknown_strategy_option_names_it():
    with pytest.raises(ValueError, match="strategy 'vllm' has no option 'pack_factor'"):
        get_strategy("vllm", pack_factor=2.0)


@pytest.mark.parametrize("q, s, message", [
    ([5], [4], "query_len 5 > seq_len 4"),
    ([-1], [4], "query_len -1"),
    ([1.5], [4], "query_len 1.5"),
    ([1, 2], [4], "2 query lengths and 1 sequence lengths"),
    ([], [], "no requests"),
])
def test_bad_batches_name_the_value(q, s, message):
    with pytest.raises(ValueError, match=message):
        StepBatch.from_lengths(q, s)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches, strategy=st.sampled_from(["vllm", "per-request", "causal"]), budget=st.integers(1, 64 * MIB),
       padded=st.booleans(), model=st.sampled_from(["deepseek-v3.2", "glm-5"]))
def test_compressed_only_deepgemm_plans_hold_every_limit(batch, strategy, budget, padded, model):
    """DeepGEMM 2.8 allocates only [rows, max_seqlen_k]: every chunk is compressed, as wide as
    its longest request (causal: its last row's window), and within the budget (counted as
    allocated, or as vLLM counts it: rows x the chunk's K x 4) unless flagged, which only
    the smallest chunk (one row, or one row block padded) can be."""
    plan = make_plan(batch, strategy, budget, PlanSettings(model, None, "2.8", padded))
    check_plan(plan)
    for c in plan.chunks:
        seq_lens = batch.seq_lens[c.requests[0]:c.requests[1]]
        assert c.compressed and c.logits_cols <= max(seq_lens)
        if strategy != "causal":
            assert c.logits_cols == max(seq_lens)
        # unpadded, vLLM's arithmetic counts the chunk's K; causal its own width
        width = c.logits_cols if strategy == "causal" else c.kv_tokens
        if not c.over_budget:
            assert (c.logits_bytes if padded else c.num_rows * width * 4) <= budget
        else:
            assert c.num_rows <= DEEPGEMM_RULES["2.8"].row_multiple(get_model(model).index_heads) \
                or c.kv_tokens > plan.workspace_tokens


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 40_000)), min_size=1, max_size=40),
       strategy=st.sampled_from(["n-only", "vllm", "causal", "kv-split", "fixed-shape", "per-request"]),
       budget_mb=st.sampled_from([0.05, 1, 16, 64, 512, 4096]),
       version=st.sampled_from(["2.1", "2.6", "2.8"]), padded=st.booleans(),
       workspace=st.sampled_from([None, 50_000, 200_000]))
def test_packing_the_rest_at_once_gives_the_request_by_request_plan(monkeypatch, lengths, strategy, budget_mb,
                                                                    version, padded, workspace):
    """The shortcuts of monotone packing (a request that alone breaks a limit is sliced at once;
    one that fits asks for the whole rest) change neither the chunks nor the budget interval
    over which the plan holds."""
    from indexer_lib.plan import strategies

    if version == "2.8" and strategy in ("kv-split", "fixed-shape"):
        return
    batch = StepBatch(tuple(PrefillRequest(c, q) for q, c in lengths))
    if workspace is not None and max(batch.seq_lens) > workspace:
        workspace = None
    budget = None if strategy == "n-only" else max(1, round(budget_mb * MIB))

    def plan():
        return make_plan(batch, strategy, budget, PlanSettings("glm-5", None, version, padded, workspace))

    fast = plan()
    pack = strategies.pack
    with monkeypatch.context() as m:  # the same planners, packing request by request
        m.setattr(strategies, "pack",
                  lambda batch, b, packing, build, among=True: pack(batch, b, packing._replace(monotone=False),
                                                                    build, among))
        slow = plan()
    assert fast.chunks == slow.chunks and fast.budget_stable == slow.budget_stable


@settings(max_examples=200, deadline=None)
@given(request=requests, budget=st.integers(1, 16 * MIB), padded=st.booleans(),
       version=st.sampled_from(sorted(DEEPGEMM_RULES)))
def test_a_causal_slice_takes_the_most_rows_that_fit(request, budget, padded, version):
    """A request sliced alone causally: each slice takes the most rows whose window (context +
    its last row) fits the budget, as a search over every row count finds (one row where none
    fits).  The planner asks for the previous slice's rows first; this holds it to the plain
    search."""
    batch = StepBatch((request,))
    on = PlanSettings("glm-5", deepgemm_version=version, padded=padded)
    plan = make_plan(batch, "causal", budget, on)
    b = Budgeting(get_strategy("causal").runs_under(on), budget, plan.workspace_tokens)
    compressed = plan.chunks[0].compressed
    q0 = 0
    for c in plan.chunks:
        assert c.rows[0] == q0
        fits = [m for m in range(1, request.query_len - q0 + 1)
                if b.within(m, request.context_len + q0 + m, compressed)]
        assert c.num_rows == max(fits, default=1) and c.over_budget == (not fits)
        q0 = c.rows[1]
    assert q0 == request.query_len

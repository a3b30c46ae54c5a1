"""kv-split: column ranges merged into an exact running top-k, ties across the
range boundaries included; fixed-shape's padded allocation; both through the
reference backend, the DeepGEMM adapter (fake build) and the memory model."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_deepgemm import make_fake
from indexer_lib.run.inputs import make_inputs
from indexer_lib.run.kernels.deepgemm import DeepGemmBackend
from indexer_lib.run.kernels.merge import merge_running_topk
from indexer_lib.memory import make_plan, memory_report, padded_inputs_bytes
from indexer_lib.padding import get_rules
from indexer_lib.plan import KV_SPLIT_ALIGN, PlanSettings, get_strategy, merged_chunks
from indexer_lib.run.executor import execute
from indexer_lib.presets import MIB, get_model
from indexer_lib.run.tracer import trace
from indexer_lib.workload import StepBatch

from naive_indexer import naive_row_logits, naive_topk, rank

MODEL = "glm-5"  # H = 32: DeepGEMM 2.6 allocates rows in blocks of 4
ON_MODEL = PlanSettings(MODEL)


def range_budget(columns: int, model: str = MODEL, version: str = "2.6") -> int:
    """A budget that holds one row block x ``columns`` columns and no more."""
    rules = get_rules(version)
    return rules.logits_bytes(1, columns, get_model(model).index_heads, False)


def column_plan(batch, columns: int, settings: PlanSettings = ON_MODEL):
    plan = make_plan(batch, "kv-split", range_budget(columns), settings)
    assert any(c.kv_start for c in plan.chunks), "the budget must force column ranges"
    return plan


# -- the merge on its own --------------------------------------------------------------

def _split_merge(values: np.ndarray, k: int, cuts: list[int]) -> np.ndarray:
    """Merge the top-k of each column range of ``values`` [r, n] through merge_running_topk."""
    r, n = values.shape
    run_values = torch.full((r, k), -np.inf, dtype=torch.float32)
    run_index = torch.full((r, k), -1, dtype=torch.int32)
    bounds = [0, *cuts, n]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        part = values[:, lo:hi]
        cand = torch.tensor(np.stack([rank(row, k) for row in part]), dtype=torch.int32)
        merge_running_topk(run_values, run_index, torch.from_numpy(part.copy()), cand, lo)
    return run_index.numpy()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 300), st.integers(1, 40), st.integers(1, 5), st.data())
def test_merging_range_top_ks_equals_the_unsplit_top_k(rows, n, k, levels, data):
    # few distinct values: ties everywhere, across every cut
    raw = data.draw(st.lists(st.integers(0, levels - 1), min_size=rows * n, max_size=rows * n))
    values = (np.array(raw, dtype=np.float32).reshape(rows, n) - 1.0) * 0.5  # negatives, zeros
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, n - 1)), max_size=6)))) if n > 1 else []
    expected = np.stack([rank(row, k) for row in values])
    assert np.array_equal(_split_merge(values, k, cuts), expected)


def test_merge_treats_minus_zero_as_zero_and_keeps_the_lower_index():
    values = np.array([[0.0, -0.0, 1.0, -0.0, 0.0, 1.0]], dtype=np.float32)
    # equal values: lower index first, whichever range each one came from
    assert _split_merge(values, 4, [3]).tolist() == [[2, 5, 0, 1]]
    assert _split_merge(values, 6, [1, 2, 3, 4, 5]).tolist() == [[2, 5, 0, 1, 3, 4]]


# -- the executor with column ranges -----------------------------------------------------

def test_ties_across_every_range_boundary_are_exact():
    # one K token repeated: every logit of a row is equal, so each 256-column boundary
    # falls inside a tie and the lowest indices must win across all ranges
    batch = StepBatch.from_lengths([5, 3], [1100, 700])
    inputs = make_inputs(batch, MODEL, seed=4, distinct_keys=1)
    plan = column_plan(batch, KV_SPLIT_ALIGN)
    assert {c.logits_cols for c in plan.chunks if c.kv_start} >= {KV_SPLIT_ALIGN}
    got = execute(plan, inputs, topk=300).indices.numpy()
    assert np.array_equal(got, naive_topk(inputs, 300))
    assert got[0].tolist() == list(range(300))  # all tied: the first 300 positions


@pytest.mark.parametrize("distinct, k", [(2, 200), (3, 700), (5, 40)])
def test_split_inside_tied_runs_equals_the_naive_reference(distinct, k):
    batch = StepBatch.from_lengths([9], [1200])
    inputs = make_inputs(batch, MODEL, seed=distinct, distinct_keys=distinct)
    plan = column_plan(batch, KV_SPLIT_ALIGN)
    got = execute(plan, inputs, topk=k).indices.numpy()
    assert np.array_equal(got, naive_topk(inputs, k))
    # the test really exercises a tie at the k-th value that straddles a range boundary
    row = 8
    values = naive_row_logits(inputs, 0, row)
    kept = got[row][got[row] >= 0]
    kth = values[kept[-1]]
    tied = np.flatnonzero(values == kth)
    left_out = np.setdiff1d(tied, kept)
    assert len(left_out) and len(np.intersect1d(tied, kept))
    boundaries = [c.kv_start for c in plan.chunks if c.kv_start]
    assert any(tied.min() < b <= tied.max() for b in boundaries)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 900), st.integers(1, 9)), min_size=1, max_size=2),
       st.integers(1, 600), st.integers(0, 2**16), st.integers(1, 4),
       st.sampled_from([256, 512, 768]))
def test_any_column_split_equals_the_naive_reference(reqs, k, seed, distinct, columns):
    batch = StepBatch.from_lengths([q for _, q in reqs], [c + q for c, q in reqs])
    inputs = make_inputs(batch, MODEL, seed=seed, distinct_keys=distinct)
    plan = make_plan(batch, "kv-split", range_budget(columns), ON_MODEL)
    assert np.array_equal(execute(plan, inputs, topk=k).indices.numpy(), naive_topk(inputs, k))


def test_kv_split_meets_a_budget_below_one_row():
    # 64 MiB-like situation in miniature: one row is wider than the budget allows
    batch = StepBatch.from_lengths([6], [3000])
    budget = range_budget(1000)
    for strategy in ("vllm", "causal", "fixed-shape"):
        assert make_plan(batch, strategy, budget, ON_MODEL).over_budget, strategy
    plan = make_plan(batch, "kv-split", budget, ON_MODEL)
    assert not plan.over_budget and all(c.logits_bytes <= budget for c in plan.chunks)
    assert all(c.kv_start % KV_SPLIT_ALIGN == 0 for c in plan.chunks)


# -- memory: the model counts the running top-k, the candidates and the merge --------------

@pytest.mark.parametrize("k", [64, 6000])  # backend tiles dominate / the merge dominates
def test_model_counts_running_top_k_and_merge_exactly(k):
    batch = StepBatch.from_lengths([60, 6], [400, 1000])
    plan = column_plan(batch, KV_SPLIT_ALIGN)
    traced = trace(plan, device="cpu", topk=k)
    model = memory_report(plan, topk=k, workspace_tokens=traced.execution.workspace_tokens)
    assert traced.chunk_transient == [c.total for c in model.chunks]
    assert traced.peak_bytes == model.peak
    merged = merged_chunks(plan.chunks)
    assert all((c.running > 0) == m for c, m in zip(model.chunks, merged))


def test_model_agrees_with_the_tracer_for_a_256k_context_split_into_columns():
    # a 256K context whose single row block is wider than 2 MiB: only column ranges fit
    batch = StepBatch.from_lengths([256], [262_144])
    plan = make_plan(batch, "kv-split", 2 * MIB)
    assert not plan.over_budget and plan.num_chunks > 64
    traced = trace(plan, topk_rows=8192)
    model = memory_report(plan, topk_rows=8192)
    assert abs(traced.peak_bytes - model.peak) <= 0.01 * model.peak
    for got, want in zip(traced.chunk_transient, model.chunks):
        assert abs(got - want.total) <= 0.01 * want.total


# -- fixed-shape: one padded allocation per chunk --------------------------------------------

def test_fixed_shape_allocates_one_shape_and_the_model_counts_it():
    batch = StepBatch.from_lengths([7, 2, 30], [100, 40, 500])
    plan = make_plan(batch, get_strategy("fixed-shape", fixed_width=640), 60_000, ON_MODEL)
    assert {(c.logits_rows, c.logits_cols) for c in plan.chunks} == {(plan.chunks[0].alloc_rows, 640)}
    traced = trace(plan, device="cpu", topk=16)
    model = memory_report(plan, topk=16, workspace_tokens=traced.execution.workspace_tokens)
    sizes = {run.logits_bytes for run in traced.execution.chunks}
    assert sizes == {plan.chunks[0].logits_bytes}  # every chunk really allocated the same
    assert traced.chunk_transient == [c.total for c in model.chunks]
    inputs = make_inputs(batch, MODEL, seed=2, distinct_keys=3)
    assert np.array_equal(execute(plan, inputs, topk=16).indices.numpy(), naive_topk(inputs, 16))
    with pytest.raises(ValueError, match="fixed_width 400 < the step's longest sequence 500"):
        make_plan(batch, get_strategy("fixed-shape", fixed_width=400), 60_000, ON_MODEL)


# -- the DeepGEMM adapter (fake build on the CPU) ---------------------------------------------

def test_deepgemm_scores_a_column_range_from_an_aligned_slice():
    fake = make_fake("fp8_fp4", "2.6", version="2.6.0")
    backend = DeepGemmBackend(module=fake)
    batch = StepBatch.from_lengths([6], [1000])
    inputs = make_inputs(batch, MODEL, seed=7, distinct_keys=2)
    plan = column_plan(batch, KV_SPLIT_ALIGN)
    got = execute(plan, inputs, backend=backend, topk=100).indices.numpy()
    assert np.array_equal(got, naive_topk(inputs, 100))
    # each range's call got k from its first column: rows of 128 bytes past the workspace start
    starts = [c.kv_start for c in plan.chunks]
    base = fake.calls[0]["k_ptr"]
    assert [call["k_ptr"] - base for call in fake.calls] == [s * 128 for s in starts]
    assert [call["n"] for call in fake.calls] == [c.logits_cols for c in plan.chunks]
    assert backend.padding_mismatches == []


def test_deepgemm_refuses_a_misaligned_column_start():
    backend = DeepGemmBackend(module=make_fake("fp8_fp4", "2.6", version="2.6.0"))
    q = torch.zeros((1, 32, 128), dtype=torch.float8_e4m3fn)
    k = torch.zeros((600, 128), dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="kv_start 6: k_scale\\[6:\\] would not be 16-byte aligned"):
        backend.logits(q, k, torch.ones(600), torch.ones((1, 32)), torch.zeros(1, dtype=torch.int32),
                       torch.ones(1, dtype=torch.int32), 100, kv_start=6)


def test_deepgemm_fixed_shape_pads_rows_with_empty_windows():
    fake = make_fake("fp8_fp4", "2.6", version="2.6.0")
    backend = DeepGemmBackend(module=fake)
    batch = StepBatch.from_lengths([5, 2], [300, 80])
    inputs = make_inputs(batch, MODEL, seed=3)
    plan = make_plan(batch, "fixed-shape", 20_000, ON_MODEL)
    rows = plan.chunks[0].alloc_rows
    result = execute(plan, inputs, backend=backend, topk=20)
    assert np.array_equal(result.indices.numpy(), naive_topk(inputs, 20))
    assert {call["m"] for call in fake.calls} == {rows}  # DeepGEMM saw alloc_rows rows every time
    assert {run.logits_bytes for run in result.chunks} == {plan.chunks[0].logits_bytes}
    short = [c for c in plan.chunks if c.num_rows < rows]
    assert short, "some chunk must have fewer rows than the shape"
    model = memory_report(plan, temporaries="deepgemm", topk=20)
    for c, mem in zip(plan.chunks, model.chunks):
        assert mem.temporaries >= padded_inputs_bytes(c, get_model(MODEL))
    assert padded_inputs_bytes(short[0], get_model(MODEL)) == rows * (32 * 128 + 4 * 32 + 8)


def test_column_ranges_count_each_useful_logit_once_in_the_time_model():
    from indexer_lib.timemodel.features import chunk_useful_elements

    batch = StepBatch.from_lengths([9, 3], [1200, 40])
    useful = sum(r.query_len * r.context_len + r.query_len * (r.query_len + 1) // 2
                 for r in batch.requests)
    for strategy in ("kv-split", "fixed-shape", "causal"):
        for budget in (range_budget(256), range_budget(700), 10**7):
            plan = make_plan(batch, strategy, budget, ON_MODEL)
            assert sum(chunk_useful_elements(c, batch) for c in plan.chunks) == useful

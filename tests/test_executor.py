"""The prefill executor: any plan gives the unchunked output bit for bit, and the
naive per-row float64 reference; ties follow the rule; bad input is named."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer_lib.run.inputs import make_inputs
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.padding import get_rules
from indexer_lib.plan import PlanSettings, get_strategy, strategy_names
from indexer_lib.run.executor import execute
from indexer_lib.workload import StepBatch

from naive_indexer import naive_topk

MODEL = "glm-5"  # H = 32 halves the CPU work; deepseek-v3.2 (H = 64) has its own cases


def plans_for(batch, model=MODEL, version="2.6"):
    """Every strategy at several budgets: from whole requests to slices of a few rows."""
    settings = PlanSettings(model, deepgemm_version=version)
    whole = make_plan(batch, "n-only", None, settings)
    logits = whole.chunks[0].logits_bytes if whole.num_chunks == 1 else 1 << 20
    budgets = sorted({max(1, logits // 3), max(1, logits // 20), max(1, logits // 80)})
    plans = [whole]
    for strategy in strategy_names("field", "beyond"):
        if strategy == "n-only":
            continue
        # the strategies beyond the field at the middle budget only (CPU time): kv-split's
        # column ranges at small budgets and adversarial ties have tests/test_kv_split.py
        for budget in budgets if strategy in strategy_names("field") else budgets[1:2]:
            plans.append(make_plan(batch, strategy, budget, settings))
    for budget in budgets if get_rules(version).has_compressed else ():
        # causal in DeepGEMM's compressed (max_seqlen_k) layout
        plans.append(make_plan(batch, get_strategy("causal", compressed=True), budget, settings))
    return plans


def check_all_plans_equal(batch, inputs, k, model=MODEL, version="2.6"):
    expected = naive_topk(inputs, k)
    seen = set()
    for plan in plans_for(batch, model, version):
        key = tuple(plan.chunks)
        if key in seen:  # the same chunks run the same code: once is enough
            continue
        seen.add(key)
        result = execute(plan, inputs, topk=k)
        got = result.indices.numpy()
        assert np.array_equal(got, expected), (plan.strategy, plan.budget_bytes, plan.num_chunks)
    return expected


requests = st.lists(
    st.tuples(st.integers(0, 2000), st.integers(1, 120)),  # (context_len, query_len)
    min_size=1, max_size=3)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests, st.integers(1, 400), st.integers(0, 2**16))
def test_every_strategy_and_budget_equals_the_naive_reference(reqs, k, seed):
    batch = StepBatch.from_lengths([q for _, q in reqs], [c + q for c, q in reqs])
    inputs = make_inputs(batch, MODEL, seed=seed)
    expected = check_all_plans_equal(batch, inputs, k)
    # rows with fewer candidates than k are -1 padded after their window
    lens = [c + i + 1 for c, q in reqs for i in range(q)]
    for row, n in enumerate(lens):
        assert (expected[row, :min(n, k)] >= 0).all()
        assert (expected[row, min(n, k):] == -1).all()


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests, st.integers(1, 300), st.integers(0, 2**16), st.integers(1, 6))
def test_ties_follow_the_lower_index_rule_in_every_plan(reqs, k, seed, distinct):
    batch = StepBatch.from_lengths([q for _, q in reqs], [c + q for c, q in reqs])
    inputs = make_inputs(batch, MODEL, seed=seed, distinct_keys=distinct)
    check_all_plans_equal(batch, inputs, k)


def test_one_row_per_chunk_equals_the_naive_reference():
    # a 1-byte budget: every chunk is over budget and holds a single row
    batch = StepBatch.from_lengths([20, 1, 15], [20, 700, 300])
    inputs = make_inputs(batch, MODEL, seed=9, distinct_keys=4)
    expected = naive_topk(inputs, 40)
    for strategy in ("vllm", "per-request", "causal", "fixed-shape"):
        plan = make_plan(batch, strategy, 1, PlanSettings(MODEL))
        assert plan.num_chunks == batch.num_rows and plan.over_budget
        assert np.array_equal(execute(plan, inputs, topk=40).indices.numpy(), expected), strategy


def test_ties_are_really_exercised():
    # 3 distinct K tokens repeated: each row's logits take at most 3 values
    batch = StepBatch.from_lengths([40], [400])
    inputs = make_inputs(batch, MODEL, seed=3, distinct_keys=3)
    plan = make_plan(batch, "vllm", 20_000, PlanSettings(MODEL))
    got = execute(plan, inputs, topk=50).indices.numpy()
    from naive_indexer import naive_row_logits

    values = naive_row_logits(inputs, 0, 39)
    assert len(np.unique(values)) <= 3
    top = got[39]
    # within equal values the indices ascend
    for a, b in zip(top[:-1], top[1:]):
        assert values[a] > values[b] or (values[a] == values[b] and a < b)


def test_deepseek_shapes_and_older_padding_versions():
    batch = StepBatch.from_lengths([30, 1, 70], [30, 500, 900])
    inputs = make_inputs(batch, "deepseek-v3.2", seed=11)
    for version in ("2.1", "2.8"):
        if version == "2.8":  # compressed layout only: the causal strategy
            expected = naive_topk(inputs, 33)
            for budget in (200_000, 10**7):
                plan = make_plan(batch, "causal", budget, PlanSettings(deepgemm_version="2.8"))
                assert np.array_equal(execute(plan, inputs, topk=33).indices.numpy(), expected)
        else:
            check_all_plans_equal(batch, inputs, 33, model="deepseek-v3.2", version=version)


def test_logits_are_padded_like_deepgemm_and_counted_by_the_model():
    batch = StepBatch.from_lengths([7, 5], [100, 60])
    inputs = make_inputs(batch, MODEL, seed=1)
    for version, rows_alloc, stride in (("2.1", 12, 416), ("2.4.2", 12, 416), ("2.6", 12, 512)):
        plan = make_plan(batch, "n-only", None, PlanSettings(MODEL, deepgemm_version=version))
        result = execute(plan, inputs, topk=8)
        assert result.chunks[0].logits_bytes == rows_alloc * stride * 4
        assert result.chunks[0].logits_bytes == memory_report(plan).chunks[0].logits
        assert result.chunks[0].metadata_bytes == memory_report(plan).chunks[0].metadata


def test_output_buffer_is_persistent_and_minus_one_filled():
    batch = StepBatch.from_lengths([3], [3])
    inputs = make_inputs(batch, MODEL)
    result = execute(make_plan(batch, "vllm", 1, PlanSettings(MODEL)), inputs, topk=5, topk_rows=10)
    buf = result.topk_buffer
    assert buf.shape == (10, 5) and buf.dtype == torch.int32
    assert (buf[3:] == -1).all()
    assert buf[0].tolist() == [0, -1, -1, -1, -1]
    assert sorted(buf[1, :2].tolist()) == [0, 1] and (buf[1, 2:] == -1).all()
    assert sorted(buf[2, :3].tolist()) == [0, 1, 2] and (buf[2, 3:] == -1).all()
    assert len(result.chunks) == 3  # one row per chunk with a 1-byte budget
    assert [c.gather for c in result.chunks] == [True, False, False]


def test_workspace_is_sized_to_the_need_on_cpu_and_to_the_plan_on_meta():
    batch = StepBatch.from_lengths([10, 20], [100, 300])
    plan = make_plan(batch, "vllm", 10_000, PlanSettings(MODEL))
    cpu = execute(plan, make_inputs(batch, MODEL), topk=4)
    assert cpu.workspace_tokens == max(c.kv_tokens for c in plan.chunks if c.gather)
    meta = execute(plan, make_inputs(batch, MODEL, device="meta"), topk=4)
    assert meta.workspace_tokens == plan.workspace_tokens
    assert meta.persistent_bytes == memory_report(plan, topk=4).persistent
    with pytest.raises(ValueError, match="workspace_tokens 5: the plan gathers up to"):
        execute(plan, make_inputs(batch, MODEL), topk=4, workspace_tokens=5)


def test_a_plan_for_another_batch_is_refused():
    a = StepBatch.from_lengths([10, 20], [100, 300])
    b = StepBatch.from_lengths([10, 21], [100, 300])
    plan = make_plan(a, "vllm", 10_000, PlanSettings(MODEL))
    with pytest.raises(ValueError, match=r"plan: made for a batch of 2 requests .*query_lens \[10, 20\]"
                                         r".*inputs are for 2 requests \(query_lens \[10, 21\]"):
        execute(plan, make_inputs(b, MODEL))


def test_inputs_of_another_model_are_refused():
    batch = StepBatch.from_lengths([4], [8])
    plan = make_plan(batch, "vllm", 10_000, PlanSettings("deepseek-v3.2"))
    with pytest.raises(ValueError, match=r"inputs.q: expected torch.float8_e4m3fn \[4, 64, 128\]"
                                         r".*got torch.float8_e4m3fn \[4, 32, 128\]"):
        execute(plan, make_inputs(batch, MODEL))


def test_bad_topk_and_topk_rows_are_refused():
    batch = StepBatch.from_lengths([4], [8])
    plan = make_plan(batch, "vllm", 10_000, PlanSettings(MODEL))
    inputs = make_inputs(batch, MODEL)
    with pytest.raises(ValueError, match="topk 0: must be a whole number >= 1"):
        execute(plan, inputs, topk=0)
    with pytest.raises(ValueError, match="topk_rows 3: the step has 4 rows"):
        execute(plan, inputs, topk_rows=3)


def test_same_seed_same_output_and_deepseek_default_topk():
    batch = StepBatch.from_lengths([2], [2100])
    plan = make_plan(batch, "vllm", 512 * 2**20)
    a = execute(plan, make_inputs(batch, seed=5))
    b = execute(plan, make_inputs(batch, seed=5))
    assert a.topk == 2048
    assert torch.equal(a.indices, b.indices)
    # a 2,100-token window keeps 2,048 of them, no -1
    assert (a.indices[1] >= 0).all() and (a.indices[0, :2099] >= 0).all()


@pytest.mark.gpu
def test_cuda_run_matches_the_cpu_bit_for_bit():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False")
    batch = StepBatch.from_lengths([50, 120], [300, 1500])
    inputs = make_inputs(batch, MODEL, seed=2)
    plan = make_plan(batch, "vllm", 100_000, PlanSettings(MODEL))
    cpu = execute(plan, inputs, topk=64)
    gpu = execute(plan, inputs, device="cuda", topk=64)
    assert torch.equal(cpu.indices, gpu.indices.cpu())
    assert all(c.cuda_max_allocated is not None for c in gpu.chunks)
    assert gpu.workspace_tokens == plan.workspace_tokens

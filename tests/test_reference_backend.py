"""The reference backend: logits bit-exact whatever the tiling, DeepGEMM's padded
allocation, the top-k tie rule, and bad input named."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from indexer_lib.run.inputs import make_inputs
from indexer_lib.run.kernels import BACKENDS, get_backend
from indexer_lib.run.kernels.reference import ReferenceBackend
from indexer_lib.run.metadata import chunk_windows
from indexer_lib.plan import PlanSettings, get_strategy
from indexer_lib.memory import make_plan
from indexer_lib.workload import StepBatch

from naive_indexer import naive_row_logits, rank


def chunk_call(inputs, plan, index):
    """The arguments the executor passes for one chunk (K gathered by plain slicing)."""
    chunk = plan.chunks[index]
    ks, ke = chunk_windows(plan.batch, chunk)
    r0, r1 = chunk.requests
    start = inputs.cache_offsets[r0]
    k = inputs.k_cache[start:start + chunk.kv_tokens]
    s = inputs.k_cache_scale[start:start + chunk.kv_tokens]
    t0, t1 = chunk.token_start, chunk.token_end
    return (inputs.q[t0:t1], k, s, inputs.weights[t0:t1], torch.from_numpy(ks), torch.from_numpy(ke),
            chunk.logits_cols, chunk.compressed), {"host_windows": (ks, ke)}


@pytest.mark.parametrize("model", ["glm-5", "deepseek-v3.2"])
@pytest.mark.parametrize("compressed", [False, True])
def test_logits_equal_the_naive_float64_reference_bit_for_bit(model, compressed):
    # 150 rows cross a 128-row tile; 4,300 KV columns cross a 4,096-column tile
    batch = StepBatch.from_lengths([150, 2], [4300, 40])
    inputs = make_inputs(batch, model, seed=4)
    plan = make_plan(batch, get_strategy("causal", compressed=compressed), 10**9, PlanSettings(model))
    assert plan.num_chunks == 1
    args, hints = chunk_call(inputs, plan, 0)
    logits = ReferenceBackend().logits(*args, **hints)
    ks, ke = hints["host_windows"]
    rows = [(0, i) for i in range(150)] + [(1, 0), (1, 1)]
    for row, (b, i) in enumerate(rows):
        start = 0 if compressed else ks[row]
        got = logits[row, start:start + ke[row] - ks[row]].numpy()
        want = naive_row_logits(inputs, b, i)
        assert np.array_equal(got.view(np.int32), want.view(np.int32)), row


def test_logits_do_not_depend_on_the_chunk_shape():
    batch = StepBatch.from_lengths([300], [2000])
    inputs = make_inputs(batch, "glm-5", seed=8)
    backend = ReferenceBackend()
    whole = make_plan(batch, "n-only", None, PlanSettings("glm-5"))
    sliced = make_plan(batch, "vllm", 200_000, PlanSettings("glm-5"))  # row slices at other tile offsets
    assert sliced.num_chunks > 3
    args, hints = chunk_call(inputs, whole, 0)
    full = backend.logits(*args, **hints)
    for index, chunk in enumerate(sliced.chunks):
        args, hints = chunk_call(inputs, sliced, index)
        part = backend.logits(*args, **hints)
        t0, t1 = chunk.token_start, chunk.token_end
        ke = hints["host_windows"][1]
        for r in range(t1 - t0):
            assert torch.equal(part[r, :ke[r]], full[t0 + r, :ke[r]])


@pytest.mark.parametrize("version,heads,rows,cols,rows_alloc,stride", [
    ("2.1", 64, 3, 10, 4, 268),
    ("2.4.2", 64, 3, 10, 4, 272),
    ("2.5.0", 32, 5, 10, 8, 320),
    ("2.6", 32, 5, 300, 8, 768),
])
def test_logits_are_a_view_of_deepgemm_padded_allocation(version, heads, rows, cols, rows_alloc, stride):
    out = ReferenceBackend(version).allocate_logits(rows, cols, heads, False, "cpu")
    assert out.shape == (rows, cols) and out.stride() == (stride, 1)
    assert out.untyped_storage().nbytes() == rows_alloc * stride * 4


def test_compressed_layout_allocation_and_versions_without_it():
    out = ReferenceBackend("2.6").allocate_logits(3, 300, 64, True, "meta")
    assert out.stride() == (512, 1)  # align(align(300, 256), 256)
    with pytest.raises(ValueError, match="DeepGEMM 2.1 has no compressed"):
        ReferenceBackend("2.1").allocate_logits(3, 300, 64, True, "cpu")
    with pytest.raises(ValueError, match="DeepGEMM 2.8 has only the compressed layout"):
        ReferenceBackend("2.8").allocate_logits(3, 300, 64, False, "cpu")


def _topk(values, ks, ke, k, compressed=False):
    logits = torch.tensor(values, dtype=torch.float32)
    ks_t = torch.tensor(ks, dtype=torch.int32)
    ke_t = torch.tensor(ke, dtype=torch.int32)
    hints = {"host_windows": (np.array(ks, dtype=np.int32), np.array(ke, dtype=np.int32))}
    return ReferenceBackend().topk(logits, ks_t, ke_t, k, compressed, **hints).tolist()


def test_topk_tie_rule_windows_and_padding():
    nan = float("nan")  # outside the windows: garbage that must never be read
    values = [
        [nan, 1.0, 3.0, 1.0, 3.0, nan],  # ks 1: ties at 3 and at 1, lower index first
        [nan, 0.0, -0.0, -1.0, 0.0, nan],  # +0 and -0 are equal values
        [nan, -2.0, -1.0, -3.0, nan, nan],  # negatives; window of 3 < k: -1 padded
    ]
    ks, ke = [1, 1, 1], [5, 5, 4]
    assert _topk(values, ks, ke, 4) == [[1, 3, 0, 2], [0, 1, 3, 2], [1, 0, 2, -1]]
    assert _topk(values, ks, ke, 2) == [[1, 3], [0, 1], [1, 0]]


def test_topk_compressed_rows_start_at_column_zero():
    values = [[5.0, 5.0, 7.0, float("nan")], [1.0, 2.0, 2.0, 2.0]]
    # compressed: column c of row i is KV ks[i] + c; windows of 3 and 4
    assert _topk(values, [10, 10], [13, 14], 3, compressed=True) == [[2, 0, 1], [1, 2, 3]]


def test_topk_matches_a_sort_on_random_ties():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (40, 300), generator=g).float() * 0.5
    ks = torch.randint(0, 100, (40,), generator=g).to(torch.int32)
    ke = ks + torch.randint(1, 200, (40,), generator=g).to(torch.int32)
    # one request per row (ks differs): the backend tiles by equal-ks runs
    got = ReferenceBackend().topk(x, ks, ke, 50, host_windows=(ks.numpy(), ke.numpy()))
    for i in range(40):
        window = x[i, ks[i]:ke[i]].numpy()
        assert got[i].tolist() == rank(window, 50).tolist()


def test_bad_inputs_name_the_tensor_what_was_expected_and_what_was_given():
    batch = StepBatch.from_lengths([4], [8])
    inputs = make_inputs(batch, "glm-5")
    plan = make_plan(batch, "n-only", None, PlanSettings("glm-5"))
    args, hints = chunk_call(inputs, plan, 0)
    q, k, s, w, ks, ke, width, compressed = args
    backend = ReferenceBackend()

    def call(**change):
        a = dict(q=q, k=k, k_scale=s, weights=w, ks=ks, ke=ke)
        a.update(change)
        return backend.logits(a["q"], a["k"], a["k_scale"], a["weights"], a["ks"], a["ke"], width,
                              compressed, **hints)

    cases = [
        (dict(q=q.float()), r"q: expected dtype torch.float8_e4m3fn, got torch.float32"),
        (dict(q=torch.zeros(4, 16, 128).to(torch.float8_e4m3fn)), r"q: expected H \(index heads\) in \(32, 64\), got H = 16"),
        (dict(q=torch.zeros(4, 32, 96).to(torch.float8_e4m3fn)), r"q: expected D \(head dim\) in \(64, 128\), got D = 96"),
        (dict(k=k[:, :64]), r"k: expected shape \[N, 128\] \(D of q\), got \(8, 64\)"),
        (dict(k_scale=s[:5]), r"k_scale: expected shape \[8\] \(N of k\), got \(5,\)"),
        (dict(k_scale=s.double()), r"k_scale: expected dtype torch.float32, got torch.float64"),
        (dict(weights=w[:, :16]), r"weights: expected shape \[4, 32\] \(M, H of q\), got \(4, 16\)"),
        (dict(ks=ks.long()), r"ks: expected dtype torch.int32, got torch.int64"),
        (dict(ke=ke[:2]), r"ke: expected shape \[4\] \(M of q\), got \(2,\)"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            call(**change)


def test_get_backend_by_name():
    assert isinstance(get_backend("reference"), ReferenceBackend)
    assert get_backend("reference", deepgemm_version="2.1").deepgemm_version == "2.1"
    assert "deepgemm" in BACKENDS  # registered lazily: a missing build does not break reference
    with pytest.raises(ValueError, match=r"unknown backend 'fast': must be one of reference, deepgemm"):
        get_backend("fast")


def test_a_backend_following_another_version_refuses_the_plan():
    batch = StepBatch.from_lengths([4], [8])
    plan = make_plan(batch, "vllm", 10_000, PlanSettings(deepgemm_version="2.6"))
    with pytest.raises(ValueError, match=r"plan padded for DeepGEMM 2.6, but backend 'reference' follows 2.1"):
        ReferenceBackend("2.1").check_plan(plan)

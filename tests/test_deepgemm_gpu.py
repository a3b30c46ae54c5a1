"""The deepgemm backend on a real GPU with a real DeepGEMM (skipped elsewhere, reason printed).

Run on an H200 with the h200 extra installed:  python -m pytest -m gpu -ra
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from indexer_lib.run.inputs import make_inputs
from indexer_lib.run.kernels.checks import InputCheckError
from indexer_lib.run.metadata import chunk_windows, kv_slots
from indexer_lib.plan import PlanSettings
from indexer_lib.memory import make_plan
from indexer_lib.workload import StepBatch

pytestmark = pytest.mark.gpu


def _backend():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the deepgemm backend needs an SM90/SM100 GPU")
    major = torch.cuda.get_device_capability()[0]
    if major not in (9, 10):
        pytest.skip(f"SM{major}0 GPU: DeepGEMM's MQA-logits kernels need SM90 or SM100")
    from indexer_lib.run.kernels.deepgemm import DeepGemmBackend, DeepGemmUnavailable

    try:
        return DeepGemmBackend()
    except DeepGemmUnavailable as e:
        pytest.skip(f"no DeepGEMM with MQA-logits kernels installed ({e}): pip install -e '.[h200]'")


@pytest.fixture(scope="module")
def backend():
    return _backend()


def _chunk(model, query_lens, seq_lens, seed):
    batch = StepBatch.from_lengths(query_lens, seq_lens)
    inputs = make_inputs(batch, model, seed=seed, device="cuda")
    plan = make_plan(batch, "n-only", None, PlanSettings(model, deepgemm_version="2.6"))
    chunk = plan.chunks[0]
    hks, hke = chunk_windows(batch, chunk)
    slots = torch.from_numpy(kv_slots(batch, chunk).astype(np.int64)).cuda()
    k = inputs.k_cache.view(torch.uint8)[slots].view(torch.float8_e4m3fn)
    s = inputs.k_cache_scale[slots]
    ks, ke = torch.from_numpy(hks).cuda(), torch.from_numpy(hke).cuda()
    return inputs.q, k, s, inputs.weights, ks, ke, (hks, hke)


@pytest.mark.parametrize("model", ["deepseek-v3.2", "glm-5"])
def test_padding_is_what_the_backend_claims(backend, model):
    from indexer_lib.run.kernels.deepgemm import probe_padding
    from indexer_lib.presets import get_model

    res = probe_padding(backend, get_model(model).index_heads)
    for layout, r in res["layouts"].items():
        assert r["agrees"], (layout, r, backend.info)


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_logits_and_topk_match_the_reference(backend, compressed, seed):
    from indexer_lib.run.kernels.reference import ReferenceBackend

    if compressed and not backend.supports_compressed or not compressed and not backend.supports_full:
        pytest.skip(f"DeepGEMM {backend.info.version} has no {'compressed' if compressed else 'full'} layout")
    q, k, s, w, ks, ke, host = _chunk("deepseek-v3.2", [300, 700], [1500, 700], seed)
    width = int((host[1] - host[0]).max()) if compressed else k.shape[0]
    got = backend.logits(q, k, s, w, ks, ke, width, compressed)
    ref = ReferenceBackend("2.6")
    want = ref.logits(q, k, s, w, ks, ke, width, compressed, host_windows=host)
    num = den = 0.0
    for i in range(q.shape[0]):
        a, b = int(host[0][i]), int(host[1][i])
        g, r = (got[i, : b - a], want[i, : b - a]) if compressed else (got[i, a:b], want[i, a:b])
        num += float(((g.double() - r.double()) ** 2).sum())
        den += float((r.double() ** 2).sum())
    assert (num / den) ** 0.5 < 2e-3
    # the GPU top-k agrees exactly with the reference top-k on the same logits
    mine = backend.topk(got.clone(), ks, ke, 2048, compressed)
    theirs = ref.topk(got.clone(), ks, ke, 2048, compressed, host_windows=host)
    assert torch.equal(mine, theirs)


def test_misaligned_k_scale_is_a_clear_error_not_a_driver_error(backend):
    q, k, s, w, ks, ke, _ = _chunk("deepseek-v3.2", [64], [256], 0)
    base = torch.empty(s.shape[0] + 1, dtype=torch.float32, device="cuda")
    bad = base[1:]
    bad.copy_(s)
    with pytest.raises(InputCheckError, match="k_scale: base address"):
        backend.logits(q, k, bad, w, ks, ke, k.shape[0])
    torch.cuda.synchronize()  # the context is still healthy


def test_executor_runs_every_strategy(backend):
    from indexer_lib.run.executor import execute

    batch = StepBatch.from_lengths([512, 256], [2048, 256])
    inputs = make_inputs(batch, "deepseek-v3.2", seed=0, device="cuda")
    results = {}
    for strategy in ("n-only", "vllm", "per-request", "causal"):
        budget = None if strategy == "n-only" else 2**20
        plan = make_plan(batch, backend.strategy(strategy), budget, backend.plan_settings("deepseek-v3.2"))
        results[strategy] = execute(plan, inputs, backend, "cuda").indices
    # DeepGEMM need not round a logit the same way in every chunk shape: near-ties may
    # swap, so the sets must agree on nearly every row, not bit for bit
    first = torch.sort(results["n-only"], 1).values
    for strategy, idx in results.items():
        same = (torch.sort(idx, 1).values == first).all(1).float().mean().item()
        assert same >= 0.99, (strategy, same)

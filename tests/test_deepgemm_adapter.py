"""The deepgemm backend's version adaptation, on the CPU with fake deep_gemm modules."""
from __future__ import annotations

import pytest
import torch

from fake_deepgemm import exact_logits, install, make_fake
from naive_indexer import causal_windows, rank
from indexer_lib.run.kernels import deepgemm as dg
from indexer_lib.memory.topk_bytes import rows_per_block
from indexer_lib.plan import PlanSettings, get_strategy
from indexer_lib.memory import make_plan
from indexer_lib.workload import StepBatch


def chunk_inputs(seq_lens, query_lens, heads=64, d=128, seed=0):
    """One chunk of requests laid out back to back: q, k, k_scale, weights, ks, ke."""
    g = torch.Generator().manual_seed(seed)
    n = sum(seq_lens)
    m = sum(query_lens)
    q = (torch.randn(m, heads, d, generator=g) * 2).to(torch.float8_e4m3fn)
    k = (torch.randn(n, d, generator=g) * 2).to(torch.float8_e4m3fn)
    k_scale = torch.exp2(torch.randint(-6, 0, (n,), generator=g).to(torch.float32))
    weights = torch.randn(m, heads, generator=g) / heads
    ks, ke = causal_windows(seq_lens, query_lens)
    return q, k, k_scale, weights, torch.tensor(ks, dtype=torch.int32), torch.tensor(ke, dtype=torch.int32)


def brute_topk(values: torch.Tensor, ks, ke, k: int, compressed: bool):
    out = torch.full((values.shape[0], k), -1, dtype=torch.int32)
    for i in range(values.shape[0]):
        a, b = int(ks[i]), int(ke[i])
        row = values[i, : b - a] if compressed else values[i, a:b]
        out[i] = torch.from_numpy(rank(row.numpy(), k))
    return out


API_CASES = [
    # api, rules, expected call, full layout, compressed layout
    ("legacy", "2.1", "fp8_mqa_logits", True, False),
    ("legacy+compressed", "2.3", "fp8_mqa_logits", True, True),
    ("fp8_fp4", "2.6", "fp8_fp4_mqa_logits", True, True),
    ("fp8_fp4-compressed", "2.8", "fp8_fp4_mqa_logits", False, True),
]


@pytest.mark.parametrize("pybind", [False, True])
@pytest.mark.parametrize("api,rules,called,full,compressed", API_CASES)
def test_api_shape_detected_and_called(monkeypatch, api, rules, called, full, compressed, pybind):
    version = {"2.1": "2.1.0", "2.3": "2.3.0", "2.6": "2.6.1", "2.8": "2.8.1"}[rules]
    fake = install(monkeypatch, make_fake(api, rules, version=version, pybind=pybind))
    be = dg.DeepGemmBackend()
    assert be.info.api == api
    assert be.deepgemm_version == rules
    assert be.info.rules_source == "upstream version"
    assert (be.supports_full, be.supports_compressed) == (full, compressed)
    assert be.causal_compressed == compressed
    # plans made with the backend's strategy and settings match its build
    assert be.strategy("causal") == get_strategy("causal", compressed=compressed)
    assert be.strategy("vllm") == get_strategy("vllm")
    assert be.plan_settings("glm-5") == PlanSettings("glm-5", deepgemm_version=rules)

    q, k, s, w, ks, ke = chunk_inputs([40, 24], [10, 24])
    exact = exact_logits(q, k, s, w).to(torch.float32)
    if full:
        out = be.logits(q, k, s, w, ks, ke, width=k.shape[0])
        call = fake.calls[-1]
        assert call["api"] == called and call["clean_logits"] is False and call["max_seqlen_k"] == 0
        assert be.last_call.row_stride == be.rules.row_stride(k.shape[0])
        assert be.last_call.rows_allocated == be.rules.rows_allocated(q.shape[0], q.shape[1])
        for i in range(q.shape[0]):
            assert torch.equal(out[i, ks[i]:ke[i]], exact[i, ks[i]:ke[i]])
        ref = brute_topk(exact, ks, ke, 8, compressed=False)
        assert torch.equal(be.topk(out, ks, ke, 8), ref)
    else:
        with pytest.raises(ValueError, match="only the compressed layout"):
            be.logits(q, k, s, w, ks, ke, width=k.shape[0])
    if compressed:
        width = int((ke - ks).max())
        out = be.logits(q, k, s, w, ks, ke, width=width, compressed=True)
        call = fake.calls[-1]
        assert call["api"] == called and call["max_seqlen_k"] == width and call["clean_logits"] is False
        assert out.stride(0) == be.rules.row_stride(width, compressed=True)
        for i in range(q.shape[0]):
            a, b = int(ks[i]), int(ke[i])
            assert torch.equal(out[i, : b - a], exact[i, a:b])
        ref = brute_topk(torch.stack([torch.nn.functional.pad(exact[i, int(ks[i]):int(ke[i])],
                                                               (0, width - int(ke[i] - ks[i])))
                                      for i in range(q.shape[0])]), ks - ks, ke - ks, 8, compressed=True)
        assert torch.equal(be.topk(out, ks, ke, 8, compressed=True), ref)
    else:
        with pytest.raises(ValueError, match="no compressed"):
            be.logits(q, k, s, w, ks, ke, width=8, compressed=True)
    assert be.padding_mismatches == []


def test_sgl_wheel_is_a_known_build(monkeypatch):
    """sgl-deep-gemm 0.1.4.post1 reports its own version (0.1.4.post1), not upstream's."""
    install(monkeypatch, make_fake("fp8_fp4", "2.6", version="0.1.4.post1"))
    monkeypatch.setattr(dg, "_distribution_of", lambda module: ("sgl-deep-gemm", "0.1.4.post1"))
    be = dg.DeepGemmBackend()
    assert be.deepgemm_version == "2.6"
    assert be.info.rules_source == "known build sgl-deep-gemm 0.1.4.post1"
    assert be.info.distribution == "sgl-deep-gemm" and be.info.version == "0.1.4.post1"
    assert be.info.params[:5] == ("q", "kv", "weights", "cu_seq_len_k_start", "cu_seq_len_k_end")


def test_unknown_version_falls_back_to_the_api_shape(monkeypatch):
    install(monkeypatch, make_fake("fp8_fp4-compressed", "2.8", version="0.9.0"))
    be = dg.DeepGemmBackend()
    assert be.deepgemm_version == "2.8"
    assert "guess" in be.info.rules_source


def test_environment_override(monkeypatch):
    install(monkeypatch, make_fake("legacy+compressed", "2.5.0", version="2.5.0"))
    monkeypatch.setenv(dg.RULES_ENV, "2.5.0-initial")
    assert dg.DeepGemmBackend().deepgemm_version == "2.5.0-initial"
    monkeypatch.setenv(dg.RULES_ENV, "9.9")
    with pytest.raises(ValueError, match="unknown DeepGEMM version"):
        dg.DeepGemmBackend()


@pytest.mark.parametrize("version,rules", [
    ("2.1.0", "2.1"), ("2.2.0", "2.2"), ("2.3.1", "2.3"), ("2.4.2", "2.4.2"), ("2.4.3", "2.4.2"),
    ("2.5.0", "2.5.0"), ("2.6.0", "2.6"), ("2.7.0", "2.7"), ("2.8.1", "2.8"), ("3.0.0", "2.8"),
])
def test_upstream_version_to_rules(version, rules):
    assert dg._upstream_rules(version)[0] == rules


def test_gemm_only_build_is_refused(monkeypatch):
    install(monkeypatch, make_fake("gemm-only", "2.1", version="1.0.0"))
    with pytest.raises(dg.DeepGemmUnavailable, match="GEMM-only"):
        dg.DeepGemmBackend()


def test_vendored_copy_is_found(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "deep_gemm", None)
    vendored = make_fake("fp8_fp4-compressed", "2.8", version="2.8.1")
    vendored.__name__ = "vllm.third_party.deep_gemm"
    install(monkeypatch, vendored, name="vllm.third_party.deep_gemm")
    be = dg.DeepGemmBackend()
    assert be.info.module == "vllm.third_party.deep_gemm" and be.deepgemm_version == "2.8"


def test_kv_prefix_slices_from_row_zero(monkeypatch):
    """Without compressed rows, a causal slice passes k[:width]: same base, fewer rows."""
    fake = install(monkeypatch, make_fake("legacy", "2.1", version="2.1.0"))
    be = dg.DeepGemmBackend()
    q, k, s, w, ks, ke = chunk_inputs([64], [32])
    rows = slice(0, 8)  # the first 8 query rows end by column 32 + 8
    width = int(ke[rows].max())
    out = be.logits(q[rows].contiguous(), k, s, w[rows].contiguous(), ks[rows].contiguous(),
                    ke[rows].contiguous(), width=width)
    call = fake.calls[-1]
    assert call["n"] == width and call["k_ptr"] == k.data_ptr() and call["k_scale_ptr"] == s.data_ptr()
    assert out.shape == (8, width)
    with pytest.raises(ValueError, match="at most N"):
        be.logits(q, k, s, w, ks, ke, width=k.shape[0] + 1)


def test_plans_follow_the_backend(monkeypatch):
    install(monkeypatch, make_fake("legacy", "2.1", version="2.1.0"))
    be = dg.DeepGemmBackend()
    batch = StepBatch.from_lengths([4096], [8192])
    plan = make_plan(batch, be.strategy("causal"), 64 * 2**20, be.plan_settings("deepseek-v3.2"))
    assert not any(c.compressed for c in plan.chunks)
    be.check_plan(plan)
    other = make_plan(batch, "vllm", 64 * 2**20, PlanSettings(deepgemm_version="2.6"))
    with pytest.raises(ValueError, match="deepgemm_version='2.1'"):
        be.check_plan(other)

    install(monkeypatch, make_fake("fp8_fp4", "2.6", version="2.6.0"))
    be = dg.DeepGemmBackend()
    plan = make_plan(batch, be.strategy("causal"), 64 * 2**20, be.plan_settings("deepseek-v3.2"))
    assert all(c.compressed for c in plan.chunks)
    be.check_plan(plan)


def test_padding_mismatch_is_recorded(monkeypatch):
    """A build that pads differently from the rules it claims is caught on the first call."""
    install(monkeypatch, make_fake("fp8_fp4", "2.5.0-initial", version="2.5.0"))
    be = dg.DeepGemmBackend()
    assert be.deepgemm_version == "2.5.0"
    q, k, s, w, ks, ke = chunk_inputs([100], [20])
    be.logits(q, k, s, w, ks, ke, width=100)
    (mismatch,) = be.padding_mismatches
    assert mismatch["row_stride"] == 360 and mismatch["expected_row_stride"] == 384
    assert "2.5.0-initial" in mismatch["rules_matching"]


def test_rules_matching_separates_the_families():
    assert dg.rules_matching(260, 4, 1, 1, 64) == ["2.1", "2.2", "2.3"]
    assert dg.rules_matching(264, 2, 1, 1, 64) == ["2.4.2", "2.5.0-initial"]
    assert dg.rules_matching(320, 2, 1, 1, 64) == ["2.5.0"]
    assert dg.rules_matching(512, 2, 1, 1, 64) == ["2.6", "2.7"]
    # the compressed layout pads alike in every version: only the rows tell 2.2/2.3 apart
    assert dg.rules_matching(256, 2, 1, 1, 64, compressed=True) == [
        "2.4.2", "2.5.0-initial", "2.5.0", "2.6", "2.7", "2.8"]
    assert dg.rules_matching(256, 4, 1, 1, 64, compressed=True) == ["2.2", "2.3"]


def test_checks_run_before_the_call(monkeypatch):
    fake = install(monkeypatch, make_fake("fp8_fp4", "2.6", version="2.6.0"))
    be = dg.DeepGemmBackend()
    q, k, s, w, ks, ke = chunk_inputs([64], [16])
    base = torch.empty(k.shape[0] + 1, dtype=torch.float32)
    bad_scale = base[1:]
    bad_scale.copy_(s)
    with pytest.raises(ValueError, match="k_scale: base address"):
        be.logits(q, k, bad_scale, w, ks, ke, width=k.shape[0])
    assert fake.calls == []


def test_temporaries_bytes_counts_topk(monkeypatch):
    install(monkeypatch, make_fake("fp8_fp4", "2.6", version="2.6.0"))
    be = dg.DeepGemmBackend()
    plan = make_plan(StepBatch.from_lengths([8192], [8192]), be.strategy("vllm"), 512 * 2**20,
                     be.plan_settings("deepseek-v3.2"))
    chunk = plan.chunks[0]
    t = be.temporaries_bytes(plan, chunk, 2048)
    rows = rows_per_block(chunk.logits_cols, 2048, be.topk_block_bytes)
    assert 1 < rows < chunk.num_rows
    # one block's topk values + indices, the old and new pair while ordering, and the result
    assert t >= rows * 2048 * (2 * (4 + 8) + 8)
    # bounded by the block size, not a copy of the logits
    assert t <= be.topk_block_bytes + 6 * 8 * chunk.num_rows + 8 * chunk.logits_cols
    small = dg.DeepGemmBackend(topk_block_bytes=16 * 2**20).temporaries_bytes(plan, chunk, 2048)
    assert small < t

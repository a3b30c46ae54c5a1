"""Synthetic inputs: quantised as served, deterministic by seed, shapes only on meta."""
from __future__ import annotations

import pytest
import torch

from indexer_lib.run.inputs import make_inputs
from indexer_lib.workload import StepBatch

BATCH = StepBatch.from_lengths([5, 3], [20, 3])


def test_shapes_and_dtypes_follow_the_model():
    for model, heads in (("deepseek-v3.2", 64), ("glm-5", 32)):
        x = make_inputs(BATCH, model)
        assert x.q.shape == (8, heads, 128) and x.q.dtype == torch.float8_e4m3fn
        assert x.weights.shape == (8, heads) and x.weights.dtype == torch.float32
        assert x.k_cache.shape == (23, 128) and x.k_cache.dtype == torch.float8_e4m3fn
        assert x.k_cache_scale.shape == (23,) and x.k_cache_scale.dtype == torch.float32
        assert x.cache_offsets == (0, 20)


def test_same_seed_same_bits_other_seed_other_bits():
    a, b, c = make_inputs(BATCH, seed=1), make_inputs(BATCH, seed=1), make_inputs(BATCH, seed=2)
    for name in ("q", "weights", "k_cache", "k_cache_scale"):
        x, y, z = getattr(a, name), getattr(b, name), getattr(c, name)
        assert torch.equal(x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x,
                           y.view(torch.uint8) if y.dtype == torch.float8_e4m3fn else y)
        assert not torch.equal(x.float(), z.float())


def test_k_scale_is_ue8m0_and_k_uses_the_fp8_range():
    x = make_inputs(StepBatch.from_lengths([1], [500]), seed=3)
    scale = x.k_cache_scale.double()
    assert torch.equal(torch.exp2(torch.log2(scale).round()), scale)  # powers of two
    amax = x.k_cache.float().abs().amax(dim=1)
    # 2^ceil(log2(amax / 448)) puts each token's largest value in (224, 448]
    assert (amax <= 448).all() and (amax > 224 * 0.9).all()
    assert len(torch.unique(scale)) > 3  # token magnitudes vary
    assert torch.isfinite(x.k_cache.float()).all() and torch.isfinite(x.q.float()).all()


def test_q_per_token_head_scale_is_folded_into_signed_weights():
    x = make_inputs(StepBatch.from_lengths([50], [50]), seed=0)
    amax = x.q.float().abs().amax(dim=2)
    assert (amax > 400).all()  # each (token, head) uses the fp8 range: its own scale
    assert (x.weights < 0).any() and (x.weights > 0).any()
    # |w| ~ scale * D^-0.5 * H^-0.5 with scale ~ amax(N(0,1)) / 448: small
    assert x.weights.abs().max() < 1e-3


def test_distinct_keys_repeat_whole_tokens():
    x = make_inputs(StepBatch.from_lengths([2], [300]), seed=0, distinct_keys=4)
    rows = {tuple(r) for r in x.k_cache.view(torch.uint8).tolist()}
    assert len(rows) <= 4
    assert len(torch.unique(x.k_cache_scale)) <= 4


def test_meta_inputs_have_shapes_only():
    big = StepBatch.from_lengths([8192], [262_144])
    x = make_inputs(big, device="meta")
    assert x.q.is_meta and x.k_cache.shape == (262_144, 128)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown model 'gpt'"):
        make_inputs(BATCH, "gpt")
    with pytest.raises(ValueError, match="seed -1"):
        make_inputs(BATCH, seed=-1)
    with pytest.raises(ValueError, match="distinct_keys 0"):
        make_inputs(BATCH, distinct_keys=0)

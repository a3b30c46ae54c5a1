"""Synthetic indexer inputs for a step batch, deterministic by seed.

Quantised as served (docs/design.md#the-indexer-and-its-logits):
- q ``[M, H, D]`` float8_e4m3fn from bf16 values, one scale per (token, head)
  (block 128 = D), that scale folded into the weights with D^-0.5 and H^-0.5;
- the indexer K cache of every request's whole sequence, ``[T, D]``
  float8_e4m3fn with one ue8m0 (power of two) fp32 scale per token,
  ``2^ceil(log2(amax / 448))``, requests back to back (request b at
  ``cache_offsets[b]``); the executor gathers from it like a serving engine
  gathers from its paged cache;
- weights ``[M, H]`` float32.

Values are drawn on the CPU from ``seed`` and then moved, so every device sees
the same numbers.  On ``meta`` nothing is drawn: shapes only, for the tracer.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .metadata import cache_offsets
from ..presets import get_model
from ..workload import StepBatch, check_int

FP8_MAX = 448.0  # largest float8_e4m3fn value


@dataclass(frozen=True)
class IndexerInputs:
    batch: StepBatch
    model: str
    q: torch.Tensor  # [M, H, D] float8_e4m3fn
    weights: torch.Tensor  # [M, H] float32 (q scale, D^-0.5, H^-0.5 folded in)
    k_cache: torch.Tensor  # [T, D] float8_e4m3fn, T = sum of seq_len
    k_cache_scale: torch.Tensor  # [T] float32, powers of two
    cache_offsets: tuple[int, ...]  # first cache row of each request

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def heads(self) -> int:
        return self.q.shape[1]

    @property
    def head_dim(self) -> int:
        return self.q.shape[2]

    def to(self, device) -> "IndexerInputs":
        return replace(self, q=self.q.to(device), weights=self.weights.to(device),
                       k_cache=self.k_cache.to(device), k_cache_scale=self.k_cache_scale.to(device))

    def request_k(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K values and scales of request b's whole sequence."""
        start, n = self.cache_offsets[b], self.batch.requests[b].seq_len
        return self.k_cache[start:start + n], self.k_cache_scale[start:start + n]


def input_shapes(batch: StepBatch, model: str) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Shape and dtype of each input tensor of ``batch`` under ``model`` (IndexerInputs' fields)."""
    preset = get_model(model)
    heads, dim = preset.index_heads, preset.head_dim
    rows, tokens = batch.num_rows, batch.num_kv_tokens
    return {"q": ((rows, heads, dim), torch.float8_e4m3fn),
            "weights": ((rows, heads), torch.float32),
            "k_cache": ((tokens, dim), torch.float8_e4m3fn),
            "k_cache_scale": ((tokens,), torch.float32)}


def quantize_per_row(x: torch.Tensor, power_of_two: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 e4m3 values and one fp32 scale per row of the last dimension.

    ``power_of_two``: the ue8m0 scale 2^ceil(log2(amax / 448)) (K); otherwise amax / 448 (q).
    """
    x = x.float()
    amax = x.abs().amax(dim=-1).clamp_min(1e-4)
    scale = amax / FP8_MAX
    if power_of_two:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    values = (x / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return values, scale.float()


def make_inputs(batch: StepBatch, model: str = "deepseek-v3.2", seed: int = 0, device="cpu",
                distinct_keys: int | None = None) -> IndexerInputs:
    """Inputs for ``batch`` under ``model``'s shapes (H, D), the same for the same seed.

    ``distinct_keys``: draw only this many different K tokens (values and scale)
    and repeat them across the cache, so each row sees many exactly equal logits
    (ties), to exercise the top-k tie rule.
    """
    preset = get_model(model)
    check_int("seed", seed, 0)
    if distinct_keys is not None:
        check_int("distinct_keys", distinct_keys, 1)
    heads, dim = preset.index_heads, preset.head_dim
    rows, tokens = batch.num_rows, batch.num_kv_tokens
    device = torch.device(device)
    offsets = tuple(cache_offsets(batch))
    if device.type == "meta":
        return IndexerInputs(batch, model, cache_offsets=offsets, **{
            name: torch.empty(shape, dtype=dtype, device=device)
            for name, (shape, dtype) in input_shapes(batch, model).items()})
    g = torch.Generator(device="cpu").manual_seed(seed)
    q_bf16 = torch.randn((rows, heads, dim), generator=g).to(torch.bfloat16)
    q, q_scale = quantize_per_row(q_bf16, power_of_two=False)
    # the indexer's weights projection (signed), with q's scale, D^-0.5 and H^-0.5 folded in
    w_proj = torch.randn((rows, heads), generator=g)
    weights = (w_proj * q_scale * dim ** -0.5 * heads ** -0.5).float()
    # keys vary in magnitude per token, so the power-of-two scales differ
    n_keys = tokens if distinct_keys is None else distinct_keys
    k_bf16 = (torch.randn((n_keys, dim), generator=g)
              * torch.exp(torch.randn((n_keys, 1), generator=g))).to(torch.bfloat16)
    k, k_scale = quantize_per_row(k_bf16, power_of_two=True)
    if distinct_keys is not None:
        pick = torch.randint(0, distinct_keys, (tokens,), generator=g)
        k, k_scale = k.view(torch.uint8)[pick].view(torch.float8_e4m3fn), k_scale[pick]
    return IndexerInputs(batch, model, q.to(device), weights.to(device), k.to(device),
                         k_scale.to(device), offsets)

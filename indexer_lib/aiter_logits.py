"""aiter's fp8_mqa_logits allocation rules on ROCm (docs/design.md#rocm), as data.

On ROCm there is no DeepGEMM: the engines call ROCm/aiter's ``fp8_mqa_logits`` (its Triton or, on
gfx950 with Triton 3.6+, Gluon kernel), which allocates the logits itself as ``[M, N']`` fp32 and
returns the ``[:, :N]`` view.  ``N'`` is N rounded up to 256 columns from aiter commit c69b84ef0b
(2026-05-18, ``aiter/ops/triton/attention/fp8_mqa_logits.py``: ``aligned_size = 256``); before it,
N itself (``torch.full((seq_len, seq_len_kv), -inf)``).  The rows are never padded.  ``padding``
registers each rule as a ``PaddingRules``, whose ``counter`` is the one place the bytes are counted,
for one chunk or arrays of them, like a DeepGEMM build's; an engine path that calls aiter (vLLM,
SGLang, ATOM) names its rule here.
"""
from __future__ import annotations

# rule name -> the columns aiter's fp32 logits row is aligned to
AITER_LOGITS_RULES: dict[str, int] = {
    "aiter-256": 256,  # ROCm/aiter from c69b84ef0b: [M, align(N, 256)] fp32
    "aiter-unaligned": 1,  # ROCm/aiter before it: [M, N] fp32
}


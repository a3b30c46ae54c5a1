"""aiter's fp8_mqa_logits allocation on ROCm (docs/design.md#rocm): the one place the rule is written.

On ROCm there is no DeepGEMM: the engines call ROCm/aiter's ``fp8_mqa_logits`` (its Triton or, on
gfx950 with Triton 3.6+, Gluon kernel), which allocates the logits itself as ``[M, N']`` fp32 and
returns the ``[:, :N]`` view.  ``N'`` is N rounded up to 256 columns from aiter commit c69b84ef0b
(2026-05-18, ``aiter/ops/triton/attention/fp8_mqa_logits.py``: ``aligned_size = 256``); before it,
N itself (``torch.full((seq_len, seq_len_kv), -inf)``).  The rows are never padded.  ``padding``
registers each rule as a ``PaddingRules`` so the planners count it like a DeepGEMM build; an engine
path that calls aiter (vLLM, SGLang, ATOM) names its rule here.
"""
from __future__ import annotations

from .checks import BadValue
from .dtypes import FP32_BYTES

# rule name -> the columns aiter's fp32 logits row is aligned to
AITER_LOGITS_RULES: dict[str, int] = {
    "aiter-256": 256,  # ROCm/aiter from c69b84ef0b: [M, align(N, 256)] fp32
    "aiter-unaligned": 1,  # ROCm/aiter before it: [M, N] fp32
}


def aiter_col_align(rule: str) -> int:
    """The columns a logits row is aligned to under aiter rule ``rule`` (BadValue for another)."""
    try:
        return AITER_LOGITS_RULES[rule]
    except KeyError:
        raise BadValue("rule", f"unknown aiter logits rule {rule!r}: must be one of "
                               f"{', '.join(AITER_LOGITS_RULES)}") from None


def aiter_logits_bytes(rows, cols, rule: str = "aiter-256"):
    """The bytes aiter's ``fp8_mqa_logits`` allocates for ``rows`` query rows against ``cols`` K
    columns (numbers or numpy arrays): ``rows x align(cols, col_align) x 4``."""
    col_align = aiter_col_align(rule)
    return rows * (-(-cols // col_align) * col_align) * FP32_BYTES

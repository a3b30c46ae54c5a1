"""The decode path's logits: what one decode step asks for (docs/design.md#the-ledger).

vLLM's DeepSeek indexer hands every decode step to DeepGEMM's paged MQA logits with
``max_context_len = max_model_len`` (the kpool path: ``max_model_len // 4``, its pools), and
DeepGEMM allocates ``[decode tokens, align(align(max_context_len, 256), 256)]`` fp32, the row
stride of its ``max_seqlen_k`` layout (``padding``): so a decode step's logits grow with the server's
``--max-model-len``, not with the requests' contexts.  On SM100 vLLM 0.33.0's kernel returns them
in bf16, ``[decode tokens, align(align(max_context_len, 256), 512)]``, and with its default top-k
backend ("auto", not "deep_select") the release copies them to fp32 at that stride while both are
alive (``model_executor/layers/sparse_attn_indexer.py:877-893``): the step holds both
(``padding.upcast_counters``, rows not padded).  Decode tokens are the decoding requests
times ``1 + drafts``.  The ledger's decode line and a frontier's verdict both read
``decode_step_bytes``.
"""
from __future__ import annotations

from ..dtypes import FP32_BYTES
from ..padding import PaddingRules, get_rules, upcast_counters


def decode_logits_cols(profile, model, max_model_len: int) -> int | None:
    """The paged logits' columns on this release and model (None: its decode path is not read)."""
    if profile.decode_logits_cols != "max_model_len":
        return None
    if model.pooled:
        return max_model_len // model.kv_ratio
    if model.compressed or model.has_candidates:  # C4, QSA and V4.1 decode paths: not read
        return None
    return max_model_len


def decode_logits_bytes(decode_tokens, cols: int, rules: PaddingRules):
    """fp32 paged logits of ``decode_tokens`` rows (a number or an array, not padded) at ``cols``
    columns, under the release's DeepGEMM ``rules``: the paged kernel's row stride is its
    ``max_seqlen_k`` layout's (``PaddingRules.row_stride(cols, compressed=True)``)."""
    return decode_tokens * rules.row_stride(cols, compressed=True) * FP32_BYTES


def decode_step_bytes(settings, decode_tokens: int, max_model_len: int) -> int | None:
    """The paged logits of one decode step of ``decode_tokens`` under plan ``settings`` at the
    server's ``max_model_len`` (None: no release named, or its decode path is not read)."""
    profile = settings.profile
    cols = None if profile is None else decode_logits_cols(profile, settings.preset, max_model_len)
    if cols is None:
        return None
    rules = get_rules(profile.deepgemm_rules)
    if settings.upcast:  # bf16 paged logits and their fp32 copy at once (vLLM 0.33.0 on SM100)
        copy, staged = upcast_counters(rules, settings.preset.index_heads, profile.sm100_logits_stride_bytes,
                                       pad_rows=False)
        return int(copy(decode_tokens, cols, True) + staged(decode_tokens, cols, True))
    return int(decode_logits_bytes(decode_tokens, cols, rules))

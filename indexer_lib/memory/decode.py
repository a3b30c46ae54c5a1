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
times ``1 + drafts``.

SGLang's DSA indexer asks for ``max_context_len = page table width x 64`` (``"page-table"``):
under its decode CUDA graph the static page table is as wide as the server's context plus a few
tokens of headroom, rounded up to 64-token pages (an eager step's is as wide as its longest
context, at most that: counted at the graph's); from 0.5.20 a call of more requests than the
GPU's SMs is made in SM-count chunks joined by ``torch.cat``, so the chunks and the joined copy
are alive at once.  A step of at most the graph's largest captured
batch replays the graph and allocates nothing (its logits are the graph pool's, a boot line).
The ledger's decode line, its boot line for the graph and a frontier's verdict all read
``decode_step_bytes``.
"""
from __future__ import annotations

from ..dtypes import FP32_BYTES
from ..padding import PaddingRules, align, get_rules, upcast_counters

# SGLang's DSA index page on CUDA: the indexer asserts page_size == 64 (dsa_indexer.py:1247, 0.5.23)
SGLANG_INDEX_PAGE = 64


def page_table_tokens(profile, max_model_len: int, drafts: int = 0) -> int:
    """SGLang's static decode page table's width in tokens (``decode_page_table_width``): the
    server's context plus the draft tokens with speculative decoding (1 + drafts: an MTP/EAGLE
    chain of ``drafts`` steps) ("context+drafts"), or the request-to-token row, 4 more
    ("req-to-token"), whose headroom is at least twice the draft tokens plus a page less one with
    drafts ("req-to-token-page-reserve")."""
    rule, draft_tokens = profile.decode_page_table_width, drafts + 1 if drafts else 0
    if rule == "context+drafts":
        return max_model_len + draft_tokens
    extra = 4 + draft_tokens
    if drafts and rule == "req-to-token-page-reserve":
        extra = max(extra, 2 * draft_tokens + SGLANG_INDEX_PAGE - 1)
    return max_model_len + extra


def decode_logits_cols(profile, model, max_model_len: int, drafts: int = 0) -> int | None:
    """The paged logits' columns on this release and model (None: its decode path is not read)."""
    rule = profile.decode_logits_cols
    if rule == "max_model_len" and model.pooled:
        return max_model_len // model.kv_ratio
    if rule is None or model.compressed or model.has_candidates:  # C4, QSA, V4.1 and SGLang's kpool: not read
        return None
    if rule == "page-table":
        return align(page_table_tokens(profile, max_model_len, drafts), SGLANG_INDEX_PAGE)
    return max_model_len


def decode_logits_bytes(decode_tokens, cols: int, rules: PaddingRules):
    """fp32 paged logits of ``decode_tokens`` rows (a number or an array, not padded) at ``cols``
    columns, under the release's DeepGEMM ``rules``: the paged kernel's row stride is its
    ``max_seqlen_k`` layout's (``PaddingRules.row_stride(cols, compressed=True)``)."""
    return decode_tokens * rules.row_stride(cols, compressed=True) * FP32_BYTES


def decode_in_workspace(settings) -> bool:
    """vLLM's ROCm decode takes its logits from the shared workspace its profile run sized for the
    most decode rows (``rocm_decode_workspace``; the ledger's boot line), allocating nothing more
    (vllm 0.33.0 v1/attention/ops/rocm_aiter_mla_sparse.py:651-653, :824-826)."""
    profile = settings.profile
    return profile is not None and bool(profile.rocm_decode_workspace) and settings.gpu_preset.rocm


def decode_step_bytes(settings, decode_tokens: int, max_model_len: int, drafts: int = 0,
                      graph_bs: int = 0) -> int | None:
    """The paged logits of one decode step of ``decode_tokens`` (its requests times ``1 + drafts``)
    under plan ``settings`` at the server's ``max_model_len``; 0 where the step has at most
    ``graph_bs`` requests, a replay of SGLang's decode CUDA graph, or taken from vLLM's ROCm workspace
    (``decode_in_workspace``) (None: no release named, or its decode path is not read)."""
    profile = settings.profile
    cols = None if profile is None else decode_logits_cols(profile, settings.preset, max_model_len, drafts)
    if cols is None or profile.decode_logits_cols == "page-table" and settings.gpu_preset.rocm:
        return None  # SGLang on ROCm: aiter's paged logits at a width set by the Triton build, not modelled
    if decode_in_workspace(settings):
        return 0
    rules = get_rules(profile.deepgemm_rules)
    if settings.upcast:  # bf16 paged logits and their fp32 copy at once (vLLM 0.33.0 on SM100)
        copy, staged = upcast_counters(rules, settings.preset.index_heads, profile.sm100_logits_stride_bytes,
                                       pad_rows=False)
        return int(copy(decode_tokens, cols, True) + staged(decode_tokens, cols, True))
    requests = decode_tokens // (1 + drafts)
    if requests <= graph_bs:
        return 0
    held = decode_logits_bytes(decode_tokens, cols, rules)
    # SM100's target verify passes [requests, 1 + drafts] queries; otherwise every row is its own entry
    batch = requests if drafts and settings.gpu_preset.cuda_family == 100 else decode_tokens
    if profile.decode_logits_sm_chunks and batch > settings.gpu_preset.sm_count:
        held += decode_tokens * cols * FP32_BYTES  # torch.cat's [rows, max_len] while every chunk is alive
    return int(held)

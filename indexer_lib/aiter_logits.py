"""aiter's fp8_mqa_logits allocation rules on ROCm (docs/design.md#rocm), as data.

On ROCm there is no DeepGEMM: the engines call ROCm/aiter's ``fp8_mqa_logits`` (its Triton or, on
gfx950 with Triton 3.6+, Gluon kernel), which allocates the logits itself as ``[M, N']`` fp32 and
returns the ``[:, :N]`` view.  ``N'`` is N rounded up to 256 columns from aiter commit c69b84ef0b
(2026-05-18, ``aiter/ops/triton/attention/fp8_mqa_logits.py``: ``aligned_size = 256``); before it,
N itself (``torch.full((seq_len, seq_len_kv), -inf)``).  Those rows are never padded.

aiter's FlyDSL kernel for gfx942 (``flydsl_fp8_mqa_logits``, from aiter 0571aeac7b, 2026-07-07;
``aiter/ops/flydsl/kernels/mqa_logits/fp8_mqa_logits.py`` at e4048607a5) scores two rows a block
(:390-395 ``_auto_variant``, :528-530): it allocates ``[align(M, 2), align(N, 256)]`` fp32
(:540-554), returns the ``[:M, :N]`` view (:578), and for an odd M first copies Q, the weights,
ks and ke to the even row count (:531-536; the rule's ``copies_inputs``, counted by
``memory.chunk_bytes.kernel_inputs_of``).

``padding`` registers each rule as a ``PaddingRules``, whose ``counter`` is the one place the bytes
are counted, for one chunk or arrays of them, like a DeepGEMM build's; an engine path that calls
aiter (vLLM, SGLang, ATOM) names its rule here.
"""
from __future__ import annotations

# rule name -> (the rows aiter's logits are aligned to, the columns its fp32 row is aligned to)
AITER_LOGITS_RULES: dict[str, tuple[int, int]] = {
    "aiter-256": (1, 256),  # ROCm/aiter from c69b84ef0b: [M, align(N, 256)] fp32
    # ROCm/aiter before it: [M, N] fp32; the same layout SGLang allocates itself for aiter's paged kernel
    # on its DeepSeek-V4 C4 path (plan.paths.SglangC4Hip)
    "aiter-unaligned": (1, 1),
    "aiter-flydsl": (2, 256),  # ROCm/aiter's gfx942 FlyDSL kernel: [align(M, 2), align(N, 256)] fp32
}

"""DeepGEMM's padded logits allocation, per version (docs/design.md#deepgemms-padding).

DeepGEMM allocates the ``[M, N]`` fp32 logits inside its C++ API with more rows
and a wider row stride than M x N.  Engines budget plain M x N x 4 bytes; this
module says what is really allocated, so budgets and memory checks can count it.
It is the one place the rule is written: the planners (``counter``), the memory
model, the kernels' checks and the engine replay's meta kernel all read it here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .aiter_logits import AITER_LOGITS_RULES
from .checks import BadValue
from .dtypes import BF16_BYTES, FP32_BYTES
from .elementwise import maximum, minimum, where
# the compressed layout's width, max_seqlen_k, is aligned to DeepGEMM's block of KV columns
COMPRESSED_ALIGN = 256


def align(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


@dataclass(frozen=True)
class PaddingRules:
    version: str
    # rows: align(M, row_multiple) where row_multiple is 4 or 128 // H
    rows_align_to_128_over_heads: bool
    stride_extra: int  # N + stride_extra before aligning (256 in every version)
    stride_align: int  # fp32 elements
    has_compressed: bool  # max_seqlen_k > 0 layout exists (2.2+)
    full_width: bool = True  # 2.8 keeps only the compressed layout
    row_align: int | None = None  # rows aligned to this fixed multiple (aiter: 1), over the two above
    # the kernel copies its inputs (q, weights, ks, ke) to the padded rows before it allocates the
    # logits, alive through the call (aiter's FlyDSL kernel); DeepGEMM pads its logits rows alone
    copies_inputs: bool = False

    def row_multiple(self, heads: int) -> int:
        if self.row_align is not None:
            return self.row_align
        return 128 // heads if self.rows_align_to_128_over_heads else 4

    def rows_allocated(self, rows: int, heads: int) -> int:
        return align(rows, self.row_multiple(heads))

    def row_stride(self, cols: int, compressed: bool = False) -> int:
        """Row stride in fp32 elements for a logits tensor ``cols`` wide.

        ``cols`` is N (full layout) or max_seqlen_k (compressed layout).
        """
        return _row_stride(cols, compressed, self.stride_extra, self.stride_align)

    def logits_bytes(self, rows: int, cols: int, heads: int, compressed: bool = False) -> int:
        """The bytes DeepGEMM allocates for ``rows`` x ``cols`` logits (``counter``'s count)."""
        return self.counter(heads)(rows, cols, compressed)

    def counter(self, heads: int, padded: bool = True) -> Callable[[int, int, bool], int]:
        """``count(rows, cols, compressed)``: the bytes a logits allocation is counted at, with
        this build's padding (``logits_bytes``) or, unpadded, as the engines count it (M x N x 4).
        A closure with the constants at hand: planners ask it millions of times in a sweep.  It
        takes numbers or numpy arrays of them, and carries its two inverses under a budget:
        ``count.widest(rows, budget, compressed)``, the most columns ``rows`` rows may take (-1:
        not even none), and ``count.tallest(cols, budget, compressed, cap)``, the most rows of
        ``cols`` columns (at most ``cap``; ``cap`` where a row of no width costs nothing)."""
        if not padded:
            return unpadded_logits_bytes
        m, extra, stride_align = self.row_multiple(heads), self.stride_extra, self.stride_align

        def count(rows, cols, compressed=False):
            return -(-rows // m) * m * _row_stride(cols, compressed, extra, stride_align) * FP32_BYTES

        def widest(rows, budget: int, compressed: bool = False):
            most = budget // (FP32_BYTES * (-(-rows // m) * m))  # the widest row stride, in elements
            if compressed:
                return most // COMPRESSED_ALIGN * COMPRESSED_ALIGN
            return maximum(most // stride_align * stride_align - extra, -1)

        count.widest = widest
        count.tallest = lambda cols, budget, compressed, cap: _rows_within(
            _row_stride(cols, compressed, extra, stride_align) * FP32_BYTES, m, budget, cap)
        return count


def _row_stride(cols, compressed: bool, extra: int, stride_align: int):
    """A row's stride in elements: ``cols`` aligned to DeepGEMM's block of KV columns, then to the
    build's stride, in the compressed layout (for fp32 the block already is a whole stride), else
    ``cols + extra`` aligned to the build's stride."""
    if compressed:
        return -(-(-(-cols // COMPRESSED_ALIGN) * COMPRESSED_ALIGN) // stride_align) * stride_align
    return -(-(cols + extra) // stride_align) * stride_align


def upcast_counters(rules: PaddingRules, heads: int, stride_bytes: int, pad_rows: bool = True):
    """(``copy``, ``staged``): the bytes of the two logits allocations alive at once where DeepGEMM
    returns bf16 logits and the engine copies them to fp32 at their strides (vLLM 0.33.0 on SM100:
    ``sparse_attn_indexer.py:304-325`` as_fp32_logits), each ``count(rows, cols, compressed)``.

    ``staged``: DeepGEMM's bf16 ``[align(M, 128 / H), S]``, its rows as ``rules`` pads them and
    the row stride S aligned to ``stride_bytes`` (the release's ``sm100_logits_stride_bytes``:
    1024, 512 bf16 elements).  ``copy``: ``torch.empty_strided`` of the returned ``[M, W]`` view's
    shape and strides ``(S, 1)``, which holds ``(M - 1) x S + W`` fp32 elements (no padded rows,
    the last row cut at W); nothing for an empty view.  ``pad_rows`` False: the paged kernel's
    rows, not padded (its width the compressed layout's).  Only a build whose fp32 rows align to
    the same bytes is taken (the alignment is in bytes whatever the dtype)."""
    if rules.stride_align * FP32_BYTES != stride_bytes:
        raise BadValue("deepgemm_version", f"DeepGEMM {rules.version} aligns an fp32 logits row to "
                                           f"{rules.stride_align * FP32_BYTES} bytes, not the {stride_bytes} "
                                           "of the release's bf16 rule: bf16 logits are not modelled on it")
    m, extra = rules.row_multiple(heads) if pad_rows else 1, rules.stride_extra
    bf16_align = stride_bytes // BF16_BYTES

    def staged(rows, cols, compressed=False):
        return -(-rows // m) * m * _row_stride(cols, compressed, extra, bf16_align) * BF16_BYTES

    def copy(rows, cols, compressed=False):
        elements = (rows - 1) * _row_stride(cols, compressed, extra, bf16_align) + cols
        return where((rows > 0) & (cols > 0), elements * FP32_BYTES, 0)

    return copy, staged


def _rows_within(row_bytes, multiple: int, budget: int, cap):
    """The most rows, in whole ``multiple``s, of ``row_bytes`` each within ``budget``, at most
    ``cap`` (``cap`` where a row takes nothing)."""
    if type(row_bytes) is int and row_bytes == 0:
        return cap
    rows = budget // maximum(row_bytes, 1) // multiple * multiple
    return where(row_bytes == 0, cap, minimum(rows, cap))


# Keys are the version names users pass on the command line.
DEEPGEMM_RULES: dict[str, PaddingRules] = {
    "2.1": PaddingRules("2.1", False, 256, 4, has_compressed=False),
    "2.2": PaddingRules("2.2", False, 256, 4, has_compressed=True),
    "2.3": PaddingRules("2.3", False, 256, 4, has_compressed=True),
    "2.4.2": PaddingRules("2.4.2", True, 256, 8, has_compressed=True),
    # 2.5.0's first release aligned the stride to 8; builds from June 2026 to 64
    "2.5.0-initial": PaddingRules("2.5.0-initial", True, 256, 8, has_compressed=True),
    "2.5.0": PaddingRules("2.5.0", True, 256, 64, has_compressed=True),
    # 2.6+: 1024-byte row stride
    "2.6": PaddingRules("2.6", True, 256, 256, has_compressed=True),
    "2.7": PaddingRules("2.7", True, 256, 256, has_compressed=True),
    "2.8": PaddingRules("2.8", True, 256, 256, has_compressed=True, full_width=False),
}
DEFAULT_DEEPGEMM_VERSION = "2.6"
# aiter's logits on ROCm (``aiter_logits``): one [align(M, row_align), align(N, col_align)] layout;
# a kernel that pads its rows (FlyDSL's) copies its inputs to them
AITER_RULES: dict[str, PaddingRules] = {
    name: PaddingRules(name, False, 0, col_align, has_compressed=False, row_align=row_align,
                       copies_inputs=row_align > 1)
    for name, (row_align, col_align) in AITER_LOGITS_RULES.items()
}


def get_rules(version: str) -> PaddingRules:
    """A DeepGEMM build's padding rules, or aiter's logits rule on ROCm (``AITER_RULES``)."""
    rules = DEEPGEMM_RULES.get(version) or AITER_RULES.get(version)
    if rules is None:
        raise BadValue("deepgemm_version",
                       f"unknown DeepGEMM version {version!r}: must be one of {', '.join(DEEPGEMM_RULES)} "
                       f"(on ROCm, an aiter rule: {', '.join(AITER_RULES)})")
    return rules


def unpadded_logits_bytes(rows, cols, compressed: bool = False):
    """vLLM's budget arithmetic: plain M x N x 4 bytes (the layout does not matter); the unpadded
    ``PaddingRules.counter``, with its inverses."""
    return rows * cols * FP32_BYTES


unpadded_logits_bytes.widest = lambda rows, budget, compressed=False: budget // (FP32_BYTES * rows)
unpadded_logits_bytes.tallest = lambda cols, budget, compressed, cap: _rows_within(FP32_BYTES * cols, 1, budget, cap)

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

from .checks import BadValue

FP32_BYTES = 4
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

    def row_multiple(self, heads: int) -> int:
        return 128 // heads if self.rows_align_to_128_over_heads else 4

    def rows_allocated(self, rows: int, heads: int) -> int:
        return align(rows, self.row_multiple(heads))

    def row_stride(self, cols: int, compressed: bool = False) -> int:
        """Row stride in fp32 elements for a logits tensor ``cols`` wide.

        ``cols`` is N (full layout) or max_seqlen_k (compressed layout).
        """
        if compressed:
            return align(cols, COMPRESSED_ALIGN)
        return align(cols + self.stride_extra, self.stride_align)

    def logits_bytes(self, rows: int, cols: int, heads: int, compressed: bool = False) -> int:
        return self.rows_allocated(rows, heads) * self.row_stride(cols, compressed) * FP32_BYTES

    def counter(self, heads: int, padded: bool = True) -> Callable[[int, int, bool], int]:
        """``count(rows, cols, compressed)``: the bytes a logits allocation is counted at, with
        this build's padding (``logits_bytes``) or, unpadded, as the engines count it (M x N x 4).
        A closure with the constants at hand: planners ask it millions of times in a sweep."""
        if not padded:
            return lambda rows, cols, compressed=False: rows * cols * FP32_BYTES
        m, extra, stride_align = self.row_multiple(heads), self.stride_extra, self.stride_align

        def count(rows: int, cols: int, compressed: bool = False) -> int:
            if compressed:
                stride = -(-cols // COMPRESSED_ALIGN) * COMPRESSED_ALIGN
            else:
                stride = -(-(cols + extra) // stride_align) * stride_align
            return -(-rows // m) * m * stride * FP32_BYTES

        return count


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


def get_rules(version: str) -> PaddingRules:
    try:
        return DEEPGEMM_RULES[version]
    except KeyError:
        raise BadValue("deepgemm_version",
                       f"unknown DeepGEMM version {version!r}: must be one of {', '.join(DEEPGEMM_RULES)}") from None


def unpadded_logits_bytes(rows: int, cols: int) -> int:
    """vLLM's budget arithmetic: plain M x N x 4 bytes."""
    return rows * cols * FP32_BYTES

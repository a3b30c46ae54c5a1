"""Checks before every DeepGEMM MQA-logits call, as plain Python over tensors' metadata.

DeepGEMM reports a bad input in two ways, both poor: a host assertion that names
a C++ expression, or (for alignment) ``CUDA driver error ... CUDA_ERROR_INVALID_VALUE``
from ``cuTensorMapEncodeTiled`` when a TMA descriptor is built over a base address
or stride that is not a multiple of 16 bytes.  ``check_mqa_logits_inputs`` reads
only shapes, dtypes, strides and data pointers (plus, optionally, the values of
ks/ke), so every rule is testable on the CPU, and each failure is a ``ValueError``
that names the tensor and the rule.

Rules (docs/design.md#deepgemms-padding and the checks in DeepGEMM's ``fp8_fp4_mqa_logits``):

- q ``[M, H, D]`` float8_e4m3fn, contiguous; k ``[N, D]`` float8_e4m3fn, contiguous;
  k_scale ``[N]`` float32, contiguous; weights ``[M, H]`` float32 with stride(1) = 1;
  ks, ke ``[M]`` int32, contiguous;
- M > 0 and N > 0;
- SM90 (Hopper): H in {32, 64}, D in {64, 128}; SM100: H in {8, 16, 32, 64}, D in {32, 64, 128};
- TMA: q, k, k_scale and weights start at a 16-byte aligned address and every
  stride but the innermost is a multiple of 16 bytes (a ``k_scale[off:]`` slice
  with ``off % 4 != 0`` breaks this);
- values: 0 <= ks[i] <= ke[i] <= N, and in the compressed layout
  ke[i] - ks[i] <= max_seqlen_k.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

TMA_ALIGN_BYTES = 16

# (arch major) -> allowed index heads / head dims for the fp8 MQA-logits kernel
SUPPORTED_HEADS = {9: (32, 64), 10: (8, 16, 32, 64)}
SUPPORTED_HEAD_DIMS = {9: (64, 128), 10: (32, 64, 128)}


class InputCheckError(ValueError):
    """A DeepGEMM input breaks a rule; the message names the tensor and the rule."""


@dataclass(frozen=True)
class LogitsProblem:
    """The sizes of one MQA-logits call, as read by the checks."""

    rows: int  # M
    kv: int  # N
    heads: int  # H
    head_dim: int  # D


def _fail(name: str, rule: str) -> None:
    raise InputCheckError(f"{name}: {rule}")


def _tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        _fail(name, f"must be a torch.Tensor, got {type(t).__name__}")
    return t


def _dtype(name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    if t.dtype != dtype:
        _fail(name, f"dtype must be {dtype}, got {t.dtype}")


def _ndim(name: str, t: torch.Tensor, ndim: int, layout: str) -> None:
    if t.dim() != ndim:
        _fail(name, f"must be {ndim}-D {layout}, got shape {tuple(t.shape)}")


def _contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        _fail(name, f"must be contiguous, got strides {tuple(t.stride())} for shape {tuple(t.shape)}"
                    " (pass .contiguous(), or slice the workspace by rows from offset 0)")


def check_tma_alignment(name: str, t: torch.Tensor, hint: str = "") -> None:
    """16-byte aligned base address and 16-byte multiple outer strides (TMA rules)."""
    elem = t.element_size()
    ptr = t.data_ptr()
    if ptr % TMA_ALIGN_BYTES:
        off = ptr % TMA_ALIGN_BYTES
        _fail(name, f"base address 0x{ptr:x} is {off} bytes past a 16-byte boundary: TMA needs a "
                    f"16-byte aligned base (for {elem}-byte elements the storage offset must be a "
                    f"multiple of {max(1, TMA_ALIGN_BYTES // elem)} elements; storage offset is "
                    f"{t.storage_offset()}){hint}")
    # the innermost dimension is the one with stride 1: every other stride must be 16-byte multiples
    for dim, (size, stride) in enumerate(zip(t.shape, t.stride())):
        if stride == 1 or size == 1:
            continue
        if (stride * elem) % TMA_ALIGN_BYTES:
            _fail(name, f"stride {stride} of dim {dim} is {stride * elem} bytes: TMA needs strides "
                        f"that are multiples of 16 bytes{hint}")


def arch_major_of(device: torch.device | str | None, default: int = 9) -> int:
    """Compute capability major of a CUDA device; ``default`` (SM90) elsewhere."""
    if device is None:
        return default
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_capability(device)[0]
    return default


def check_mqa_logits_inputs(q, k, k_scale, weights, ks, ke, *, arch_major: int = 9,
                            max_seqlen_k: int = 0, check_values: bool = True) -> LogitsProblem:
    """Raise ``InputCheckError`` (a ValueError) naming the tensor and the rule, or return the sizes.

    ``check_values`` reads ks/ke (a device synchronisation on a GPU) to check
    0 <= ks <= ke <= N and, in the compressed layout, ke - ks <= max_seqlen_k.
    """
    q, k, k_scale = _tensor("q", q), _tensor("k", k), _tensor("k_scale", k_scale)
    weights, ks, ke = _tensor("weights", weights), _tensor("ks", ks), _tensor("ke", ke)

    # dtypes and ranks
    _dtype("q", q, torch.float8_e4m3fn)
    _ndim("q", q, 3, "[M, H, D]")
    _dtype("k", k, torch.float8_e4m3fn)
    _ndim("k", k, 2, "[N, D]")
    _dtype("k_scale", k_scale, torch.float32)
    _ndim("k_scale", k_scale, 1, "[N]")
    _dtype("weights", weights, torch.float32)
    _ndim("weights", weights, 2, "[M, H]")
    for name, t in (("ks", ks), ("ke", ke)):
        _dtype(name, t, torch.int32)
        _ndim(name, t, 1, "[M]")

    # sizes
    m, h, d = q.shape
    n = k.shape[0]
    if m == 0:
        _fail("q", "M (query rows) must be > 0, got 0: skip the call for an empty chunk")
    if n == 0:
        _fail("k", "N (KV tokens) must be > 0, got 0")
    if k.shape[1] != d:
        _fail("k", f"head dim {k.shape[1]} must equal q's head dim {d}")
    if k_scale.shape[0] != n:
        _fail("k_scale", f"length {k_scale.shape[0]} must equal k's rows N = {n}")
    if tuple(weights.shape) != (m, h):
        _fail("weights", f"shape {tuple(weights.shape)} must be [M, H] = {(m, h)}")
    for name, t in (("ks", ks), ("ke", ke)):
        if t.shape[0] != m:
            _fail(name, f"length {t.shape[0]} must equal q's rows M = {m}")

    # what the kernel supports on this architecture
    heads = SUPPORTED_HEADS.get(arch_major)
    dims = SUPPORTED_HEAD_DIMS.get(arch_major)
    if heads is None:
        _fail("q", f"no fp8 MQA-logits kernel for SM{arch_major}0: DeepGEMM has SM90 and SM100 ones")
    if h not in heads:
        _fail("q", f"H = {h} index heads: SM{arch_major}0 supports H in {set(heads)}")
    if d not in dims:
        _fail("q", f"D = {d} head dim: SM{arch_major}0 supports D in {set(dims)}")

    # layouts
    _contiguous("q", q)
    _contiguous("k", k)
    _contiguous("k_scale", k_scale)
    if weights.stride(1) != 1:
        _fail("weights", f"stride(1) must be 1 (heads contiguous), got strides {tuple(weights.stride())}")
    _contiguous("ks", ks)
    _contiguous("ke", ke)

    # TMA: 16-byte aligned bases, 16-byte multiple strides
    check_tma_alignment("q", q)
    check_tma_alignment("k", k, hint=": slice the K workspace from row 0")
    check_tma_alignment("k_scale", k_scale,
                        hint=": a K-scale slice k_scale[off:] needs off % 4 == 0; slice from offset 0")
    check_tma_alignment("weights", weights)

    if max_seqlen_k < 0:
        _fail("max_seqlen_k", f"must be >= 0, got {max_seqlen_k}")
    if check_values:
        check_window_values(ks, ke, n, max_seqlen_k)
    return LogitsProblem(m, n, h, d)


def check_window_values(ks: torch.Tensor, ke: torch.Tensor, kv_len: int, max_seqlen_k: int = 0) -> None:
    """0 <= ks <= ke <= kv_len per row; ke - ks <= max_seqlen_k when compressed."""
    lo = int(ks.min())
    hi = int(ke.max())
    if lo < 0:
        _fail("ks", f"min {lo} < 0: window starts must be workspace columns >= 0")
    if hi > kv_len:
        _fail("ke", f"max {hi} > N = {kv_len}: window ends must lie within the KV length")
    span = ke.to(torch.int64) - ks.to(torch.int64)
    shortest = int(span.min())
    if shortest < 0:
        row = int(torch.argmin(span))
        _fail("ke", f"row {row}: ke {int(ke[row])} < ks {int(ks[row])}: every window needs ks <= ke")
    if max_seqlen_k > 0:
        longest = int(span.max())
        if longest > max_seqlen_k:
            _fail("max_seqlen_k", f"{max_seqlen_k} is narrower than the longest window "
                                  f"ke - ks = {longest}: the compressed layout must hold every window")

"""Reference backend: the indexer's logits formula (docs/design.md#the-indexer-and-its-logits)
and an exact top-k, in torch.

Exactness.  fp8 e4m3 values are multiples of 2^-9 below 448, so a product of two
is a multiple of 2^-18 and a sum of D <= 128 of them stays below 2^25: every
partial sum fits float64's 53 bits, so q . k is exact in float64 whatever the
summation order (BLAS blocking, tile shape, device).  Then, per element and in
a fixed order: relu, times the weight (one rounding), added to an accumulator
that starts at +0 head by head (h = 0, 1, ...), times the power-of-two K scale
(exact), one rounding to float32.  Every logit is therefore the same bits in
any chunk shape, and a plain per-row float64 loop reproduces it.

Memory.  The logits tensor is allocated like DeepGEMM's (padded rows and row
stride of the emulated version).  Work happens in bounded tiles
(``memory.tiling``), which the memory model counts.  On the meta device there
is nothing to compute: the in-place arithmetic (which allocates nothing) is
skipped and a tile shape already run is not run again, so a trace of a
full-scale plan takes seconds while every distinct allocation still happens.
"""
from __future__ import annotations

import numpy as np
import torch

from ...padding import DEFAULT_DEEPGEMM_VERSION, get_rules
from ...plan import Chunk, Plan
from . import checks
from ...memory import tiling
from .base import Backend
from .merge import INT64_MIN, LOW_BITS

SUPPORTED_HEADS = checks.SUPPORTED_HEADS[9]  # as the SM90 (H200) kernel
SUPPORTED_HEAD_DIMS = checks.SUPPORTED_HEAD_DIMS[9]


def _fail(name: str, expected: str, got) -> None:
    raise ValueError(f"{name}: expected {expected}, got {got}")


def check_inputs(q, k, k_scale, weights, ks, ke) -> tuple[int, int, int, int]:
    """Shapes and dtypes of one logits call; returns (m, heads, head_dim, n)."""
    for name, t in (("q", q), ("k", k), ("k_scale", k_scale), ("weights", weights),
                    ("ks", ks), ("ke", ke)):
        if not isinstance(t, torch.Tensor):
            _fail(name, "a torch.Tensor", type(t).__name__)
    if q.dtype != torch.float8_e4m3fn:
        _fail("q", "dtype torch.float8_e4m3fn", q.dtype)
    if q.dim() != 3:
        _fail("q", "shape [M, H, D]", tuple(q.shape))
    m, heads, head_dim = q.shape
    if heads not in SUPPORTED_HEADS:
        _fail("q", f"H (index heads) in {SUPPORTED_HEADS}", f"H = {heads}")
    if head_dim not in SUPPORTED_HEAD_DIMS:
        _fail("q", f"D (head dim) in {SUPPORTED_HEAD_DIMS}", f"D = {head_dim}")
    if k.dtype != torch.float8_e4m3fn:
        _fail("k", "dtype torch.float8_e4m3fn", k.dtype)
    if k.dim() != 2 or k.shape[1] != head_dim:
        _fail("k", f"shape [N, {head_dim}] (D of q)", tuple(k.shape))
    n = k.shape[0]
    if k_scale.dtype != torch.float32:
        _fail("k_scale", "dtype torch.float32", k_scale.dtype)
    if tuple(k_scale.shape) != (n,):
        _fail("k_scale", f"shape [{n}] (N of k)", tuple(k_scale.shape))
    if weights.dtype != torch.float32:
        _fail("weights", "dtype torch.float32", weights.dtype)
    if tuple(weights.shape) != (m, heads):
        _fail("weights", f"shape [{m}, {heads}] (M, H of q)", tuple(weights.shape))
    for name, t in (("ks", ks), ("ke", ke)):
        if t.dtype != torch.int32:
            _fail(name, "dtype torch.int32", t.dtype)
        if tuple(t.shape) != (m,):
            _fail(name, f"shape [{m}] (M of q)", tuple(t.shape))
    devices = {t.device for t in (q, k, k_scale, weights, ks, ke)}
    if len(devices) != 1:
        _fail("inputs", "tensors on one device", sorted(str(d) for d in devices))
    return m, heads, head_dim, n


def _host_windows(ks, ke, hints) -> tuple[np.ndarray, np.ndarray]:
    windows = hints.get("host_windows")
    if windows is not None:
        return windows
    if ks.is_meta:
        raise ValueError("ks/ke on the meta device hold no values: pass host_windows=(ks, ke) numpy arrays")
    return ks.cpu().numpy(), ke.cpu().numpy()


def _runs(ks: np.ndarray) -> list[tuple[int, int]]:
    """[r0, r1) ranges of consecutive rows sharing ks (one request each)."""
    if ks.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(ks)) + 1
    bounds = [0, *cuts.tolist(), ks.size]
    return list(zip(bounds[:-1], bounds[1:]))


class _ShapeMemo:
    """On the meta device, says whether a tile of this shape already ran."""

    def __init__(self, meta: bool):
        self.meta, self.seen = meta, set()

    def skip(self, key) -> bool:
        if not self.meta:
            return False
        if key in self.seen:
            return True
        self.seen.add(key)
        return False


class ReferenceBackend(Backend):
    name = "reference"

    def __init__(self, deepgemm_version: str = DEFAULT_DEEPGEMM_VERSION):
        self.rules = get_rules(deepgemm_version)
        self.deepgemm_version = deepgemm_version

    # -- logits ---------------------------------------------------------------

    supports_column_range = True
    supports_alloc_rows = True

    def allocate_logits(self, m: int, width: int, heads: int, compressed: bool, device,
                        alloc_rows: int | None = None):
        """DeepGEMM's allocation: padded rows x padded stride, returned as the [m, width] view.

        ``alloc_rows``: allocate that many rows (before DeepGEMM's row alignment)
        although only ``m`` are computed (fixed-shape: one shape for every chunk)."""
        if compressed and not self.rules.has_compressed:
            raise ValueError(f"DeepGEMM {self.rules.version} has no compressed (max_seqlen_k) layout")
        if not compressed and not self.rules.full_width:
            raise ValueError(f"DeepGEMM {self.rules.version} has only the compressed layout")
        if alloc_rows is not None and alloc_rows < m:
            raise ValueError(f"alloc_rows {alloc_rows}: fewer than the {m} rows to compute")
        rows = self.rules.rows_allocated(m if alloc_rows is None else alloc_rows, heads)
        stride = self.rules.row_stride(width, compressed)
        buf = torch.empty((rows, stride), dtype=torch.float32, device=device)
        return buf[:m, :width]

    def logits(self, q, k, k_scale, weights, ks, ke, width: int, compressed: bool = False,
               kv_start: int = 0, alloc_rows: int | None = None, **hints):
        """``kv_start``: score workspace columns ``[kv_start, kv_start + width)`` only
        (a column range of kv-split; ks/ke are then windows in the range's own
        columns, ``metadata.column_windows``); every logit is computed exactly as
        in the unsplit call.  ``alloc_rows``: pad the allocation's rows (fixed-shape)."""
        if kv_start:
            if compressed:
                raise ValueError("kv_start: a column range needs the full layout, not the compressed one")
            k, k_scale = k[kv_start:kv_start + width], k_scale[kv_start:kv_start + width]
        m, heads, head_dim, n = check_inputs(q, k, k_scale, weights, ks, ke)
        hks, hke = _host_windows(ks, ke, hints)
        lens = hke.astype(np.int64) - hks
        # an empty window (ks == ke) is a row with no candidates (a column range past its end)
        if m and (hks.min() < 0 or hke.max() > n or lens.min() < 0):
            raise ValueError(f"ks/ke: expected 0 <= ks <= ke <= N = {n} per row, got "
                             f"ks in [{hks.min()}, {hks.max()}], ke in [{hke.min()}, {hke.max()}]")
        if m and (lens.max() > width if compressed else hke.max() > width):
            raise ValueError(f"width {width}: narrower than the windows it must hold")
        out = self.allocate_logits(m, width, heads, compressed, q.device, alloc_rows)
        memo = _ShapeMemo(q.is_meta)
        for r0, r1 in _runs(hks):
            start = int(hks[r0])
            col0 = 0 if compressed else start  # output column of the request's first KV token
            for t0 in range(r0, r1, tiling.LOGITS_TILE_ROWS):
                t1 = min(t0 + tiling.LOGITS_TILE_ROWS, r1)
                extent = int(lens[t0:t1].max())
                self._logits_rows((q, k, k_scale, weights, out), (t0, t1), (start, col0), extent, memo)
        return out

    def _logits_rows(self, operands: tuple, rows: tuple[int, int], at: tuple[int, int], extent: int, memo):
        """Rows [r0, r1) of ``operands`` (q, k, k_scale, weights, out) against KV [start, start +
        extent), written from output column col0 (``at``: start, col0), in column tiles."""
        q, k, k_scale, weights, out = operands
        (r0, r1), (start, col0) = rows, at
        heads, head_dim = q.shape[1], q.shape[2]
        rows = r1 - r0
        # [H, rows, D]: each head's rows contiguous for its matmul
        q64 = torch.empty((heads, rows, head_dim), dtype=torch.float64, device=q.device)
        w64 = weights[r0:r1].to(torch.float64)
        if not q.is_meta:
            q64.copy_(q[r0:r1].transpose(0, 1))
        for c0 in range(0, extent, tiling.LOGITS_TILE_COLS):
            c1 = min(c0 + tiling.LOGITS_TILE_COLS, extent)
            if memo.skip((rows, c1 - c0)):
                continue
            self._logits_tile(q64, w64, k[start + c0:start + c1], k_scale[start + c0:start + c1],
                              out[r0:r1, col0 + c0:col0 + c1])

    @staticmethod
    def _logits_tile(q64, w64, k, k_scale, out):
        """One tile: exact float64 dots, per-head relu and weight, fixed head order."""
        k64 = k.to(torch.float64)
        s64 = k_scale.to(torch.float64)
        acc = torch.zeros(out.shape, dtype=torch.float64, device=out.device)
        dots = torch.empty(out.shape, dtype=torch.float64, device=out.device)
        if out.is_meta:
            return  # no values: only the allocations above matter
        for h in range(q64.shape[0]):
            torch.matmul(q64[h], k64.T, out=dots)  # exact: see the module docstring
            dots.relu_()
            dots.mul_(w64[:, h:h + 1])
            acc.add_(dots)
        acc.mul_(s64)  # power of two: exact
        out.copy_(acc)  # the one rounding to float32

    # -- top-k ----------------------------------------------------------------

    def topk(self, logits, ks, ke, k: int, compressed: bool = False, out=None, **hints):
        if logits.dtype != torch.float32 or logits.dim() != 2:
            _fail("logits", "a 2-D torch.float32 tensor", f"{logits.dtype} {tuple(logits.shape)}")
        m, width = logits.shape
        if k < 1:
            raise ValueError(f"topk {k}: must be >= 1")
        for name, t in (("ks", ks), ("ke", ke)):
            if t.dtype != torch.int32 or tuple(t.shape) != (m,):
                _fail(name, f"int32 shape [{m}]", f"{t.dtype} {tuple(t.shape)}")
        if out is None:
            out = torch.full((m, k), -1, dtype=torch.int32, device=logits.device)
        elif out.dtype != torch.int32 or tuple(out.shape) != (m, k):
            _fail("out", f"int32 shape [{m}, {k}]", f"{out.dtype} {tuple(out.shape)}")
        hks, hke = _host_windows(ks, ke, hints)
        memo = _ShapeMemo(logits.is_meta)
        for r0, r1 in _runs(hks):
            start = int(hks[r0])
            col0 = 0 if compressed else start
            # one width for the whole request so its tiles share a shape
            w = int((hke[r0:r1].astype(np.int64) - start).max())
            if w == 0:  # every window of the run is empty: nothing to rank
                continue
            if col0 + w > width:
                raise ValueError(f"logits: width {width} does not hold the window [{start}, {start + w})")
            step = tiling.topk_tile_rows(w)
            for t0 in range(r0, r1, step):
                t1 = min(t0 + step, r1)
                if memo.skip((t1 - t0, w)):
                    continue
                self._topk_tile(logits[t0:t1, col0:col0 + w], ks[t0:t1], ke[t0:t1], out[t0:t1], k)
        return out

    @staticmethod
    def _topk_tile(x, ks, ke, out, k):
        """Top-k of rows whose column 0 is their ks; x is [rows, w] fp32.

        Ties need a rule, so each logit becomes a unique int64 key: the float's
        bits mapped to an order-preserving integer (+0 and -0 both to 0) in the
        high half, (2^32 - 1 - column) in the low half, so equal values rank
        the lower column first; columns outside the window get INT64_MIN.
        """
        rows, w = x.shape
        kk = min(k, w)
        bits = x.view(torch.int32)
        sign = bits >> 31  # 0 or -1
        ordered = bits & 0x7FFFFFFF  # magnitude bits
        ordered ^= sign
        ordered -= sign  # negatives become -magnitude: monotone, -0 == +0
        key = ordered.to(torch.int64)
        key.mul_(1 << 32)
        low = torch.arange(LOW_BITS, LOW_BITS - w, -1, dtype=torch.int64, device=x.device)
        key.add_(low)
        col = torch.arange(w, dtype=torch.int32, device=x.device)
        lens = ke - ks
        outside = col >= lens[:, None]
        key.masked_fill_(outside, INT64_MIN)
        values, index = torch.topk(key, kk, dim=1, largest=True, sorted=True)
        result = index.to(torch.int32)
        missing = values == INT64_MIN
        result.masked_fill_(missing, -1)
        out[:, :kk].copy_(result)

    # -- memory ---------------------------------------------------------------

    def temporaries_bytes(self, plan: Plan, chunk: Chunk, topk: int) -> int:
        return tiling.reference_temporaries_bytes(plan, chunk, topk)

"""Per-row top-k over each row's window, device-agnostic (the same code on CPU and GPU).

Contract (docs/design.md#top-k-contract-and-tie-rule): ``[m, k]`` int32 indices of
the k largest logits of row i's window, relative to ks[i]; -1 where the window
has fewer than k columns; equal values: the lower index wins; rows sorted by
value, descending (equal values by index, ascending), -1 padding last.

How: per block of rows, the columns outside each window are set to -inf in place
(the logits tensor is scratch once top-k has read it, as in the serving engines),
then ``torch.topk``.  torch.topk does not say which of several equal values it
keeps, so rows whose k-th value is tied with a value left out are repaired
exactly: every value above the k-th value is kept, and of those equal to it the
lowest indices.  A final pair of stable sorts fixes the order.  Row blocks bound
the temporaries (``memory.topk_bytes.topk_temporaries_bytes`` counts them).
"""
from __future__ import annotations

import math

import torch

from ...memory.topk_bytes import DEFAULT_BLOCK_BYTES, repair_bytes_per_row, rows_per_block


def _window_bounds(ks: torch.Tensor, ke: torch.Tensor, compressed: bool):
    """Column range [lo, hi) of each row's window in the logits tensor (int64)."""
    ks64, ke64 = ks.to(torch.int64), ke.to(torch.int64)
    if compressed:
        return torch.zeros_like(ks64), ke64 - ks64, torch.zeros_like(ks64)
    return ks64, ke64, ks64  # lo, hi, offset subtracted to make indices relative


def _repair_ties(x: torch.Tensor, vals: torch.Tensor, idx: torch.Tensor, kk: int,
                 block_bytes: int) -> None:
    """Make the kept set exact where the k-th value ties with a value left out (in place)."""
    kth = vals.min(dim=1).values
    ge = x >= kth[:, None]
    count = ge.sum(dim=1)
    del ge
    bad = torch.isfinite(kth) & (count > kk)
    rows = torch.nonzero(bad).squeeze(1)
    if rows.numel() == 0:
        return
    # sub-blocks of tied rows, so the repair's own temporaries stay within the block size
    sub = max(1, block_bytes // repair_bytes_per_row(x.shape[1], kk))
    for s0 in range(0, rows.numel(), sub):
        part = rows[s0:s0 + sub]
        xs = x.index_select(0, part)
        t = kth.index_select(0, part)[:, None]
        gt = xs > t
        eq = xs == t
        need = kk - gt.sum(dim=1, keepdim=True)
        keep = gt | (eq & (eq.cumsum(dim=1) <= need))
        del eq
        cols = torch.nonzero(keep)[:, 1].view(part.numel(), kk)
        idx.index_copy_(0, part, cols)
        vals.index_copy_(0, part, xs.gather(1, cols))


def window_topk(logits: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, k: int,
                compressed: bool = False, block_bytes: int = DEFAULT_BLOCK_BYTES,
                out: torch.Tensor | None = None, host_windows=None) -> torch.Tensor:
    """Top-k of each row's window; overwrites the columns outside the windows with -inf.

    Full layout: row i's window is columns [ks[i], ke[i]).  Compressed layout
    (DeepGEMM's ``max_seqlen_k``): columns [0, ke[i] - ks[i]).  ``out``: an
    optional ``[m, k]`` int32 tensor to write into (e.g. a slice of a persistent
    top-k buffer).  ``host_windows``: optional (ks, ke) host arrays (numpy or
    lists) with the same values, which spare one device synchronisation per row
    block.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits: must be 2-D [m, width], got shape {tuple(logits.shape)}")
    if not logits.dtype.is_floating_point:
        raise ValueError(f"logits: must be floating point, got {logits.dtype}")
    m, width = logits.shape
    if ks.shape != (m,) or ke.shape != (m,):
        raise ValueError(f"ks/ke: must be [m] = [{m}], got {tuple(ks.shape)} and {tuple(ke.shape)}")
    if k < 1:
        raise ValueError(f"k {k}: must be >= 1")
    if out is None:
        out = torch.empty((m, k), dtype=torch.int32, device=logits.device)
    elif out.shape != (m, k) or out.dtype != torch.int32:
        raise ValueError(f"out: must be int32 [{m}, {k}], got {out.dtype} {tuple(out.shape)}")
    out.fill_(-1)
    if m == 0 or width == 0:
        return out
    lo_all, hi_all, offset_all = _window_bounds(ks.to(logits.device), ke.to(logits.device), compressed)
    rb = rows_per_block(width, k, block_bytes)
    for r0 in range(0, m, rb):
        r1 = min(m, r0 + rb)
        lo, hi, offset = lo_all[r0:r1], hi_all[r0:r1], offset_all[r0:r1]
        # only the columns some row of the block reads
        if host_windows is not None:
            hks, hke = (list(map(int, a[r0:r1])) for a in host_windows)
            c0, c1 = (0, max(e - b for b, e in zip(hks, hke))) if compressed else (min(hks), max(hke))
            c0, c1 = max(0, c0), min(width, c1)
        else:
            c0, c1 = (int(v) for v in torch.stack([lo.min(), hi.max()]).clamp(0, width).tolist())
        if c1 <= c0:
            continue
        x = logits[r0:r1, c0:c1]
        cols = torch.arange(c0, c1, device=logits.device)
        outside = cols[None, :] < lo[:, None]
        outside |= cols[None, :] >= hi[:, None]
        x.masked_fill_(outside, -math.inf)
        del outside, cols
        kk = min(k, c1 - c0)
        vals, idx = torch.topk(x, kk, dim=1, largest=True, sorted=False)
        _repair_ties(x, vals, idx, kk, block_bytes)
        # order: value descending, equal values by index ascending (two stable sorts; each
        # old tensor is dropped as soon as its reordered copy exists)
        perm = torch.argsort(idx, dim=1, stable=True)
        idx = idx.gather(1, perm)
        vals = vals.gather(1, perm)
        del perm
        perm = torch.argsort(vals, dim=1, descending=True, stable=True)
        idx = idx.gather(1, perm)
        vals = vals.gather(1, perm)
        del perm
        missing = vals == -math.inf
        del vals
        idx += (c0 - offset)[:, None]
        idx.masked_fill_(missing, -1)
        out[r0:r1, :kk] = idx
        del idx, missing
    return out

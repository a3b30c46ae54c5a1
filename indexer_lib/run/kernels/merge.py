"""Exact online top-k across KV column ranges (the ``kv-split`` strategy).

A row slice scored over several column ranges keeps, per row, a running top-k:
values (float32, exactly the logits) and indices (int32, relative to the row's
``ks``; -1: none).  Each range's own top-k (from the backend, whose tie rule is
the lower index) is merged into it.  The merge is exact whatever the split,
because top-k(A u B) = top-k(top-k(A) u top-k(B)) under any strict total order,
and the order used here is strict: value descending, then index ascending.  Each
candidate becomes one int64 key -- the float's bits mapped to an order-preserving
integer (+0 and -0 both to 0) in the high half, ``2^32 - 1 - index`` in the low
half -- so ``torch.topk`` over the keys has no ties to resolve (missing entries
get INT64_MIN and come out as -1).  The result is sorted by value, equal values
by index: the same order as the unchunked top-k.

Memory (``memory.tiling.merge_temporaries_bytes``, torch-free for the memory model): the
merge holds at most 48 bytes per running entry (r rows x k) beyond the running
values, the candidate indices and the logits; the tracer checks this.
"""
from __future__ import annotations

import math

import torch

INT64_MIN = -(1 << 63)
LOW_BITS = (1 << 32) - 1


def order_keys(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """int64 keys ordering (value descending, index ascending) as one descending order.

    ``values`` float32, ``index`` int32 of the same shape (-1: missing, key INT64_MIN).
    """
    bits = values.view(torch.int32)
    sign = bits >> 31  # 0 or -1
    ordered = bits & 0x7FFFFFFF
    ordered ^= sign
    ordered -= sign  # negatives become -magnitude: monotone, -0 == +0
    del sign
    key = ordered.to(torch.int64)
    del ordered
    key.mul_(1 << 32)
    key.add_(LOW_BITS)
    key.sub_(index)
    missing = index < 0
    key.masked_fill_(missing, INT64_MIN)
    return key


def merge_running_topk(run_values: torch.Tensor, run_index: torch.Tensor, logits: torch.Tensor,
                       cand_index: torch.Tensor, index_offset: int) -> None:
    """Merge one column range's top-k into the running top-k, in place.

    ``run_values`` float32 ``[r, k]`` (-inf where none) and ``run_index`` int32
    ``[r, k]`` (relative to each row's ks, -1 where none): the running top-k,
    updated.  ``logits``: the range's ``[r, width]`` logits; ``cand_index``: int32
    ``[r, k]``, the range's top-k as logits columns (-1 where none); it is
    overwritten.  ``index_offset``: added to a logits column to make it relative
    to the row's ks (the range's first workspace column minus ks).
    """
    r, k = run_index.shape
    if run_values.shape != (r, k) or cand_index.shape != (r, k):
        raise ValueError(f"merge: running values {tuple(run_values.shape)}, running indices "
                         f"{(r, k)} and candidates {tuple(cand_index.shape)} must have one shape")
    cols = cand_index.to(torch.int64)
    invalid = cand_index < 0
    cols.clamp_(min=0)
    values = logits.gather(1, cols)  # exact float32 logits of the candidates
    del cols
    values.masked_fill_(invalid, -math.inf)
    cand_index.add_(index_offset)
    cand_index.masked_fill_(invalid, -1)
    del invalid
    all_values = torch.cat([run_values, values], 1)
    del values
    all_index = torch.cat([run_index, cand_index], 1)
    key = order_keys(all_values, all_index)
    top_keys, position = torch.topk(key, k, dim=1, largest=True, sorted=True)
    del key
    new_index = all_index.gather(1, position)
    new_values = all_values.gather(1, position)
    gone = top_keys == INT64_MIN
    new_index.masked_fill_(gone, -1)
    new_values.masked_fill_(gone, -math.inf)
    run_index.copy_(new_index)
    run_values.copy_(new_values)

"""A naive per-row float64 indexer: the logits formula of docs/design.md#the-indexer-and-its-logits,
one row at a time.

Used by the tests as the ground truth the executor must equal bit for bit.
Per row: the window's K against the row's q in float64 (exact: fp8 x fp8 over
D = 128), then per KV token relu, times the weight, summed over heads in order
h = 0, 1, ... from +0, times the K scale, rounded once to float32; top-k ranks
those float32 values, equal values by ascending index, -1 padded.
"""
from __future__ import annotations

import numpy as np
import torch


def request_k64(inputs, b: int) -> tuple[np.ndarray, np.ndarray]:
    k, scale = inputs.request_k(b)
    return k.to(torch.float64).numpy(), scale.to(torch.float64).numpy()


def request_dots(inputs, b: int, k64) -> np.ndarray:
    """q . k in float64 for every row of request b and every KV token: [rows, H, seq_len].

    Exact (fp8 x fp8 over D <= 128 fits float64), so one matrix product for all
    rows gives the same numbers as one per row, only faster.
    """
    row0 = sum(r.query_len for r in inputs.batch.requests[:b])
    req = inputs.batch.requests[b]
    q = inputs.q[row0:row0 + req.query_len].to(torch.float64).numpy()  # [rows, H, D]
    return np.einsum("rhd,td->rht", q, k64[0], optimize=True)


def naive_row_logits(inputs, b: int, i: int, k64=None, dots=None) -> np.ndarray:
    """float32 logits of query row i (request-local) of request b over its window."""
    req = inputs.batch.requests[b]
    row = sum(r.query_len for r in inputs.batch.requests[:b]) + i
    length = req.context_len + i + 1
    k64 = request_k64(inputs, b) if k64 is None else k64
    scale = k64[1][:length]
    if dots is None:
        q = inputs.q[row].to(torch.float64).numpy()  # [H, D]
        dots = (k64[0][:length] @ q.T).T  # [H, length]
    else:
        dots = dots[i, :, :length]
    w = inputs.weights[row].to(torch.float64).numpy()
    acc = np.zeros(length)
    for h in range(dots.shape[0]):  # heads in order, from +0
        acc = acc + np.maximum(dots[h], 0.0) * w[h]
    return (acc * scale).astype(np.float32)


def causal_windows(seq_lens, query_lens) -> tuple[list[int], list[int]]:
    """(ks, ke) of every query row of requests laid out back to back in one workspace:
    row i of a request with context c sees c + i + 1 columns from the request's start."""
    ks, ke, cu = [], [], 0
    for s, ql in zip(seq_lens, query_lens):
        ks += [cu] * ql
        ke += [cu + s - ql + i + 1 for i in range(ql)]
        cu += s
    return ks, ke


def rank(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, equal values by ascending index, -1 padded."""
    order = np.lexsort((np.arange(values.size), -values.astype(np.float64)))[:k]
    out = np.full(k, -1, dtype=np.int32)
    out[:order.size] = order
    return out


def naive_topk(inputs, k: int) -> np.ndarray:
    """``[M, k]`` int32 top-k of every row of the step."""
    rows = []
    for b, req in enumerate(inputs.batch.requests):
        k64 = request_k64(inputs, b)  # converted once per request
        dots = request_dots(inputs, b, k64)
        for i in range(req.query_len):
            rows.append(rank(naive_row_logits(inputs, b, i, k64, dots), k))
    return np.stack(rows)

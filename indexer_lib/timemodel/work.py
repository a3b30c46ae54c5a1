"""What each chunk's kernels work on, whatever the GPU: the inputs of the per-kernel time model
(``timemodel.model``, docs/design.md#time-model).

Per chunk: each row's window (``ks``, ``ke`` in workspace columns), from which follow the
KV tiles each of DeepGEMM's query blocks iterates over, the lengths top-k reads per row, the
cells the logits allocate outside the windows (what ``clean_logits`` writes) and the K tokens
the chunk gathers.  The GPU (its SMs, bandwidth and rates) enters only in the time model.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..padding import get_rules
from ..workload import StepBatch
from ..plan.chunks import Chunk, Plan

BLOCK_QH = 128  # DeepGEMM: query rows x heads per block (data/field/time_constants.csv)
BLOCK_KV = 256  # DeepGEMM: KV tokens per tile
SPAN_ALIGN = 4  # DeepGEMM: a block's span starts at a multiple of 4


@dataclass(frozen=True, eq=False)
class ChunkWork:
    rows: int
    logits_cols: int  # columns the logits allocate (the workspace width or max_seqlen_k)
    row_lens: np.ndarray  # ke - ks per row: what top-k reads
    block_tiles: np.ndarray  # per DeepGEMM query block: the 256-token KV tiles it iterates over
    outside_cells: int  # cells of the rows' padded width outside every window (clean_logits writes them)
    gathered_tokens: int  # K tokens gathered into the workspace for this chunk (0: reused)

    @property
    def scored(self) -> int:
        return int(self.row_lens.sum())


def chunk_rows_windows(batch: StepBatch, chunk: Chunk) -> tuple[np.ndarray, np.ndarray]:
    """``ks`` and ``ke`` per row of the chunk (int64 workspace columns; compressed K: entries, the
    row at position p scoring ``(p + 1) // ratio`` of them; a column range: clipped to it)."""
    r0, r1 = chunk.requests
    q0, q1 = chunk.rows
    ks_parts, ke_parts = [], []
    col = row = 0
    for req in batch.requests[r0:r1]:
        if row >= q1:
            break
        lo, hi = max(q0, row), min(q1, row + req.query_len)
        if lo < hi:
            positions = np.arange(lo - row + 1, hi - row + 1, dtype=np.int64)  # rows seen, 1-based
            ends = (req.context_len + positions) // req.ratio
            ks_parts.append(np.full(hi - lo, col, dtype=np.int64))
            ke_parts.append(col + ends)
        row += req.query_len
        col += req.seq_len
    ks = np.concatenate(ks_parts) if ks_parts else np.zeros(0, dtype=np.int64)
    ke = np.concatenate(ke_parts) if ke_parts else np.zeros(0, dtype=np.int64)
    lo, hi = chunk.kv_start, chunk.kv_start + chunk.logits_cols
    if not chunk.compressed and (lo or ke.max(initial=0) > hi):  # a column range (kv-split)
        ks, ke = np.clip(ks, lo, hi), np.clip(ke, lo, hi)
    return ks, ke


def block_tiles(ks: np.ndarray, ke: np.ndarray, heads: int) -> np.ndarray:
    """KV tiles per DeepGEMM query block of ``BLOCK_QH // heads`` rows: the span from the block's
    smallest ks (rounded down to 4) to its largest ke, in tiles of 256 (the last row repeats to
    fill the last block, as the kernel reads it)."""
    block_q = max(1, BLOCK_QH // heads)
    m = len(ks)
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    pad = -m % block_q
    if pad:
        ks = np.concatenate([ks, np.repeat(ks[-1:], pad)])
        ke = np.concatenate([ke, np.repeat(ke[-1:], pad)])
    start = ks.reshape(-1, block_q).min(axis=1) // SPAN_ALIGN * SPAN_ALIGN
    end = ke.reshape(-1, block_q).max(axis=1)
    return np.maximum(0, -(-(end - start) // BLOCK_KV))


FEW_CHUNKS = 4  # up to this many, each chunk's rows on their own cost less than the step's at once


def chunk_work(plan: Plan) -> tuple[ChunkWork, ...]:
    """Each chunk's work, in plan order: every row's window computed once for the whole step,
    and the query blocks of every chunk at once (a plan under a small budget has hundreds of
    chunks); a column range of kv-split, chunk by chunk (``chunk_rows_windows``)."""
    chunks, heads = plan.chunks, plan.settings.preset.index_heads
    rules = get_rules(plan.deepgemm_version)
    if not chunks:
        return ()
    if len(chunks) <= FEW_CHUNKS or any(c.kv_start for c in chunks):
        return tuple(_chunk_work_alone(plan.batch, c, heads, rules) for c in chunks)
    batch = plan.batch
    # every row of the step: its window's start and end in K columns from the step's first request
    query_lens = np.array(batch.query_lens, dtype=np.int64)
    first_row = np.concatenate([[0], np.cumsum(query_lens)[:-1]])
    first_col = np.concatenate([[0], np.cumsum(np.array(batch.seq_lens, dtype=np.int64))[:-1]])
    owner = np.repeat(np.arange(len(query_lens)), query_lens)
    position = np.arange(owner.size) - first_row[owner] + 1  # 1-based within its request
    context = np.array([r.context_len for r in batch.requests], dtype=np.int64)
    ks_all = first_col[owner]
    ke_all = ks_all + (context[owner] + position) // batch.kv_ratio
    # each chunk's rows, its windows from its own first request's K
    r0 = np.array([c.requests[0] for c in chunks], dtype=np.int64)
    rows = np.array([c.rows[1] - c.rows[0] for c in chunks], dtype=np.int64)
    start = first_row[r0] + np.array([c.rows[0] for c in chunks], dtype=np.int64)
    chunk_of = np.repeat(np.arange(len(chunks)), rows)
    at = start[chunk_of] + np.arange(chunk_of.size) - np.repeat(np.cumsum(rows) - rows, rows)
    ks, ke = ks_all[at] - first_col[r0][chunk_of], ke_all[at] - first_col[r0][chunk_of]
    widest = np.maximum.reduceat(ke, np.cumsum(rows) - rows)
    if any(not c.compressed and widest[i] > c.logits_cols for i, c in enumerate(chunks)):
        return tuple(_chunk_work_alone(batch, c, heads, rules) for c in chunks)  # clipped: a column range
    lens = ke - ks
    tiles, blocks = _blocks_tiles(ks, ke, rows, heads)
    scored = np.add.reduceat(lens, np.cumsum(rows) - rows)
    lens_by_chunk = np.split(lens, np.cumsum(rows)[:-1])
    tiles_by_chunk = np.split(tiles, np.cumsum(blocks)[:-1])
    return tuple(ChunkWork(rows=c.num_rows, logits_cols=c.logits_cols, row_lens=lens_by_chunk[i],
                           block_tiles=tiles_by_chunk[i],
                           outside_cells=max(0, c.num_rows * rules.row_stride(c.logits_cols, c.compressed)
                                             - int(scored[i])),
                           gathered_tokens=c.kv_tokens if c.gather else 0)
                 for i, c in enumerate(chunks))


def _blocks_tiles(ks: np.ndarray, ke: np.ndarray, rows: np.ndarray, heads: int) -> tuple[np.ndarray, np.ndarray]:
    """``block_tiles`` of consecutive chunks of ``rows`` rows each, at once: (every chunk's blocks'
    tiles in order, the blocks per chunk).  Each chunk's last row repeats to fill its last block."""
    block_q = max(1, BLOCK_QH // heads)
    padded = -(-rows // block_q) * block_q
    chunk_of = np.repeat(np.arange(rows.size), padded)
    local = np.arange(chunk_of.size) - np.repeat(np.cumsum(padded) - padded, padded)
    at = (np.cumsum(rows) - rows)[chunk_of] + np.minimum(local, rows[chunk_of] - 1)
    start = ks[at].reshape(-1, block_q).min(axis=1) // SPAN_ALIGN * SPAN_ALIGN
    end = ke[at].reshape(-1, block_q).max(axis=1)
    return np.maximum(0, -(-(end - start) // BLOCK_KV)), padded // block_q


def _chunk_work_alone(batch: StepBatch, c: Chunk, heads: int, rules) -> ChunkWork:
    """One chunk's work from its own rows' windows (clipped to its column range)."""
    ks, ke = chunk_rows_windows(batch, c)
    lens = ke - ks
    return ChunkWork(
        rows=c.num_rows, logits_cols=c.logits_cols, row_lens=lens,
        block_tiles=block_tiles(ks - c.kv_start, ke - c.kv_start, heads),
        outside_cells=max(0, c.num_rows * rules.row_stride(c.logits_cols, c.compressed) - int(lens.sum())),
        gathered_tokens=c.kv_tokens if c.gather else 0)

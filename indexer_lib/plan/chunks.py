"""Chunk plans as plain data: what each chunk of a split covers and allocates.

A plan splits one step batch into chunks.  Each chunk gathers (or reuses) the K
of a range of requests into the workspace, computes one logits tensor for a
range of query rows and runs top-k on it.  The memory model, the executor, the
command line's JSON and the notebooks all read these records; no strategy
knows about tensors.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

from ..workload import StepBatch
from .settings import PlanSettings


@dataclass(frozen=True)
class Chunk:
    """One logits allocation.  All ranges are half-open."""

    requests: tuple[int, int]  # [r0, r1): requests of the step batch in this chunk
    rows: tuple[int, int]  # [q0, q1): rows within the chunk requests' concatenated rows
    token_start: int  # absolute query row of the step where the chunk starts
    token_end: int
    kv_tokens: int  # tokens gathered into the workspace for these requests (N)
    logits_cols: int  # width of the logits tensor it allocates (N, a KV prefix, or max_seqlen_k)
    logits_bytes: int  # bytes DeepGEMM really allocates for it (padding of the plan's version)
    gather: bool  # False: reuses the previous chunk's workspace (a later row slice)
    over_budget: bool  # no split of this chunk meets the budget (or the workspace)
    compressed: bool = False  # DeepGEMM's max_seqlen_k layout: column c of row i is KV ks[i] + c
    kv_start: int = 0  # first workspace column scored; non-zero only for column-split chunks
    alloc_rows: int | None = None  # rows the logits allocate when padded up (fixed-shape)
    # bytes the logits allocation takes where it is not DeepGEMM's rows x cols (QSA's paths: vLLM's
    # one workspace per call, SGLang's rows rounded up to 128 / H); None: from rows and cols
    alloc_bytes: int | None = None

    @property
    def num_rows(self) -> int:
        return self.rows[1] - self.rows[0]

    @property
    def logits_rows(self) -> int:
        """Rows of the logits allocation, before DeepGEMM's own row alignment."""
        return self.num_rows if self.alloc_rows is None else self.alloc_rows

    @property
    def num_requests(self) -> int:
        return self.requests[1] - self.requests[0]

    def to_json(self) -> dict:
        d = asdict(self)
        d["requests"] = list(self.requests)
        d["rows"] = list(self.rows)
        return d


@dataclass(frozen=True)
class Plan:
    strategy: str
    batch: StepBatch
    settings: PlanSettings  # as the strategy runs them: its DeepGEMM build and budget arithmetic
    budget_bytes: int | None  # None: no logits budget (n-only)
    workspace_tokens: int
    chunks: tuple[Chunk, ...]
    # the same chunks come out for any budget b with low <= b < high (high None: no limit)
    budget_stable: tuple[int, int | None] = (0, None)
    logits_alive: int = 1  # 2: a chunk's logits live until the next chunk's are allocated
    # a model whose kinds see the step differently (DeepSeek-V4.1): this is the plan of the kind that
    # sets the step's peak, ``kind_plans`` every kind's plan (one layer's logits are freed before the
    # next layer runs, so the step's peak is the worst of them)
    layer_kind: str | None = None
    kind_plans: tuple = ()

    @property
    def model(self) -> str:
        return self.settings.model

    @property
    def deepgemm_version(self) -> str:
        return self.settings.deepgemm

    @property
    def padded(self) -> bool:
        """Budgets counted with DeepGEMM's padding (False: vLLM's M x N x 4)."""
        return self.settings.padded

    @property
    def engine(self) -> str | None:
        """The engine release planned on (``vllm==0.33.0``), if any."""
        return self.settings.engine

    @property
    def workspace_lifetime(self) -> str:
        """The engine's K workspace: reserved once ("persistent") or allocated per "chunk" or "call"."""
        return self.settings.workspace_lifetime

    @property
    def num_chunks(self) -> int:
        return len(self.chunks)

    @property
    def num_gathers(self) -> int:
        return sum(c.gather for c in self.chunks)

    @property
    def over_budget(self) -> bool:
        return any(c.over_budget for c in self.chunks)

    @property
    def largest_logits_bytes(self) -> int:
        """The step's largest single logits allocation, what a "Tried to allocate" names (0: none)."""
        return max((c.logits_bytes for c in self.chunks), default=0)


def merged_chunks(chunks) -> list[bool]:
    """Per chunk: whether it is one of several column ranges of the same query rows
    (kv-split), whose top-k the executor merges into a running top-k per row."""
    keys = [(c.token_start, c.token_end) for c in chunks]
    if len(set(keys)) == len(keys):  # every chunk its own rows: the common case, one test
        return [False] * len(keys)
    count: dict[tuple[int, int], int] = {}
    for key in keys:
        count[key] = count.get(key, 0) + 1
    return [count[key] > 1 for key in keys]


class Run(NamedTuple):
    """Consecutive rows of one request inside a chunk: they share ``ks``, and
    row t of the run has ``ke - ks = first_len + t`` (one more KV token per row)."""

    row_start: int  # first row of the run, counted from the chunk's first row
    rows: int
    ks: int  # workspace column where the request starts
    first_len: int  # window length ke - ks of the run's first row

    @property
    def max_len(self) -> int:
        return self.first_len + self.rows - 1


def chunk_runs(batch: StepBatch, chunk: Chunk) -> list[Run]:
    """The chunk's rows grouped by request, in row order."""
    r0, r1 = chunk.requests
    q0, q1 = chunk.rows
    runs = []
    col = 0  # workspace column of the current request
    row = 0  # request rows seen so far in the chunk's concatenated rows
    out_row = 0
    for req in batch.requests[r0:r1]:
        if row >= q1:
            break
        lo, hi = max(q0, row), min(q1, row + req.query_len)
        if lo < hi:
            i0 = lo - row  # request-local index of the run's first row
            runs.append(Run(out_row, hi - lo, col, req.context_len + i0 + 1))
            out_row += hi - lo
        row += req.query_len
        col += req.seq_len
    return runs

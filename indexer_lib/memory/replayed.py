"""What an engine release's own indexer path allocates besides the logits: the memory
model's ``replay`` temporaries (docs/design.md#engine-replay).

Our executor's temporaries (``reference``, ``deepgemm``) are what the project's executor
allocates; an engine runs its own kernels and builds its own metadata.  For a release whose
code the project has replayed on the meta device (``run.replay``; the profile's ``path``
fact), this module counts what that code allocates, byte for byte:

- ``vllm-request-spans`` (vLLM 0.15.1, 0.19.0): the builder makes every chunk's metadata
  before the forward and holds all of it through the call: cu_seqlen_ks and cu_seqlen_ke
  for every query row of the chunk's requests (a query slice keeps its requests' whole
  arrays), token_to_seq per KV token and cu_seq_lens per request + 1, all int32; the chunk
  loop allocates nothing but the logits.
- ``vllm-chunk-rows`` (vLLM 0.20.0, 0.30.0): the same metadata, but ks and ke for the chunk's
  own rows (``build_prefill_chunk_metadata``); the chunk loop allocates nothing but the logits.
- ``vllm-row-ends`` (vLLM 0.33.0): as ``vllm-chunk-rows``, and in the chunk loop, ``row_ends = ke - ks`` (int32 per row) is made before the logits and
  lives through the top-k, and ``zeros_like(row_ends)`` lives during the top-k.  On SM100 the
  chunk's weights are cast to bf16 too (``upcast_weights_bytes``).

In both the K workspace is the workspace manager's one buffer: each part rounded up to 256
bytes, plus what the profile run asked for in the same buffer (from 0.20.0: the 1 MiB radix
top-k workspace).
"""
from __future__ import annotations

from ..dtypes import BF16_BYTES, INT32_BYTES
from ..engines import EngineProfile, get_engine, replayed_engines
from ..plan import Chunk, Plan


def replayed_profile(plan: Plan) -> EngineProfile:
    """The profile of the release the plan was made on, if the project replayed its path."""
    if plan.engine is None:
        raise ValueError("temporaries 'replay' count an engine's own path: the plan must be made on "
                         "an engine release (PlanSettings(engine=...))")
    profile = get_engine(plan.engine)
    if profile.path is None:
        raise ValueError(f"temporaries 'replay': {profile.name}'s own path has not been replayed "
                         f"(replayed: {', '.join(replayed_engines())}); use temporaries 'deepgemm' or None")
    return profile


def call_metadata_bytes(plan: Plan, path: str) -> int:
    """Every chunk's metadata, built before the call and held through it."""
    total = 0
    for c in plan.chunks:
        r0, r1 = c.requests
        rows = sum(plan.batch.query_lens[r0:r1]) if path == "vllm-request-spans" else c.num_rows
        total += INT32_BYTES * (2 * rows + c.kv_tokens + (r1 - r0) + 1)
    return total


def chunk_path_bytes(chunk: Chunk, path: str) -> tuple[int, int]:
    """(alive with the chunk's logits, alive only during its top-k): 0.33.0's row_ends and
    its zeros; nothing before."""
    if path == "vllm-row-ends":
        row_ends = INT32_BYTES * chunk.num_rows
        return row_ends, row_ends
    return 0, 0


def upcast_weights_bytes(rows, heads: int):
    """vLLM 0.33.0 on SM100: ``mqa_logits_mx_inputs`` (utils/deep_gemm.py:615-635) casts a chunk's
    weights ``[rows, H]`` to bf16 before its logits (sparse_attn_indexer.py:723-725); the loop's
    name holds them through the top-k, until the next chunk's cast."""
    return BF16_BYTES * rows * heads


def workspace_path_bytes(profile: EngineProfile, tokens: int, head_dim: int, scale_bytes: int) -> int:
    """The workspace manager's buffer: K values and scales, each rounded up, plus what the
    profile run added."""
    a = profile.workspace_align
    return (-(-tokens * head_dim // a) * a + -(-tokens * scale_bytes // a) * a
            + profile.workspace_extra_bytes)

"""DeepSeek-V4.1's indexer kinds on the releases whose code for them was read (docs/design.md#models):
each release's path is its profile's ``v41_path`` fact (``data/engines/``, with its source).

V4.1 has three kinds that compute an indexer (``data/models/deepseek-v4.1-flash.json``): c2 (K
compressed by 2, every prefill row), the c1 candidate source and the c1 candidate consumers
(uncompressed K, each request's last ``sliding_window`` rows under the decoder SWA bounded replay).
How each release computes them on an H200 (SM90):

- vLLM 0.33.0 (``dense``): every kind on the dense ``SparseAttnIndexer`` and its 512 MiB logits
  chunker: the consumers too, dense logits over the whole K masked to the candidate blocks
  (``model_executor/layers/sparse_attn_indexer.py:737-760``); the sparse candidate path is opt-in
  (``config/attention.py:100`` ``indexer_sparse_logits: bool = False``) and needs SM100 and mxfp4
  (``models/deepseek_v41/attention.py:1428-1443``).  The replay keeps each request's last
  ``min(query_len, window)`` rows (``models/deepseek_v41/nvidia/model_state.py:536-539``) from the
  last KV source on (``nvidia/model.py:855-868``, on by default: ``config/cache.py:367``).
- SGLang 0.5.23 (``torch``): on SM90 DeepGEMM's fp8_fp4 MQA logits are not used
  (``srt/layers/attention/dsv4/v41_indexer/__init__.py:43-62``), and every kind, the candidate
  source and consumers included (``__init__.py:99-100``: the dense-blocks backend below SM100),
  scores request by request on torch (``v41_indexer/scoring.py:356-436``): a request's K is
  ``lc = seq_len // ratio`` positions, its width padded to 64 when ``lc >= 1024``
  (``scoring.py:401-406``), its rows in chunks of ``max(1, 2^30 // (heads x width x 2))``
  (``scoring.py:329, 427-430``), each chunk's scores ``[rows, width]`` fp32 (``dsv41_sparse.py:285-291``,
  ``s.float()``) then masked to ``[rows, lc]`` (``scoring.py:434-435``); the previous chunk's scores
  are still bound (the loop's ``chunk`` and the generator's ``s``) while the next are computed.
"""
from __future__ import annotations

from ..checks import BadValue
from ..dtypes import BF16_BYTES
from ..elementwise import maximum, where
from ..padding import align
from .profiles import get_engine, releases_text, v41_engines

# SGLang 0.5.23 v41_indexer/scoring.py:329: the cap on one bf16 [rows, heads, width] score chunk
TORCH_SCORE_BUDGET_BYTES = 1 << 30
# scoring.py:401-406: K padded to 64 positions once a request sees 1024 or more
TORCH_PAD_FROM, TORCH_PAD_TO = 1024, 64
# the previous chunk's scores are alive while the next chunk's are computed
TORCH_LOGITS_ALIVE = 2


def v41_path(model: str, engine: str | None, gpu) -> str:
    """The release's path for the model's kinds (its profile's ``v41_path``), or BadValue in one
    line naming the releases whose code for them was read."""
    profile = None if engine is None else get_engine(engine)
    if profile is None or profile.v41_path is None:
        on = "no engine release" if engine is None else profile.name
        raise BadValue("engine", f"{on}: its path for {model}'s indexer kinds (c2, candidate source and "
                                 "consumers) is not modelled (its code for them was not read at this release); "
                                 f"modelled on: {releases_text(v41_engines())}")
    family = profile.v41_cuda_family
    if family is not None and gpu.cuda_family != family:
        raise BadValue("gpu", f"GPU {gpu.name!r}: not planned: {profile.name} computes {model}'s indexer with "
                              f"DeepGEMM's kernels there (read: its SM{family} torch path)")
    return profile.v41_path


def torch_width(lc):
    """The columns of SGLang 0.5.23's torch scores for a request that sees ``lc`` K positions (a
    number, or an array of them)."""
    return where(lc >= TORCH_PAD_FROM, align(lc, TORCH_PAD_TO), lc)


def torch_rows_per_chunk(heads: int, width):
    """``_score_chunks``' rows per chunk: the bf16 [rows, heads, width] scores under 1 GiB."""
    return maximum(1, TORCH_SCORE_BUDGET_BYTES // maximum(heads * width * BF16_BYTES, 1))

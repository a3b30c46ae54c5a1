"""Run vLLM 0.33.0's own QSA prefill chunking (Qwen3.8-Flash-Next's indexer) on a CPU.

``python vllm_qsa_chunks.py`` in an environment holding vLLM 0.33.0.  What runs is the release's
code: ``models/qwen4_exp/nvidia/ops/qsa_indexer.py``'s ``qsa_select_paged_prefill`` (the logits
width, the rows per chunk, the fp32 workspace it allocates once per call and the chunk loop),
with the block table's width from ``v1/worker/block_table.py``'s ``get_block_table_width`` and
the compressed states per block from ``v1/kv_cache_interface.py``'s ``MLAAttentionSpec`` (as
``QSACompressedKeyCache.get_kv_cache_spec`` builds it, ``tokens_per_state`` = the ratio).
Stubbed, as a CPU has no Triton GPU kernels: ``_prefill_logits`` (it records the slice it is
given and the workspace it slices) and ``_topk``.  ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` is set
per case in the environment, which ``vllm.envs`` reads on every access.

stdin:  {"cases": [{"budget_mb": int, "max_model_len": int, "block_size": int, "ratio": int,
          "rows": int, "num_requests": int, "max_seq_len": int}, ...]}
stdout: {"results": [{"table_columns": int, "width": int, "workspace_bytes": int,
          "chunks": [[row_start, row_end], ...]}, ...]}
"""
import json
import os
import sys
import types

import torch

from vllm.models.qwen4_exp.nvidia.ops import qsa_indexer
from vllm.v1.kv_cache_interface import MLAAttentionSpec
from vllm.v1.worker.block_table import get_block_table_width

HEADS, HEAD_DIM, TOPK = 4, 128, 2048


def run(case: dict) -> dict:
    os.environ["VLLM_SPARSE_INDEXER_MAX_LOGITS_MB"] = str(case["budget_mb"])
    block, ratio = case["block_size"], case["ratio"]
    spec = MLAAttentionSpec(block_size=block, num_kv_heads=1, head_size=HEAD_DIM, dtype=torch.bfloat16,
                            tokens_per_state=ratio)
    # AttentionSpec.max_num_blocks_per_req: cdiv(max_len, block_size x the DCP shards), one shard here
    config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(decode_context_parallel_size=1))
    table_width = get_block_table_width(spec.max_num_blocks_per_req(config, case["max_model_len"]), block)
    rows, requests = case["rows"], case["num_requests"]
    seen = {"chunks": [], "width": None, "workspace": None}

    def prefill_logits(q, k_cache, page_table, query_start_loc, visible_blocks, logits_workspace,
                       max_query_len, logits_width, query_offset, num_queries):
        assert 0 < logits_width <= page_table.shape[1] * k_cache.shape[1]
        assert logits_workspace.numel() >= num_queries * logits_width
        seen["chunks"].append([query_offset, query_offset + num_queries])
        seen["width"] = logits_width
        seen["workspace"] = logits_workspace.numel() * logits_workspace.element_size()
        return logits_workspace[: num_queries * logits_width].view(num_queries, logits_width)

    qsa_indexer._prefill_logits = prefill_logits
    qsa_indexer._topk = lambda *args, **kwargs: None
    q = torch.empty((rows, HEADS, HEAD_DIM), dtype=torch.bfloat16)
    k_cache = torch.empty((1, spec.num_states, 1, HEAD_DIM), dtype=torch.bfloat16)
    page_table = torch.zeros((requests, table_width), dtype=torch.int32)
    query_start_loc = torch.zeros(requests + 1, dtype=torch.int32)
    visible_blocks = torch.zeros(rows, dtype=torch.int32)
    block_indices = torch.empty((rows, TOPK // ratio), dtype=torch.int32)
    qsa_indexer.qsa_select_paged_prefill(q, k_cache, page_table, query_start_loc, visible_blocks, TOPK, ratio,
                                         rows, block_indices, case["max_seq_len"])
    return {"table_columns": table_width * spec.num_states, "width": seen["width"],
            "workspace_bytes": seen["workspace"], "chunks": seen["chunks"]}


def main() -> None:
    request = json.load(sys.stdin)
    json.dump({"results": [run(c) for c in request["cases"]]}, sys.stdout)


if __name__ == "__main__":
    main()

"""Run SGLang 0.5.23's DeepSeek-V4 C4 indexer metadata and logits allocation for ROCm on a CPU.

``python sglang_c4_hip.py SRC`` where SRC is an unpacked sglang 0.5.23 wheel.  What runs is the
release's code with ``is_hip`` true: ``dsv4/metadata.py`` as a module (``PagedIndexerMetadata``
built as the HIP backend builds it, deepseek_v4_backend_hip_radix.py:1122-1131, so its
``__post_init__`` decides whether a budget is read and rows are chunked), the width statement of
``page_table_from_req_to_token`` (kernels/ops/attention/dsv4/attn_glue_hip.py:383-385, lifted with
``ast``: the rest of it is a Triton launch), and ``_aiter_fp8_paged_mqa_logits`` from
``dsv4/indexer.py`` (lifted with ``ast``), called on ``meta`` tensors so that its own
``torch.empty`` gives the logits' shape and dtype without memory.  Stubbed: aiter's kernel (it
writes into the logits it is handed) and ``aiter_can_use_preshuffle_paged_mqa``.

stdin:  {"forwards": [{"requests": [[context_len, query_len], ...]}, ...]}
stdout: {"results": [{"deep_gemm_metadata": null or "set", "rows_per_chunk": n or null,
          "budget": bytes or null, "cols": max_compressed_seq_len, "shape": [rows, cols],
          "dtype": "torch.float32", "nbytes": bytes}, ...]}
"""
import ast
import os
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sglang_chunks import _module, load as load_utils, stub_eager_forward  # noqa: E402

METADATA = "sglang/srt/layers/attention/dsv4/metadata.py"
INDEXER = "sglang/srt/layers/attention/dsv4/indexer.py"
GLUE = "sglang/kernels/ops/attention/dsv4/attn_glue_hip.py"
MAX_LEN = 1_048_576 + 256  # req_to_token's width: the model's context


def _function(path, name):
    tree = ast.parse(open(path).read(), filename=path)
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def load(src):
    load_utils(src)  # mqa_logits_utils and environ, with the device stubs
    sys.modules["sglang.srt.utils"].is_hip = lambda: True  # the process runs on ROCm
    torch.cuda.is_current_stream_capturing = lambda: False
    stub_eager_forward()
    sys.modules["sglang.srt.utils"].is_sm120_supported = lambda: False
    metadata = _module("sglang.srt.layers.attention.dsv4.metadata", os.path.join(src, METADATA))

    # the page table's width: num_cols of page_table_from_req_to_token
    glue = _function(os.path.join(src, GLUE), "page_table_from_req_to_token")
    width = next(n for n in glue.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "num_cols")
    width_code = compile(ast.Module(body=[width], type_ignores=[]), GLUE, "exec")

    # aiter's paged kernel: it fills the logits handed to it
    for name in ("aiter", "aiter.ops", "aiter.ops.triton", "aiter.ops.triton.attention"):
        _module(name, package=True)
    _module("aiter.ops.triton.attention.pa_mqa_logits").deepgemm_fp8_paged_mqa_logits = lambda *a, **k: None
    namespace = {"torch": torch, "Any": object, "aiter_can_use_preshuffle_paged_mqa": lambda: True}
    fn = _function(os.path.join(src, INDEXER), "_aiter_fp8_paged_mqa_logits")
    exec(compile(ast.Module(body=[fn], type_ignores=[]), INDEXER, "exec"), namespace)
    return metadata, width_code, namespace["_aiter_fp8_paged_mqa_logits"]


def run_forward(loaded, forward) -> dict:
    metadata, width_code, logits_fn = loaded
    requests = forward["requests"]
    seq_lens = [c + q for c, q in requests]
    rows = sum(q for _, q in requests)
    # deepseek_v4_backend_hip_radix.py:2101-2103: an eager step's max_seq_len is its longest seq_len
    scope = {"max_seq_len": max(seq_lens), "req_to_token": types.SimpleNamespace(shape=(len(requests), MAX_LEN)),
             "page_size": 256}
    exec(width_code, scope)
    page_table = torch.empty((rows, scope["num_cols"]), dtype=torch.int32, device="meta")  # its width alone is read
    c4_lens = torch.cat([(c + torch.arange(q) + 1) // 4 for c, q in requests]).to(torch.int32)
    md = metadata.PagedIndexerMetadata(page_size=256, compressed_page_size=64, page_table=page_table,
                                       compressed_seq_lens=c4_lens, use_topk_v2=False)
    # forward_c4_indexer's q: [rows, 1 (next_n), 64 heads, 128] fp8, here on the meta device
    q = torch.empty((rows, 1, 64, 128), dtype=torch.float8_e4m3fn, device="meta")
    cache = torch.empty((1, 64, 1, 132), dtype=torch.uint8, device="meta")
    logits = logits_fn(q, cache, torch.empty((rows, 64), device="meta"), torch.empty((rows, 1), device="meta"),
                       torch.empty(page_table.shape, device="meta"), md.deep_gemm_metadata, md.max_compressed_seq_len,
                       False)
    return {"deep_gemm_metadata": None if md.deep_gemm_metadata is None else "set",
            "rows_per_chunk": md.rows_per_chunk, "budget": md.mqa_logits_budget_bytes,
            "cols": md.max_compressed_seq_len, "shape": list(logits.shape), "dtype": str(logits.dtype),
            "nbytes": logits.numel() * logits.element_size()}


def main():
    import json

    request = json.load(sys.stdin)
    loaded = load(sys.argv[1])
    json.dump({"results": [run_forward(loaded, f) for f in request["forwards"]]}, sys.stdout)


if __name__ == "__main__":
    main()

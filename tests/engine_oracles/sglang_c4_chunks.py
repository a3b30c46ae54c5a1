"""Run SGLang's own DeepSeek-V4 C4 indexer budget, sub-path and row-chunk code on a CPU.

``python sglang_c4_chunks.py SRC`` where SRC is an unpacked sglang wheel (0.5.23, with
``layers/attention/dsv4/metadata.py``; scripts/install_engines.sh makes one).  What runs is
the release's code: ``mqa_logits_utils.py``, ``environ.py`` and ``dsv4/metadata.py`` as
modules (``PagedIndexerMetadata`` built as the backend builds it, so its once-per-forward
budget and ``plan_indexer_row_chunks`` run), from ``attn_metadata_kernels.py`` the torch
``build_page_table_positions`` (the page table whose width sets the paged logits' columns),
and from ``dsv4/indexer.py`` the methods ``_can_use_nonpaged_indexer`` and
``_get_nonpaged_indexer_plan``, lifted with ``ast`` because that module imports GPU kernels.
Stubbed, as a CPU has none of them: the device's total memory, ``mem_fraction_static``,
``torch.cuda.mem_get_info`` (the free memory given per forward), the CUDA-graph and capture
flags (off), DeepGEMM's schedule metadata (not read here) and the tensors' device (CUDA).

stdin:  {"forwards": [{"total_bytes": T, "mem_fraction_static": f or null, "fraction": f,
          "free_bytes": F, "requests": [[context_len, query_len], ...]}, ...]}
stdout: {"results": [{"path": "paged" | "non-paged", "budget": bytes or null, "cols": logits width,
          "row_bytes": mqa_logits_row_bytes(cols), "chunks": [[row_start, row_end], ...]}, ...]}
"""
import ast
import os
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sglang_chunks import Device, _lift, _module, load as load_utils  # noqa: E402

METADATA = "sglang/srt/layers/attention/dsv4/metadata.py"
INDEXER = "sglang/srt/layers/attention/dsv4/indexer.py"
KERNELS = "sglang/kernels/ops/attention/dsv4/attn_metadata_kernels.py"
MAX_LEN = 1_048_576 + 256  # req_to_token's width: the model's context


class CudaLike(torch.Tensor):
    """A CPU tensor that says it is on CUDA, so ``_mqa_logits_budget`` reads the budget."""

    @property
    def is_cuda(self):
        return True


def load(src):
    load_utils(src)  # mqa_logits_utils and environ, with the device stubs
    torch.cuda.is_current_stream_capturing = lambda: False
    for name in ("sglang.srt.model_executor", "sglang.srt.model_executor.runner_backend_utils",
                 "sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph",
                 "sglang.srt.model_executor.runner_utils", "sglang.srt.layers.attention.dsv4",
                 "sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.attention"):
        _module(name, package=True)
    _module("sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph.context"
            ).is_in_breakable_cuda_graph = lambda: False
    _module("sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph"
            ).is_in_tc_piecewise_cuda_graph = lambda: False
    _module("sglang.srt.model_executor.runner_utils.capture_mode").get_is_capture_mode = lambda: False
    utils = sys.modules["sglang.srt.utils"]
    utils.is_sm120_supported = lambda: False  # an H200
    deep_gemm = _module("deep_gemm")
    deep_gemm.get_paged_mqa_logits_metadata = lambda lens, page, sms: torch.empty(0)  # a schedule, not read
    deep_gemm.get_num_sms = lambda: 132
    kernels = _module("sglang.kernels.ops.attention.dsv4")
    kernels.get_paged_mqa_logits_metadata = deep_gemm.get_paged_mqa_logits_metadata
    kernels.plan_topk_v2 = lambda lens: None
    metadata = _module("sglang.srt.layers.attention.dsv4.metadata", os.path.join(src, METADATA))

    pages = {"torch": torch, "PageTablePositionsResult": types.SimpleNamespace}
    _lift(os.path.join(src, KERNELS), ("build_page_table_positions",), pages)

    m = sys.modules["sglang.srt.layers.attention.mqa_logits_utils"]
    envs = sys.modules["sglang.srt.environ"].envs
    extend = object()
    namespace = {"torch": torch, "envs": envs, "is_cuda": lambda: True, "is_hip": lambda: False,
                 "ForwardMode": types.SimpleNamespace(EXTEND=extend),
                 "get_parallel": lambda: types.SimpleNamespace(attn_cp_size=1),
                 "is_in_tc_piecewise_cuda_graph": lambda: False, "is_in_breakable_cuda_graph": lambda: False,
                 "NonPagedIndexerPlan": metadata.NonPagedIndexerPlan,
                 "mqa_logits_rows_per_chunk": m.mqa_logits_rows_per_chunk,
                 "mqa_logits_row_bytes": m.mqa_logits_row_bytes,
                 "Optional": __import__("typing").Optional, "List": list, "C4Indexer": object,
                 "ForwardBatch": object, "PagedIndexerMetadata": metadata.PagedIndexerMetadata}
    tree = ast.parse(open(os.path.join(src, INDEXER)).read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "C4IndexerBackendMixin")
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name in ("_can_use_nonpaged_indexer", "_get_nonpaged_indexer_plan"):
            fn.decorator_list = []
            exec(compile(ast.Module(body=[fn], type_ignores=[]), INDEXER, "exec"), namespace)
    mixin = type("Backend", (), {"_can_use_nonpaged_indexer": namespace["_can_use_nonpaged_indexer"],
                                 "_get_nonpaged_indexer_plan": namespace["_get_nonpaged_indexer_plan"],
                                 "hisparse_coordinator": None,
                                 "dsa_topk_backend": types.SimpleNamespace(is_sgl_kernel=lambda: True)})
    return metadata, pages["build_page_table_positions"], mixin(), extend, m


def run_forward(loaded, forward) -> dict:
    metadata, build_pages, backend, extend, m = loaded
    os.environ["SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION"] = repr(forward["fraction"])
    Device.total_bytes = forward["total_bytes"]
    Device.mem_fraction_static = forward["mem_fraction_static"]
    Device.free_bytes = forward["free_bytes"]
    requests = forward["requests"]
    seq_lens = [c + q for c, q in requests]
    extend_lens = [q for _, q in requests]
    rows = sum(extend_lens)
    # deepseek_v4_backend.py _build_forward_metadata: max_seq_len = the step's longest seq_len
    req_to_token = torch.arange(MAX_LEN, dtype=torch.int32).expand(len(requests), MAX_LEN)
    prep = build_pages(req_to_token=req_to_token, req_pool_indices_repeated=torch.arange(len(requests)),
                       seq_lens_casual=torch.tensor(seq_lens), max_seq_len=max(seq_lens), page_size=256,
                       swa_window=128)
    c4_lens = torch.cat([(c + torch.arange(q) + 1) // 4 for c, q in requests]).to(torch.int32)
    md = metadata.PagedIndexerMetadata(page_size=256, compressed_page_size=64, page_table=prep.page_table,
                                       compressed_seq_lens=torch.Tensor._make_subclass(CudaLike, c4_lens),
                                       use_topk_v2=False)
    batch = types.SimpleNamespace(
        forward_mode=extend, _original_forward_mode=None, tbo_parent_token_range=None,
        batch_size=len(requests), seq_lens=torch.tensor(seq_lens), seq_lens_cpu=torch.tensor(seq_lens),
        extend_seq_lens_cpu=extend_lens, extend_seq_lens=torch.tensor(extend_lens),
        extend_start_loc=torch.tensor([0]), extend_num_tokens=rows)
    c4_indexer = types.SimpleNamespace(use_fp4_indexer=False, index_topk=512)
    page_table = prep.page_table[:1].expand(rows, prep.page_table.shape[1])
    plan = backend._get_nonpaged_indexer_plan(c4_indexer=c4_indexer, forward_batch=batch, indexer_metadata=md,
                                              page_table=page_table, c4_seq_lens=c4_lens, query_rows=rows)
    if plan is not None:
        path, cols, per = "non-paged", plan.max_seqlen_k, plan.rows_per_chunk
    else:
        path, cols, per = "paged", md.max_compressed_seq_len, md.rows_per_chunk
    chunks = [[s.start, s.stop] for s in metadata.iter_row_chunks(num_rows=rows, rows_per_chunk=per)]
    return {"path": path, "budget": md.mqa_logits_budget_bytes, "cols": cols,
            "row_bytes": m.mqa_logits_row_bytes(cols), "chunks": chunks}


def main():
    import json

    loaded = load(sys.argv[1])
    request = json.load(sys.stdin)
    json.dump({"results": [run_forward(loaded, f) for f in request["forwards"]]}, sys.stdout)


if __name__ == "__main__":
    main()

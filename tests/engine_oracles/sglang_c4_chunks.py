"""Run SGLang's own DeepSeek-V4 C4 indexer budget, sub-path and row-chunk code on a CPU.

``python sglang_c4_chunks.py SRC`` where SRC is an unpacked sglang wheel (0.5.12-0.5.23, with
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

0.5.21 and 0.5.22 run the same way (their page-table kernel file is
``kernels/ops/attention/dsv4_attn_metadata_kernels.py``).  0.5.12-0.5.20 read no budget on this
path and call the logits kernel once over every query row (0.5.12 dsv4/indexer.py:388-397,
0.5.17 :756-783, 0.5.20 :961-984): ``run_forward_one_call`` runs their ``dsv4/metadata.py``
(``PagedIndexerMetadata`` and its ``max_c4_seq_len`` / ``max_compressed_seq_len``), their page
table (0.5.16-0.5.20: ``build_page_table_positions``; 0.5.12-0.5.15: the two ``page_table = ...``
statements of ``deepseek_v4_backend.py``, lifted with ``ast``) and, from 0.5.15, their
``_can_use_nonpaged_indexer`` and ``_get_nonpaged_indexer_plan``; its one chunk of every row
and its ``budget`` None restate that one call.

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
from sglang_chunks import Device, _lift, _module, load as load_utils, stub_eager_forward  # noqa: E402

METADATA = "sglang/srt/layers/attention/dsv4/metadata.py"
INDEXER = "sglang/srt/layers/attention/dsv4/indexer.py"
KERNELS = "sglang/kernels/ops/attention/dsv4/attn_metadata_kernels.py"
KERNELS_BEFORE_0_5_23 = "sglang/kernels/ops/attention/dsv4_attn_metadata_kernels.py"  # 0.5.16-0.5.22
MAX_LEN = 1_048_576 + 256  # req_to_token's width: the model's context


class CudaLike(torch.Tensor):
    """A CPU tensor that says it is on CUDA, so ``_mqa_logits_budget`` reads the budget."""

    @property
    def is_cuda(self):
        return True


def load(src):
    load_utils(src)  # mqa_logits_utils and environ, with the device stubs
    torch.cuda.is_current_stream_capturing = lambda: False
    stub_eager_forward("sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.attention")
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
    kernels_path = os.path.join(src, KERNELS)
    if not os.path.exists(kernels_path):
        kernels_path = os.path.join(src, KERNELS_BEFORE_0_5_23)
    _lift(kernels_path, ("build_page_table_positions",), pages)

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


BACKEND = "sglang/srt/layers/attention/deepseek_v4_backend.py"


def load_one_call(src):
    """0.5.12-0.5.20: the release's metadata module, page table and non-paged plan (from 0.5.15)."""
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.attention",
                 "sglang.srt.layers.attention.dsv4", "sglang.kernels", "sglang.kernels.ops",
                 "sglang.kernels.ops.attention", "sglang.srt.debug_utils"):
        _module(name, package=True)
    _module("sglang.srt.debug_utils.cuda_coredump")  # imported by environ.py up to 0.5.19, unused here
    _module("sglang.srt.environ", os.path.join(src, "sglang/srt/environ.py"))  # stdlib otherwise
    utils = _module("sglang.srt.utils", package=True)
    utils.is_hip = utils.is_xpu = utils.is_sm120_supported = lambda: False  # CUDA on an H200
    torch.cuda.is_current_stream_capturing = lambda: False
    deep_gemm = _module("deep_gemm")
    deep_gemm.get_paged_mqa_logits_metadata = lambda *a, **k: torch.empty(0)  # a schedule, not read
    deep_gemm.get_num_sms = lambda: 132
    _module("sglang.jit_kernel", package=True)
    for name in ("sglang.kernels.ops.attention.dsv4", "sglang.jit_kernel.dsv4", "sglang.jit_kernel.deepseek_v4",
                 "sglang.srt.layers.attention.dsv4.metadata_kernel"):
        kernels = _module(name)
        kernels.get_paged_mqa_logits_metadata = deep_gemm.get_paged_mqa_logits_metadata
        kernels.plan_topk_v2 = lambda *a, **k: torch.empty(0)
    metadata = _module("sglang.srt.layers.attention.dsv4.metadata", os.path.join(src, METADATA))

    kernels_path = os.path.join(src, KERNELS_BEFORE_0_5_23)
    if os.path.exists(kernels_path):  # 0.5.16-0.5.20
        pages = {"torch": torch, "PageTablePositionsResult": types.SimpleNamespace}
        _lift(kernels_path, ("build_page_table_positions",), pages)
        build = pages["build_page_table_positions"]

        def page_table(req_to_token, indices, seq_lens, max_seq_len):
            return build(req_to_token=req_to_token, req_pool_indices_repeated=indices,
                         seq_lens_casual=torch.tensor(seq_lens), max_seq_len=max_seq_len, page_size=256,
                         swa_window=128).page_table
    else:  # 0.5.12-0.5.15: two statements of DeepseekV4AttnBackend.make_core_attn_metadata
        path = os.path.join(src, BACKEND)
        tree = ast.parse(open(path).read(), filename=path)
        statements = None
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef):
                found = [n for n in fn.body if isinstance(n, ast.Assign)
                         and getattr(n.targets[0], "id", "") == "page_table"]
                if len(found) == 2 and ast.unparse(found[0].value).startswith("req_to_token[req_pool_indices_repeated"):
                    statements = found
                    break
        assert statements is not None, "the page table statements moved"
        code = compile(ast.Module(body=statements, type_ignores=[]), path, "exec")

        def page_table(req_to_token, indices, seq_lens, max_seq_len):
            scope = {"torch": torch, "req_to_token": req_to_token, "req_pool_indices_repeated": indices,
                     "max_seq_len": max_seq_len, "self": types.SimpleNamespace(page_size=256)}
            exec(code, scope)
            return scope["page_table"]

    backend = None
    tree = ast.parse(open(os.path.join(src, INDEXER)).read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "C4IndexerBackendMixin")
    methods = {fn.name: fn for fn in cls.body if isinstance(fn, ast.FunctionDef)}
    if "_get_nonpaged_indexer_plan" in methods:  # 0.5.15 on
        extend = object()
        namespace = {"torch": torch, "envs": sys.modules["sglang.srt.environ"].envs, "is_cuda": lambda: True,
                     "is_hip": lambda: False, "ForwardMode": types.SimpleNamespace(EXTEND=extend),
                     "get_parallel": lambda: types.SimpleNamespace(attn_cp_size=1),
                     "get_attention_cp_size": lambda: 1,
                     "is_in_tc_piecewise_cuda_graph": lambda: False, "is_in_breakable_cuda_graph": lambda: False,
                     "NonPagedIndexerPlan": metadata.NonPagedIndexerPlan,
                     "Optional": __import__("typing").Optional, "List": list, "C4Indexer": object,
                     "ForwardBatch": object, "PagedIndexerMetadata": metadata.PagedIndexerMetadata}
        for name in ("_can_use_nonpaged_indexer", "_get_nonpaged_indexer_plan"):
            fn = methods[name]
            fn.decorator_list = []
            exec(compile(ast.Module(body=[fn], type_ignores=[]), INDEXER, "exec"), namespace)
        backend = type("Backend", (), {"_can_use_nonpaged_indexer": namespace["_can_use_nonpaged_indexer"],
                                       "_get_nonpaged_indexer_plan": namespace["_get_nonpaged_indexer_plan"],
                                       "hisparse_coordinator": None,
                                       "dsa_topk_backend": types.SimpleNamespace(is_sgl_kernel=lambda: True)})()
        backend.extend = extend
    return metadata, page_table, backend


def run_forward_one_call(loaded, forward) -> dict:
    import dataclasses

    metadata, build_pages, backend = loaded
    requests = forward["requests"]
    seq_lens = [c + q for c, q in requests]
    extend_lens = [q for _, q in requests]
    rows = sum(extend_lens)
    req_to_token = torch.arange(MAX_LEN, dtype=torch.int32).expand(len(requests), MAX_LEN)
    table = build_pages(req_to_token, torch.arange(len(requests)), seq_lens, max(seq_lens))
    c4_lens = torch.cat([(c + torch.arange(q) + 1) // 4 for c, q in requests]).to(torch.int32)
    given = {"page_size": 256, "compressed_page_size": 64, "page_table": table, "c4_seq_lens": c4_lens,
             "compressed_seq_lens": c4_lens, "use_topk_v2": False}
    names = {f.name for f in dataclasses.fields(metadata.PagedIndexerMetadata) if f.init}
    md = metadata.PagedIndexerMetadata(**{k: v for k, v in given.items() if k in names})
    paged = md.max_c4_seq_len if hasattr(md, "max_c4_seq_len") else md.max_compressed_seq_len
    plan = None
    if backend is not None:
        batch = types.SimpleNamespace(
            forward_mode=backend.extend, _original_forward_mode=None, tbo_parent_token_range=None,
            batch_size=len(requests), seq_lens=torch.tensor(seq_lens), seq_lens_cpu=torch.tensor(seq_lens),
            extend_seq_lens_cpu=extend_lens, extend_seq_lens=torch.tensor(extend_lens),
            extend_start_loc=torch.tensor([0]), extend_num_tokens=rows)
        c4_indexer = types.SimpleNamespace(use_fp4_indexer=False, index_topk=512)
        plan = backend._get_nonpaged_indexer_plan(
            c4_indexer=c4_indexer, forward_batch=batch, indexer_metadata=md,
            page_table=table[:1].expand(rows, table.shape[1]), c4_seq_lens=c4_lens, query_rows=rows)
    path, cols = ("non-paged", plan.max_seqlen_k) if plan is not None else ("paged", paged)
    # one call over every query row, no budget read (restated: see the docstring)
    return {"path": path, "budget": None, "cols": cols, "row_bytes": -(-cols // 256) * 256 * 4,
            "chunks": [[0, rows]]}


def main():
    import json

    src = sys.argv[1]
    request = json.load(sys.stdin)
    if os.path.exists(os.path.join(src, "sglang/srt/layers/attention/mqa_logits_utils.py")):  # 0.5.21 on
        loaded = load(src)
        results = [run_forward(loaded, f) for f in request["forwards"]]
    else:
        loaded = load_one_call(src)
        results = [run_forward_one_call(loaded, f) for f in request["forwards"]]
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    main()

"""Run SGLang's own GLM-5.3-Flash kpool indexer width and row-chunk code on a CPU.

``python sglang_kpool_chunks.py SRC`` where SRC is an unpacked sglang wheel (0.5.23, with
``layers/attention/dsa/kpool_plan.py``; scripts/install_engines.sh makes one).  What runs is the
release's code: ``mqa_logits_utils.py`` and ``environ.py`` as modules (as ``sglang_chunks.py``
loads them), from ``dsa/kpool_plan.py`` the function ``_append_local_rows`` (the pooled pages
whose sum is the logits' width, ``ragged_total_k_rows = total_pool_pages x index_page_size``,
``_kpool_plan_to_gpu``) and from ``dsa/dsa_indexer_kpool.py`` the function
``_mqa_logits_row_chunks`` (the budget read on the call and the row slices), both lifted with
``ast`` because those modules import GPU kernels.  Stubbed, as a CPU has none of them: the
device's total memory, ``mem_fraction_static``, ``torch.cuda.mem_get_info`` (the free memory
given per forward), the capture flags (off) and the device (index 0).

stdin:  {"forwards": [{"total_bytes": T, "mem_fraction_static": f or null, "fraction": f,
          "free_bytes": F, "requests": [[context_len, query_len], ...]}, ...]}
stdout: {"results": [{"rows": query rows, "cols": ragged_total_k_rows,
          "chunks": [[row_start, row_end], ...]}, ...]}
"""
import ast
import logging
import os
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sglang_chunks import Device, _lift, load as load_utils  # noqa: E402

PLAN = "sglang/srt/layers/attention/dsa/kpool_plan.py"
INDEXER = "sglang/srt/layers/attention/dsa/dsa_indexer_kpool.py"
KPOOL = 4  # GLM-5.3-Flash's index_kpool
INDEX_PAGE = 64  # the index page: 64 pooled entries (dsa_indexer_kpool.py's assert page_size == 64)


def load(src):
    load_utils(src)  # mqa_logits_utils and environ, with the device stubs
    m = sys.modules["sglang.srt.layers.attention.mqa_logits_utils"]
    torch.cuda.is_current_stream_capturing = lambda: False
    namespace = {"List": list, "_KPoolCpuPlan": object}
    _lift(os.path.join(src, PLAN), ("_append_local_rows",), namespace)
    chunks_ns = {"capture_mode": types.SimpleNamespace(is_capture_mode=False), "torch": torch,
                 "Tuple": tuple, "slice": slice, "logger": logging.getLogger("kpool"), "is_hip": lambda: False,
                 **{name: getattr(m, name) for name in ("mqa_logits_should_chunk", "mqa_logits_budget_bytes",
                                                        "mqa_logits_rows_per_chunk", "mqa_logits_row_bytes")}}
    _lift(os.path.join(src, INDEXER), ("_mqa_logits_row_chunks",), chunks_ns)
    # the plan path takes every extend step: assert the call sizes its chunks from these two
    text = open(os.path.join(src, INDEXER)).read()
    assert "num_rows=n_real, num_cols=total_k_rows" in text, "the plan path no longer chunks on the plan's width"
    return namespace["_append_local_rows"], chunks_ns["_mqa_logits_row_chunks"]


def run(append_local_rows, row_chunks, forward) -> dict:
    os.environ["SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION"] = repr(forward["fraction"])
    Device.total_bytes = forward["total_bytes"]
    Device.mem_fraction_static = forward["mem_fraction_static"]
    Device.free_bytes = forward["free_bytes"]
    extend = [q for _, q in forward["requests"]]
    seq = [c + q for c, q in forward["requests"]]
    plan = types.SimpleNamespace(ragged_q_len=[], ragged_pool_pages=[], cu_pages_excl=[], cu_q_len_excl=[],
                                 total_pool_pages=0)
    append_local_rows(plan, KPOOL, INDEX_PAGE, extend, seq)
    cols = plan.total_pool_pages * INDEX_PAGE  # _kpool_plan_to_gpu: ragged_total_k_rows
    rows = sum(extend)
    slices = row_chunks(num_rows=rows, num_cols=cols, device=types.SimpleNamespace(index=0))
    return {"rows": rows, "cols": cols, "chunks": [[s.start, s.stop] for s in slices]}


def main():
    import json

    append_local_rows, row_chunks = load(sys.argv[1])
    request = json.load(sys.stdin)
    json.dump({"results": [run(append_local_rows, row_chunks, f) for f in request["forwards"]]}, sys.stdout)


if __name__ == "__main__":
    main()

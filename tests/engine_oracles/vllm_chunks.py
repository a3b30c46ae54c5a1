"""Run the installed vLLM release's own indexer prefill chunker on many batches.

Runs inside an engine environment (``.venv-engines/vllm-X``, or the project's .venv for
0.33.0); needs only torch and vllm, nothing of this project.

stdin:  {"batches": [{"seq_lens": [...], "query_lens": [...], "workspace": W,
                      "max_logits_bytes": B}, ...]}
stdout: {"vllm": version, "chunker": qualified name, "results": [
           {"chunks": [[req_start, req_end, row_start, row_end], ...]} | {"error": text}, ...]}

Rows are relative to the chunk's first request (the engines' query slice); a chunk of the
workspace-only chunker (before 0.19.0) covers all rows of its requests.
"""
import importlib.metadata
import json
import os
import sys
import warnings


def load_chunker():
    """(qualified name, call(seq_lens, query_lens, workspace, max_logits_bytes) -> chunks)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    warnings.simplefilter("ignore")
    import torch
    import vllm.v1.attention.backends.mla.indexer as indexer

    def as_tensor(values):
        return torch.tensor(values, dtype=torch.int32)

    builder = getattr(indexer, "DeepseekV32IndexerMetadataBuilder", None)
    for owner, name in ((builder, "_split_indexer_prefill_chunks"), (indexer, "split_indexer_prefill_chunks")):
        fn = getattr(owner, name, None)
        if fn is not None:  # 0.19.0 and later: (request slice, query slice) pairs
            def call(seq, q, workspace, budget, fn=fn):
                return [[r.start, r.stop, s.start, s.stop]
                        for r, s in fn(as_tensor(seq), as_tensor(q), workspace, budget)]
            return f"{owner.__name__}.{name}", call
    from vllm.v1.attention.backends.utils import split_prefill_chunks  # before 0.19.0

    def call(seq, q, workspace, budget):
        return [[a, b, 0, sum(q[a:b])] for a, b in split_prefill_chunks(as_tensor(seq), workspace)]
    return "vllm.v1.attention.backends.utils.split_prefill_chunks", call


def main():
    request = json.load(sys.stdin)
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # vLLM may print while importing
    try:
        name, call = load_chunker()
    finally:
        sys.stdout = real_stdout
    results = []
    for b in request["batches"]:
        try:
            results.append({"chunks": call(b["seq_lens"], b["query_lens"], b["workspace"],
                                           b.get("max_logits_bytes"))})
        except Exception as e:  # the workspace-only chunker asserts on a request over the workspace
            results.append({"error": f"{type(e).__name__}: {e}"})
    json.dump({"vllm": importlib.metadata.version("vllm"), "chunker": name, "results": results},
              sys.stdout)


if __name__ == "__main__":
    main()

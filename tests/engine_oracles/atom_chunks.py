"""Run ATOM's own indexer row-chunk code and its prefill metadata arithmetic on a CPU.

``python atom_chunks.py SRC`` where SRC holds ROCm/ATOM's ``atom/`` package (a checkout of main
ffdf3bb5, 2026-08-22).  ATOM imports aiter and ROCm kernels at module level, so nothing of it
imports here: what runs is its own statements, lifted with ``ast`` from the files.

* ``atom/utils/envs.py`` as a module (it imports only ``os`` and ``typing``): the budget's
  default and how it parses ``ATOM_SPARSE_INDEXER_LOGITS_BUDGET_MB``.
* ``atom/models/deepseek_v2.py`` ``sparse_attn_indexer`` (DeepSeek-V3.2, GLM-5): the
  ``budget_bytes`` statement, the ``if`` that sizes ``chunk_tokens`` and the ``for`` loop over
  the chunks, its body cut to ``chunk_end`` and a record of ``(chunk_start, chunk_end)``.
* ``atom/models/deepseek_v4.py`` ``Indexer._prefill_chunked_topk``: the same three.
* ``atom/model_ops/attentions/backends.py`` ``CommonAttentionBuilder.prepare_prefill``: the
  statements up to its per-request loop, the loop (no block tables: it stops before the slot
  mapping), the ``total_tokens`` assignment of the ``has_cached`` block and ``total_kv``.

stdin:  {"budget_env": [null or "text", ...],
         "chunks": [{"budget_mb": B, "total_kv": N, "num_rows": M}, ...],
         "steps": [{"context_lens": [...], "num_cached_tokens": [...]}, ...]}
stdout: {"budget": [MiB read, ...], "v2": [[[start, end], ...], ...], "v4": [...],
         "total_kv": [{"total_kv": N, "has_cached": bool, "max_seqlen_k": L}, ...]}
"""
import ast
import importlib.util
import json
import os
import sys
import types

V2 = "atom/models/deepseek_v2.py"
V4 = "atom/models/deepseek_v4.py"
BUILDER = "atom/model_ops/attentions/backends.py"
ENVS = "atom/utils/envs.py"


def _function(path, name, cls=None):
    tree = ast.parse(open(path).read())
    scope = tree.body
    if cls is not None:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    return next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)


def _assigns(node, name) -> bool:
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)


def _chunk_statements(function) -> list:
    """The budget statement, the ``if`` that sets ``chunk_tokens`` and the chunk loop reduced to
    its ``chunk_end`` and a record, found wherever they sit in the function's body."""
    found, out = list(ast.walk(function)), []
    out.append(next(n for n in found if _assigns(n, "budget_bytes")))
    out.append(next(n for n in found if isinstance(n, ast.If) and any(
        _assigns(s, "chunk_tokens") for s in ast.walk(n)) and isinstance(n.test, ast.BoolOp)))
    loop = next(n for n in found if isinstance(n, ast.For) and isinstance(n.target, ast.Name)
                and n.target.id == "chunk_start")
    record = ast.parse("chunks.append((chunk_start, chunk_end))").body[0]
    loop.body = [s for s in loop.body if _assigns(s, "chunk_end")] + [record]
    out.append(loop)
    return out


def _compiled(statements, where):
    return compile(ast.fix_missing_locations(ast.Module(body=statements, type_ignores=[])), where, "exec")


def _builder_statements(src):
    function = _function(os.path.join(src, BUILDER), "prepare_prefill", cls="CommonAttentionBuilder")
    body = function.body
    loop_at = next(i for i, n in enumerate(body) if isinstance(n, ast.For))
    kept = list(body[:loop_at + 1])
    for node in body[loop_at + 1:]:
        if isinstance(node, ast.If) and any(_assigns(s, "total_tokens") for s in node.body):
            node.body = [s for s in node.body if _assigns(s, "total_tokens")]
            kept.append(node)
        elif _assigns(node, "total_kv"):
            kept.append(node)
    return _compiled(kept, BUILDER)


def _budget_reads(src, texts) -> list:
    spec = importlib.util.spec_from_file_location("atom_envs", os.path.join(src, ENVS))
    envs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(envs)
    out = []
    for text in texts:
        os.environ.pop("ATOM_SPARSE_INDEXER_LOGITS_BUDGET_MB", None)
        if text is not None:
            os.environ["ATOM_SPARSE_INDEXER_LOGITS_BUDGET_MB"] = text
        out.append(envs.environment_variables["ATOM_SPARSE_INDEXER_LOGITS_BUDGET_MB"]())
    return out


def main() -> None:
    src = sys.argv[1]
    request = json.load(sys.stdin)
    v2 = _compiled(_chunk_statements(_function(os.path.join(src, V2), "sparse_attn_indexer")), V2)
    v4 = _compiled(_chunk_statements(_function(os.path.join(src, V4), "_prefill_chunked_topk",
                                               cls="Indexer")), V4)
    result = {"budget": _budget_reads(src, request.get("budget_env", [])), "v2": [], "v4": [], "total_kv": []}
    for case in request.get("chunks", []):
        for key, code, names in (("v2", v2, ("total_kv", "num_rows")), ("v4", v4, ("row_width", "total_tokens"))):
            scope = {"SPARSE_INDEXER_LOGITS_BUDGET_MB": case["budget_mb"], "chunks": [],
                     names[0]: case["total_kv"], names[1]: case["num_rows"]}
            exec(code, scope)
            result[key].append(scope["chunks"])
    builder = _builder_statements(src)
    runner = types.SimpleNamespace(forward_vars={}, block_size=16)
    for step in request.get("steps", []):
        lens, cached = step["context_lens"], step["num_cached_tokens"]
        batch = types.SimpleNamespace(total_seqs_num_prefill=len(lens), block_tables=[], context_lens=lens,
                                      num_cached_tokens=cached,
                                      total_tokens_num_prefill=sum(a - b for a, b in zip(lens, cached)))
        scope = {"self": types.SimpleNamespace(model_runner=runner, dcp_world_size=1), "batch": batch}
        exec(builder, scope)
        result["total_kv"].append({"total_kv": int(scope["total_kv"]), "has_cached": bool(scope["has_cached"]),
                                   "max_seqlen_k": int(scope["max_seqlen_k"])})
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()

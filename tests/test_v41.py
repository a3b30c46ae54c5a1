"""DeepSeek-V4.1-Flash's indexer kinds on vLLM 0.33.0 and SGLang 0.5.23, held to the releases' code.

vLLM 0.33.0 (in the project's .venv): its own prefill chunker (``engine_oracles/vllm_chunks.py``)
on each kind's view of the step, c2 on ``seq_len // 2`` entries with every row, the c1 kinds on
the rows its decoder replay keeps, computed by the release's own statement (lifted with ``ast``
from ``models/deepseek_v41/nvidia/model_state.py``).  SGLang 0.5.23 (its unpacked wheel under
``.venv-engines``): the torch indexer's own row chunking (``_score_chunks`` and the scores of
``DeepseekV41Indexer``, lifted with ``ast`` and run on meta tensors) and its ``late_layer_tail_lens``.
Without the releases these tests skip with the reason (they fail under CI).
"""
from __future__ import annotations

import ast
import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from indexer_lib.checks import BadValue
from indexer_lib.cli import main
from indexer_lib.engines.v41 import TORCH_SCORE_BUDGET_BYTES, torch_rows_per_chunk, torch_width
from indexer_lib.plan import PlanSettings
from indexer_lib.memory import make_plan
from indexer_lib.presets import MIB
from indexer_lib.workload import StepBatch

from test_engines import missing, run_oracle, sglang_src, vllm_python

MODEL = "deepseek-v4.1-flash"
VLLM, SGLANG = "vllm==0.33.0", "sglang==0.5.23"
KINDS = ("c2", "c1_candidate_source", "c1_candidate_consumer")


def steps(rng: random.Random, count: int) -> list[tuple[list[int], list[int]]]:
    """(query_lens, seq_lens): one to four prefills, short and long, contexts up to 1M."""
    out = [([8192], [1_048_576]), ([128], [1_048_576]), ([8192, 100], [600_000, 700_000])]
    for _ in range(count):
        q, s = [], []
        for _ in range(rng.choice((1, 1, 2, 3, 4))):
            query = rng.choice((rng.randint(1, 127), 128, rng.randint(129, 8192)))
            q.append(query)
            s.append(query + rng.choice((rng.randint(1100, 4096), rng.randint(0, 1_048_576 - query))))
        while sum(q) > 16384:
            q = [max(1, x // 2) for x in q]
        out.append((q, [max(a, b) for a, b in zip(q, s)]))
    return out


def lifted(path: Path, names: set[str]) -> list:
    """The module-level functions, classes and constants ``names`` of a file, as statements."""
    tree = ast.parse(path.read_text())
    keep = [n for n in tree.body if (isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names)
            or (isinstance(n, ast.Assign) and any(getattr(t, "id", None) in names for t in n.targets))]
    assert {getattr(n, "name", None) or n.targets[0].id for n in keep} == names, path
    return keep


# ------------------------------------------------------------------------------------- vLLM 0.33.0

def vllm_dir() -> Path:
    python = vllm_python("0.33.0")
    if python != sys.executable:
        missing("vLLM 0.33.0 in the project's .venv")
    import importlib.util
    return Path(importlib.util.find_spec("vllm").submodule_search_locations[0])


def vllm_kept_lens(query_lens: list[int], window: int) -> list[int]:
    """The rows vLLM 0.33.0's decoder replay keeps, by the release's own statement
    (``DeepseekV41ModelState._prepare_replay_batch``, the branch without PCP)."""
    src = (vllm_dir() / "models/deepseek_v41/nvidia/model_state.py").read_text()
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == "_prepare_replay_batch")
    (stmt,) = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "kept_lens"
               and "np.minimum" in ast.unparse(n.value)]
    q = np.array(query_lens)
    return eval(compile(ast.Expression(stmt.value), "model_state.py", "eval"),
                {"np": np, "keeps_rows": np.zeros(len(q), bool), "query_lens": q,
                 "layers": SimpleNamespace(window=window)}).tolist()


def test_vllm_keeps_each_requests_last_window_rows_past_the_last_kv_source():
    for q in ([1], [127, 128, 129], [8192, 3, 500]):
        batch = StepBatch.from_lengths(q, [x + 1000 for x in q])
        assert list(batch.tail(128).query_lens) == vllm_kept_lens(q, 128)
        assert list(batch.tail(128).seq_lens) == list(batch.seq_lens)  # each row still sees its whole K
    # the replay is on by default (CacheConfig.swa_bounded_replay) and starts at the last KV source
    cache = (vllm_dir() / "config/cache.py").read_text()
    assert "swa_bounded_replay: bool = True" in cache
    model = (vllm_dir() / "models/deepseek_v41/nvidia/model.py").read_text()
    assert "cut = max(config.kv_source_layer_ids)" in model and "self.decoder_replay_start = cut" in model
    # the consumers score densely and mask unless the opt-in sparse path is asked for
    assert "indexer_sparse_logits: bool = False" in (vllm_dir() / "config/attention.py").read_text()


def test_every_v41_kind_plans_chunk_for_chunk_as_vllm_0_33_does():
    cases = steps(random.Random("v41"), 60)
    batches, plans = [], []
    for q, s in cases:
        plan = make_plan(StepBatch.from_lengths(q, s), "engine", 512 * MIB, PlanSettings(MODEL, VLLM, temporaries="deepgemm"))
        kinds = dict(plan.kind_plans)
        assert tuple(kinds) == KINDS and plan.layer_kind in KINDS
        for name in KINDS:
            kp = kinds[name]
            ratio = 2 if name == "c2" else 1
            rows = q if ratio == 2 else vllm_kept_lens(q, 128)
            batches.append({"seq_lens": [x // ratio for x in s], "query_lens": rows, "workspace": kp.workspace_tokens,
                            "max_logits_bytes": 512 * MIB})
            plans.append(kp)
    answer = run_oracle(vllm_python("0.33.0"), "vllm_chunks.py", {"batches": batches})
    for b, kp, result in zip(batches, plans, answer["results"], strict=True):
        assert [[*c.requests, *c.rows] for c in kp.chunks] == result["chunks"], b
    # at 1M of context: c1's 128 kept rows are one 512 MiB sub-chunk; c2 256 rows per sub-chunk
    one_m = dict(make_plan(StepBatch.from_lengths([8192], [1_048_576]), "engine", 512 * MIB,
                           PlanSettings(MODEL, VLLM, temporaries="deepgemm")).kind_plans)
    c1 = one_m["c1_candidate_source"]
    assert [(c.num_rows, c.logits_cols, c.logits_bytes) for c in c1.chunks] == [(128, 1_048_576, 512 * MIB)]
    assert {c.num_rows for c in one_m["c2"].chunks} == {256} and one_m["c2"].num_chunks == 32
    assert one_m["c2"].workspace_tokens == c1.workspace_tokens // 2


# ----------------------------------------------------------------------------------- SGLang 0.5.23

def sglang_v41():
    src = Path(sglang_src()) / "sglang"
    dsv4 = src / "srt/layers/attention/dsv4"
    import torch
    ns = {"torch": torch, "Iterator": object, "Optional": object}
    chunk = SimpleNamespace  # ChunkScores: a msgspec.Struct there, its fields here
    ns["ChunkScores"] = lambda **kw: chunk(**kw)
    body = lifted(dsv4 / "v41_indexer/scoring.py", {"_score_chunks", "_TORCH_SCORE_BUDGET_BYTES"})
    exec(compile(ast.Module(body, []), "scoring.py", "exec"), ns)
    cls = next(n for n in ast.parse((dsv4 / "dsv41_sparse.py").read_text()).body
               if isinstance(n, ast.ClassDef) and n.name == "DeepseekV41Indexer")
    (scores,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "scores"]
    exec(compile(ast.Module([scores], []), "dsv41_sparse.py", "exec"), ns)
    tail = lifted(src / "kernels/ops/attention/dsv4/attn_metadata_kernels.py", {"late_layer_tail_lens"})
    exec(compile(ast.Module(tail, []), "attn_metadata_kernels.py", "exec"), ns)
    backend = (src / "srt/layers/attention/deepseek_v4_backend.py").read_text()
    assert "\nSWA_WINDOW = 128\n" in backend
    init = (dsv4 / "v41_indexer/__init__.py").read_text()
    assert "return is_cuda() and torch.cuda.get_device_capability()[0] >= 10" in init  # SM90: torch
    # every kind scores through prefill_requests on torch: c2's full top-k, the source's publish and
    # the consumers' consume (the dense-blocks backend below SM100)
    assert "if not is_sm100_or_newer() or candidate_topk_blocks <= 0:\n        return dense_blocks, dense_blocks" in init
    for file, functions in (("full_topk.py", {"_torch_prefill"}),
                            ("dense_blocks.py", {"_torch_publish_prefill", "_torch_consume_prefill"})):
        tree = ast.parse((dsv4 / "v41_indexer" / file).read_text())
        found = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in functions
                 and "prefill_requests(" in ast.unparse(n)}
        assert found == functions, file
    return ns


def sglang_chunks(ns, heads: int, rows: int, lc: int) -> list[tuple[int, int]]:
    """(rows, scores columns) of each chunk ``_score_chunks`` makes for one request, on meta tensors:
    the columns of the fp32 scores ``DeepseekV41Indexer.scores`` returns (K padded as
    ``prefill_requests`` pads it)."""
    import torch
    width = (lc + 63) // 64 * 64 if lc >= 1024 else lc  # scoring.py:401-406 (bf16 K on CUDA)
    seen = []

    def scores(q, k, w):
        out = ns["scores"](None, q, k, w)
        assert out.dtype == torch.float32 and out.shape[1] == k.shape[0]
        seen.append((out.shape[0], out.shape[1]))
        return out

    meta = dict(device="meta")
    q = torch.empty(rows, heads, 128, dtype=torch.bfloat16, **meta)
    weights = torch.empty(rows, heads, dtype=torch.bfloat16, **meta)
    index_k = torch.empty(width, 128, dtype=torch.bfloat16, **meta)
    request = SimpleNamespace(lc=lc, columns=torch.arange(lc, **meta), tok=torch.arange(rows),
                              lens=torch.empty(rows, dtype=torch.int64, **meta))
    for c in ns["_score_chunks"](indexer=SimpleNamespace(scores=scores), q=q, weights=weights,
                                 index_k=index_k, request=request):
        assert tuple(c.scores.shape) == (seen[-1][0], lc) and c.scores.dtype == torch.float32
    return seen


def test_sglang_torch_indexer_rows_and_widths_match_its_own_code():
    ns = sglang_v41()
    assert ns["_TORCH_SCORE_BUDGET_BYTES"] == TORCH_SCORE_BUDGET_BYTES
    for q in ([1], [127, 128, 129], [8192, 3, 500]):
        assert list(StepBatch.from_lengths(q, [x + 10 for x in q]).tail(128).query_lens) == \
            ns["late_layer_tail_lens"](q, 128)
    for q, s in steps(random.Random("sglang-v41"), 30):
        plan = make_plan(StepBatch.from_lengths(q, s), "engine", None, PlanSettings(MODEL, SGLANG, temporaries="deepgemm"))
        for name, kp in plan.kind_plans:
            ratio = 2 if name == "c2" else 1
            rows = q if ratio == 2 else ns["late_layer_tail_lens"](q, 128)
            theirs = [c for r, x in zip(rows, s) if x // ratio > 0 for c in sglang_chunks(ns, 32, r, x // ratio)]
            assert [(c.num_rows, c.logits_cols) for c in kp.chunks] == theirs, (name, q, s)
            assert all(c.logits_bytes == c.num_rows * c.logits_cols * 4 for c in kp.chunks)
            assert kp.logits_alive == 2


def test_sglang_torch_rule_at_1m():
    """At 1M of context a c1 row sees 1,048,576 positions: 2^30 // (32 x 1M x 2) = 16 rows per chunk,
    64 MiB of fp32 scores each, after 1 GiB of bf16 per-head scores; c2 sees 524,288: 32 rows."""
    assert torch_width(1000) == 1000 and torch_width(1025) == 1088
    assert torch_rows_per_chunk(32, 1_048_576) == 16 and torch_rows_per_chunk(32, 524_288) == 32
    plan = make_plan(StepBatch.from_lengths([8192], [1_048_576]), "engine", None,
                     PlanSettings(MODEL, SGLANG, temporaries="deepgemm"))
    kinds = dict(plan.kind_plans)
    assert [c.num_rows for c in kinds["c1_candidate_consumer"].chunks] == [16] * 8
    assert kinds["c2"].num_chunks == 256 and kinds["c2"].largest_logits_bytes == 64 * MIB


# ------------------------------------------------------------------------------- the command line

def test_plan_json_gives_every_kind_with_its_chunks_and_the_kind_that_sets_the_peak(capsys):
    for engine in (VLLM, SGLANG):
        assert main(["plan", "--model", MODEL, "--engine", engine, "--query-lens", "8192",
                     "--seq-lens", "1048576", "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        kinds = {k["name"]: k for k in d["layer_kinds"]}
        assert tuple(kinds) == KINDS and d["peak_layer_kind"] in KINDS
        assert d["largest_logits_bytes"] == kinds[d["peak_layer_kind"]]["largest_logits_bytes"]
        assert all(len(k["chunks"]) == k["num_chunks"] for k in kinds.values())
        assert kinds["c1_candidate_source"]["rows"] == 128 and kinds["c2"]["rows"] == 8192
        assert kinds["c2"]["kv"] == 524_288 and kinds["c1_candidate_consumer"]["candidates"] == 16_384
        assert ("per_head_scores_bytes" in kinds["c2"]) == (engine == SGLANG)
    assert main(["plan", "--model", MODEL, "--query-lens", "8192", "--seq-lens", "1048576"]) == 0
    out = capsys.readouterr().out
    assert "it sets the step's peak" in out and out.count("<- the step's peak") == 1


@pytest.mark.parametrize("args, says", [
    (["--engine", "vllm==0.30.0"], "vllm==0.30.0: its path for deepseek-v4.1-flash's indexer kinds"),
    (["--engine", "sglang==0.5.22"], "sglang==0.5.22: its path for deepseek-v4.1-flash's indexer kinds"),
    (["--engine", "trtllm"], "its path for deepseek-v4.1-flash's indexer kinds"),
    (["--engine", "sglang", "--gpu", "b200"], "computes deepseek-v4.1-flash's indexer with DeepGEMM's kernels"),
])
def test_releases_not_read_are_refused_in_one_line(args, says, capsys):
    assert main(["plan", "--model", MODEL, *args, "--query-lens", "8192", "--seq-lens", "65536"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    with pytest.raises(BadValue):
        PlanSettings(MODEL, "vllm==0.32.0")


def test_the_frontier_takes_the_worst_kind_of_the_worst_step():
    from indexer_lib.search.worst_step import worst_steps

    schedule = [StepBatch(StepBatch.from_lengths([8192], [s]).requests, step=i)
                for i, s in enumerate((8192, 65536, 524_288, 1_048_576))]
    for engine, budget in ((VLLM, 512 * MIB), (SGLANG, None)):
        settings = PlanSettings(MODEL, engine, temporaries="deepgemm")
        (w,) = worst_steps(schedule, "engine", [budget], settings)
        per_kind = {k: worst_steps(schedule, "engine", [budget], settings.where(kind=k))[0] for k in KINDS}
        assert w.layer_kind in KINDS and w.peak_transient_bytes == max(x.peak_transient_bytes for x in per_kind.values())
        plan = make_plan(schedule[w.worst_step], "engine", budget, settings)
        assert plan.layer_kind == w.layer_kind


def test_the_v41_reports_are_rows_of_the_field_data():
    from indexer_lib.study.reported import published_cases, reproduce

    cases = {c["case"]: c for c in published_cases()}
    want = {"sglang-dsv41-dense-16k-488k": (16_384, 487_936, True),   # sgl-project/sglang#39187
            "sglang-dsv41-consumer-16k-262k": (16_384, 262_144, True),  # #40352: '17 GB' = 16 GiB
            "sglang-dsv41-dense-16k-1m": (16_384, 1_048_576, False)}  # #40217: 96 GiB counts two bool masks
    for name, (rows, cols, matches) in want.items():
        r = reproduce(cases[name])
        assert (r["rows"], r["kv_tokens"], r["matches"]) == (rows, cols, matches), name
        assert cases[name]["note"] and cases[name]["source"].startswith("https://github.com/sgl-project/sglang/pull/")
    assert reproduce(cases["sglang-dsv41-dense-16k-1m"])["unpadded_gib"] == 64.0


def test_the_fast_planner_sees_each_kind_as_make_plan_does():
    """The frontier's shape planner plans a kind on the kind's own view (c1: each request's last rows)."""
    from indexer_lib.memory import memory_report
    from indexer_lib.search.worst_step import worst_steps

    steps_ = [StepBatch(StepBatch.from_lengths(q, s).requests, step=i)
              for i, (q, s) in enumerate(steps(random.Random("fast"), 12))]
    for engine, budget in ((VLLM, 512 * MIB), (SGLANG, None)):
        for kind in KINDS:
            settings = PlanSettings(MODEL, engine, temporaries="deepgemm", kind=kind)
            (w,) = worst_steps(steps_, "engine", [budget], settings)
            plan = make_plan(steps_[w.worst_step], "engine", budget, settings)
            assert (w.worst_chunks, w.peak_transient_bytes) == (plan.num_chunks, memory_report(plan).peak_transient)


def test_run_refuses_v41_in_one_line(capsys):
    """The CPU executor computes one dense kind: V4.1 is planned and modelled, not run."""
    assert main(["run", "--model", MODEL, "--query-lens", "100", "--seq-lens", "100000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "which the executor does not compute" in err

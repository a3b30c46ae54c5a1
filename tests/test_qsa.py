"""Qwen3.8-Flash-Next's QSA indexer on the releases whose prefill path for it was read.

vLLM 0.33.0 (``qsa_select_paged_prefill``) runs here from the project's environment with its
GPU kernels stubbed (``engine_oracles/vllm_qsa_chunks.py``): the plan's width, row slices and
allocation (one fp32 workspace per call) are the release's own.  SGLang 0.5.23's row-chunk
function is lifted from its unpacked wheel with ``ast``; its allocation (rows rounded up to
128 / H, mqa.py:449-466) is restated.  Without the releases these tests skip (fail under CI).
"""
from __future__ import annotations

import ast
import json
import random

import pytest
import torch

from indexer_lib.cli import main
from indexer_lib.engines import get_engine, qsa_engines
from indexer_lib.fast import plan_shapes, shapes_peak
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.plan import PlanSettings, get_strategy
from indexer_lib.plan.paths import vllm_qsa_table_columns
from indexer_lib.presets import MIB, get_model
from indexer_lib.workload import PrefillRequest, StepBatch

from test_engines import run_oracle, sglang_src, vllm_python

MODEL = "qwen3.8-flash-next"
VLLM = PlanSettings(MODEL, "vllm==0.33.0", temporaries="deepgemm")
SGLANG = PlanSettings(MODEL, "sglang==0.5.23", temporaries="deepgemm")
MAX_LEN = get_model(MODEL).max_model_len


def steps(rng: random.Random, count: int) -> list[StepBatch]:
    """Prefill steps of one to four requests, short and long, up to the model's context."""
    out = []
    for _ in range(count):
        requests = []
        for _ in range(rng.choice((1, 1, 2, 4))):
            query = rng.choice((rng.randint(1, 64), rng.randint(1, 8192), 8192, rng.randint(8192, 32768)))
            context = rng.choice((0, rng.randint(0, 4096), rng.randint(0, MAX_LEN - query)))
            requests.append(PrefillRequest(context, query))
        out.append(StepBatch(tuple(requests)))
    return out


def test_qsa_is_planned_on_the_releases_read_and_refused_by_name_elsewhere(capsys):
    assert qsa_engines() == ["sglang==0.5.23", "vllm==0.33.0"]
    model = get_model(MODEL)
    assert model.qsa and model.kv_ratio == 4 and model.main_kind.name == "qsa" and not model.main_kind.has_weights
    for release in ("vllm==0.30.0", "sglang==0.5.22", "trtllm==1.4.0rc4"):
        with pytest.raises(ValueError, match=f"{release}: its prefill path for qwen3.8-flash-next's QSA indexer"):
            PlanSettings(MODEL, release)
    with pytest.raises(ValueError, match="no engine release: its prefill path"):
        PlanSettings(MODEL)
    step = ["--model", MODEL, "--query-lens", "8192", "--seq-lens", "262144"]
    assert main(["plan", *step, "--engine", "vllm==0.30.0"]) == 2
    assert "vllm==0.30.0: its prefill path for qwen3.8-flash-next's QSA indexer" in capsys.readouterr().err
    # DeepSeek-V4's C4 kind is not QSA (weights, no pooling), and stays where it was
    assert not get_model("deepseek-v4-flash").qsa


def test_plan_json_names_the_qsa_kind_and_its_allocation(capsys):
    step = ["--model", MODEL, "--query-lens", "8192", "--seq-lens", "262144", "--json"]
    assert main(["plan", *step]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peak_layer_kind"] == "qsa" and out["num_chunks"] == 4
    assert out["largest_logits_bytes"] == 512 * MIB  # the one workspace of VLLM_SPARSE_INDEXER_MAX_LOGITS_MB
    (kind,) = out["layer_kinds"]
    assert (kind["name"], kind["indexer_layers"], kind["index_heads"], kind["compress_ratio"]) == ("qsa", 12, 4, 4)
    assert main(["plan", *step, "--engine", "sglang==0.5.23"]) == 0
    out = json.loads(capsys.readouterr().out)
    # 128 MiB // (65,536 blocks x 4) = 512 rows a chunk, 16 chunks of [512, 65,536] fp32
    assert (out["num_chunks"], out["largest_logits_bytes"], out["peak_layer_kind"]) == (16, 128 * MIB, "qsa")
    assert "budget_note" not in out


def test_vllm_qsa_width_slices_and_workspace_match_its_own_code():
    python = vllm_python("0.33.0")
    rng = random.Random(7)
    batches = steps(rng, 150) + [StepBatch((PrefillRequest(0, 8192),)), StepBatch((PrefillRequest(254_000, 1),))]
    budgets = [rng.choice((1, 16, 100, 512, 512, 2048)) for _ in batches]
    preset = get_model(MODEL)
    cases = [{"budget_mb": mb, "max_model_len": preset.max_model_len, "block_size": preset.kv_block, "ratio": 4,
              "rows": b.num_rows, "num_requests": len(b.requests),
              "max_seq_len": max(r.context_len + r.query_len for r in b.requests)} for b, mb in zip(batches, budgets)]
    answers = run_oracle(python, "vllm_qsa_chunks.py", {"cases": cases})["results"]
    chunked = 0
    for batch, mb, theirs in zip(batches, budgets, answers, strict=True):
        plan = make_plan(batch, "engine", mb * MIB, VLLM)
        assert vllm_qsa_table_columns(plan.settings) == theirs["table_columns"]
        assert [list(c.rows) for c in plan.chunks] == theirs["chunks"], (batch, mb)
        assert {c.logits_cols for c in plan.chunks} == {theirs["width"]}
        assert {c.logits_bytes for c in plan.chunks} == {theirs["workspace_bytes"]}
        assert all(c.kv_tokens == 0 for c in plan.chunks) and plan.logits_alive == 1
        chunked += plan.num_chunks > 1
    assert chunked >= 30


def _sglang_row_chunk_size():
    """SGLang 0.5.23's ``_qsa_prefill_row_chunk_size`` and its budget constant, from the wheel."""
    path = f"{sglang_src()}/sglang/srt/layers/attention/qsa/qsa_indexer.py"
    tree = ast.parse(open(path).read())
    keep = [n for n in tree.body
            if (isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "_QSA_PREFILL_LOGITS_BUDGET_BYTES"
                                                  for t in n.targets))
            or (isinstance(n, ast.FunctionDef) and n.name == "_qsa_prefill_row_chunk_size")]
    assert len(keep) == 2, "qsa_indexer.py no longer has the row-chunk function and its budget"
    space = {"torch": torch}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), space)
    return space["_qsa_prefill_row_chunk_size"], space["_QSA_PREFILL_LOGITS_BUDGET_BYTES"]


def test_sglang_qsa_row_chunks_match_its_own_function():
    """Rows in chunks of ``_qsa_prefill_row_chunk_size(rows, longest // 4, 4)`` against the
    batch's longest ``seq_len // 4`` blocks (metadata.py:130-143), each ``[rows rounded up to 32,
    W]`` fp32 (mqa.py:449-466) and deleted before the next (qsa_indexer.py:535)."""
    chunk_size, budget = _sglang_row_chunk_size()
    assert budget == get_engine("sglang==0.5.23").qsa_budget_mib * MIB
    assert get_strategy("engine").budget_bytes(None, 10.0, SGLANG) == budget
    chunked = 0
    for batch in steps(random.Random(8), 200):
        plan = make_plan(batch, "engine", budget, SGLANG)
        width = max(r.context_len + r.query_len for r in batch.requests) // 4
        if width == 0:
            assert plan.num_chunks == 0
            continue
        per = chunk_size(batch.num_rows, width, 4)
        starts = list(range(0, batch.num_rows, per))
        assert [c.rows for c in plan.chunks] == [(s, min(s + per, batch.num_rows)) for s in starts]
        assert all(c.logits_cols == width and c.logits_bytes == -(-c.num_rows // 32) * 32 * width * 4
                   for c in plan.chunks)
        assert plan.logits_alive == 1
        chunked += plan.num_chunks > 1
    assert chunked >= 30


@pytest.mark.parametrize("settings", (VLLM, SGLANG), ids=("vllm", "sglang"))
def test_the_qsa_paths_plan_the_same_by_shapes(settings):
    """The frontier's shape planner gives QSA's chunk count, budget interval and peak as
    ``make_plan`` and the memory model do, at budgets around the ones the releases read."""
    rng = random.Random(9)
    for batch in steps(rng, 60):
        budget = rng.choice((2**20, 64 * MIB, 128 * MIB, 512 * MIB, 3 * 2**30))
        plan = make_plan(batch, "engine", budget, settings)
        low, high = plan.budget_stable
        assert low <= budget and (high is None or budget < high)
        for inside in {low, budget, (high - 1) if high is not None else budget * 2}:
            if inside >= 1:
                again = make_plan(batch, "engine", inside, settings)
                assert [c.rows for c in again.chunks] == [c.rows for c in plan.chunks]
                assert [c.logits_bytes for c in again.chunks] == [c.logits_bytes for c in plan.chunks]
        report = memory_report(plan, topk_rows=8192, temporaries="deepgemm")
        shaped = plan_shapes(batch, "engine", budget, settings)
        assert shaped.num_chunks == plan.num_chunks and shaped.plan.budget_stable == plan.budget_stable
        if plan.num_chunks:
            assert shapes_peak(shaped, topk_rows=8192) == (report.peak_transient, report.peak)


def test_vllm_qsa_workspace_is_the_block_tables_row_where_the_budget_is_smaller():
    """Below one row of the block table (a budget in bytes the environment variable cannot give at
    262K), ``max(max_logits_bytes, page_table.shape[1] * k_cache.shape[1] * 4)`` is the row, and a
    slice is one query row (qsa_indexer.py:620-624)."""
    table = vllm_qsa_table_columns(VLLM)
    assert table == 262_144 // 4  # 4,096 blocks of 64 tokens (aligned to 128 tokens), 16 entries each
    plan = make_plan(StepBatch((PrefillRequest(262_044, 100),)), "engine", 100_000, VLLM)
    assert plan.num_chunks == 100 and {c.logits_bytes for c in plan.chunks} == {table * 4}
    assert plan.budget_stable == (0, table * 4)  # the same plan for every budget below the row


def test_vllm_reserves_no_qsa_logits_in_its_profile_run():
    """vLLM 0.33.0's profile run builds no attention metadata, so the QSA indexer computes no logits
    there and the DeepSeek indexer's 512 MiB reservation is not on its path."""
    from indexer_lib.engines import profile_run_logits_bytes

    assert profile_run_logits_bytes("vllm==0.33.0") == 512 * MIB
    assert profile_run_logits_bytes("vllm==0.33.0", model=get_model(MODEL)) == 0

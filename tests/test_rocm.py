"""ROCm (docs/design.md#rocm): aiter's logits allocation, the releases planned on a ROCm GPU, and
the one-line refusals of the rest.

Differential where the engine's code runs on a CPU: vLLM 0.33.0's ROCm indexer module imports here,
so its own ``rocm_fp8_mqa_logits`` picks the kernel per architecture; SGLang's budget and row
chunks run from its own files (``engine_oracles/sglang_chunks.py``) with ``is_hip`` true.  aiter
itself needs ROCm's Triton: its allocation is the restated rule with file and line.
"""
from __future__ import annotations

import dataclasses
import json
import random
import sys
import types

import numpy as np
import pytest

from indexer_lib.aiter_logits import AITER_LOGITS_RULES
from indexer_lib.checks import BadValue
from indexer_lib.cli.main import main
from indexer_lib.engines import EngineBudget, get_engine, gpu_refusal
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.memory.model import logits_bytes
from indexer_lib.padding import get_rules
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import GIB, MIB, get_gpu, get_model
from indexer_lib.workload import StepBatch

from test_engines import run_oracle, sglang_src

def aiter_logits_bytes(rows, cols, rule: str = "aiter-256"):
    """aiter's allocation restated: ``align(rows, row_align) x align(cols, col_align) x 4`` fp32
    (aiter aiter/ops/triton/attention/fp8_mqa_logits.py:114-128 at c16d44b93a and e4048607a5; the
    FlyDSL kernel's aiter/ops/flydsl/kernels/mqa_logits/fp8_mqa_logits.py:528-554 at e4048607a5)."""
    row_align, col_align = AITER_LOGITS_RULES[rule]
    return -(-rows // row_align) * row_align * (-(-cols // col_align) * col_align) * 4


ROCM_CAP = 2**31 - 1  # sglang 0.5.23 layers/attention/mqa_logits_utils.py:24 MQA_LOGITS_MAX_BYTES_ROCM


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def gfx942() -> object:
    """A gfx942 part (MI300X / MI325X) for the rules that go by architecture alone: the MI355X's
    preset with the other architecture (its capacity does not enter them)."""
    return dataclasses.replace(get_gpu("mi355x"), name="gfx942-part", arch="gfx942")


# ----------------------------------------------------------------------------- aiter's allocation

def test_aiter_logits_are_rows_by_columns_aligned_to_256_restated():
    """ROCm/aiter aiter/ops/triton/attention/fp8_mqa_logits.py:114-128 (c16d44b93a, e4048607a5):
    ``seq_len_kv_aligned = ceil(seq_len_kv / 256) x 256``; ``torch.empty((seq_len,
    seq_len_kv_aligned), float32)[:, :seq_len_kv]``; rows never padded.  Before c69b84ef0b (the
    same file at 4c2a3025b6, :36): ``torch.full((seq_len, seq_len_kv))``."""
    count = get_rules("aiter-256").counter(heads=64)
    assert count(3, 1000) == 3 * 1024 * 4
    assert count(1, 256) == 1024 and count(1, 257) == 512 * 4
    assert get_rules("aiter-unaligned").counter(heads=64)(3, 1000) == 3 * 1000 * 4
    rows, cols = np.array([1, 7, 4095]), np.array([1, 65_536, 131_073])
    assert list(count(rows, cols)) == [1024, 7 * 65_536 * 4, 4095 * 131_328 * 4]
    with pytest.raises(BadValue, match="unknown DeepGEMM version 'aiter-512': .*an aiter rule: aiter-256, "):
        get_rules("aiter-512")


def test_aiters_flydsl_logits_pad_the_rows_to_even_restated():
    """ROCm/aiter aiter/ops/flydsl/kernels/mqa_logits/fp8_mqa_logits.py at e4048607a5 (the same
    lines since 0571aeac7b): ``_auto_variant`` is ``mfma_r2_*`` (:390-395), so ``seq_len_padded =
    align(seq_len, 2)`` (:528-530); ``torch.full((seq_len_padded, align(seq_len_kv, 256)), -inf,
    float32)[:, :seq_len_kv]`` (:540-554), returned as ``logits[:seq_len, :]`` (:578)."""
    count = get_rules("aiter-flydsl").counter(heads=32)
    assert count(1, 1) == 2 * 256 * 4
    assert count(2, 256) == 2 * 256 * 4 and count(3, 257) == 4 * 512 * 4
    assert count(1023, 131_071) == 1024 * 131_072 * 4 == count(1024, 131_072)
    rows, cols = np.array([1, 7, 4096]), np.array([1, 65_536, 131_073])
    assert list(count(rows, cols)) == [2 * 256 * 4, 8 * 65_536 * 4, 4096 * 131_328 * 4]
    assert count.tallest(1000, 5 * 1024 * 4, False, 100) == 4  # five rows would allocate six


def test_aiters_flydsl_kernel_copies_an_odd_chunks_inputs_through_its_call():
    """The same file, :531-536: for an odd seq_len, ``torch.cat`` makes Q ``[M + 1, H, D]`` fp8 (vLLM's
    float8_e4m3fnuz on gfx942), the weights ``[M + 1, H]`` fp32 and cu_starts, cu_ends ``[M + 1]``
    int32 before the logits are allocated; the locals live until the call returns.  Counted with the
    H200 path's temporaries during the logits call, nothing for an even chunk or another rule."""
    from indexer_lib.memory.chunk_bytes import ChunkBytes, deepgemm_phases, kernel_inputs_of

    flydsl, heads, dim = get_rules("aiter-flydsl"), 32, 128
    per_row = heads * dim + 4 * heads + 2 * 4
    assert kernel_inputs_of(1023, None, heads, dim, flydsl) == 1024 * per_row == 4_333_568
    assert kernel_inputs_of(1024, None, heads, dim, flydsl) == 0
    assert kernel_inputs_of(1023, None, heads, dim, get_rules("aiter-256")) == 0
    assert list(kernel_inputs_of(np.array([1, 2, 7]), None, heads, dim, flydsl)) == [2 * per_row, 0, 8 * per_row]
    assert deepgemm_phases(1023, 5000, None, heads, dim, lambda r, c: 7, flydsl) == (1024 * per_row, 7)
    batch = StepBatch.from_lengths([16_383], [131_071])
    plans = {gpu: make_plan(batch, "engine", 512 * MIB, PlanSettings("glm-5", "vllm", gpu=gpu, temporaries="deepgemm"))
             for gpu in ("mi300x", "mi355x")}
    last = {gpu: plan.chunks[-1] for gpu, plan in plans.items()}
    assert last["mi300x"].num_rows == 1023 and last["mi300x"].rows == last["mi355x"].rows
    assert logits_bytes(last["mi300x"], plans["mi300x"]) == 1024 * 131_072 * 4
    assert logits_bytes(last["mi355x"], plans["mi355x"]) == 1023 * 131_072 * 4
    from indexer_lib.memory.model import temporaries_of
    during = {gpu: temporaries_of(plan, "deepgemm", 2048).phases(plan.chunks[-1])[0] for gpu, plan in plans.items()}
    assert during == {"mi300x": 1024 * per_row, "mi355x": 0}
    # the frontier's count from shapes alone: with the previous chunk's logits held through the call,
    # the gfx942 chunk adds a row of logits and the copies to the gfx950 one
    fast = {gpu: ChunkBytes(plan.settings, deepgemm=True, topk=2048).total(1023, 131_071, False, False, 131_071,
                                                                           held=GIB)
            for gpu, plan in plans.items()}
    assert fast["mi300x"] - fast["mi355x"] == 131_072 * 4 + 1024 * per_row
    # the release's own path (temporaries 'replay'): the copies next to the previous chunk's logits
    replayed = {gpu: memory_report(plan, temporaries="replay").chunks[-1] for gpu, plan in plans.items()}
    assert (replayed["mi300x"].held_with, replayed["mi355x"].held_with) == (1024 * per_row, 0)
    assert replayed["mi300x"].total - replayed["mi355x"].total == 131_072 * 4 + 1024 * per_row


def test_the_planners_count_aiter_logits_by_the_one_rule():
    rng = random.Random(950)
    for name in AITER_LOGITS_RULES:
        count = get_rules(name).counter(heads=64)
        for _ in range(300):
            rows, cols = rng.randint(1, 20_000), rng.randint(1, 1_100_000)
            assert count(rows, cols) == aiter_logits_bytes(rows, cols, name)
            budget = rng.randint(1, 4 * GIB)
            widest = count.widest(rows, budget)  # the widest row the budget holds
            assert widest < 0 or count(rows, widest) <= budget < count(rows, widest + AITER_LOGITS_RULES[name][1])
            tallest = count.tallest(cols, budget, False, 10**9)  # the most rows of this width the budget holds
            assert count(tallest, cols) <= budget < count(tallest + 1, cols)


# ----------------------------------------------------------------------------- vLLM 0.33.0's own dispatch

def _vllm_rocm_module():
    try:
        from vllm.v1.attention.ops import rocm_aiter_mla_sparse
    except Exception as e:  # noqa: BLE001 - any import failure: the module is not on this CPU
        pytest.skip(f"vLLM's ROCm indexer module does not import here: {e}")
    return rocm_aiter_mla_sparse


def _fp8_inputs(rows: int, cols: int, heads: int = 4, dim: int = 32):
    import torch

    gen = torch.Generator().manual_seed(rows * 1000 + cols)
    q = torch.randn(rows, heads, dim, generator=gen).to(torch.float8_e4m3fn)
    k = torch.randn(cols, dim, generator=gen).to(torch.float8_e4m3fn)
    scale = torch.rand(cols, 1, generator=gen)
    weights = torch.rand(rows, heads, generator=gen)
    ks = torch.zeros(rows, dtype=torch.int32)
    ke = torch.full((rows,), cols, dtype=torch.int32)
    return q, (k, scale), weights, ks, ke


def test_vllm_033_scores_with_aiters_fp8_mqa_logits_on_gfx950_and_flydsl_on_gfx942(monkeypatch):
    """vLLM 0.33.0's own ``rocm_fp8_mqa_logits`` (v1/attention/ops/rocm_aiter_mla_sparse.py:941-987)
    with aiter stubbed by the allocation aiter makes: on gfx950 with VLLM_ROCM_USE_AITER it hands
    the chunk to aiter's ``fp8_mqa_logits`` with ``clean_logits=False`` and returns aiter's tensor
    ([M, align(N, 256)] fp32, the planned bytes); on gfx942 it calls ``flydsl_fp8_mqa_logits``
    instead ([align(M, 2), align(N, 256)] fp32, the ``aiter-flydsl`` rule); without the variable it
    scores with its torch fallback (not planned)."""
    import torch

    module = _vllm_rocm_module()
    import vllm._aiter_ops as aiter_ops
    from vllm._aiter_ops import rocm_aiter_ops

    monkeypatch.setattr(aiter_ops, "is_aiter_found_and_supported", lambda: True)  # a ROCm gfx9 host with aiter
    calls = []

    def aiter_fp8_mqa_logits(q, k, scale, weights, ks, ke, clean_logits=True):
        calls.append(("aiter", clean_logits))
        cols = k.shape[0]
        return torch.empty((q.shape[0], -(-cols // 256) * 256), dtype=torch.float32)[:, :cols]

    def flydsl_fp8_mqa_logits(q, k, scale, weights, ks, ke, clean_logits=True):
        calls.append(("flydsl", clean_logits))
        rows, cols = q.shape[0], k.shape[0]
        return torch.empty((-(-rows // 2) * 2, -(-cols // 256) * 256), dtype=torch.float32)[:rows, :cols]

    monkeypatch.setattr(module, "mqa_logits_module", lambda: types.SimpleNamespace(fp8_mqa_logits=aiter_fp8_mqa_logits))
    for name in ("aiter", "aiter.ops"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "aiter.ops.flydsl", types.SimpleNamespace(flydsl_fp8_mqa_logits=flydsl_fp8_mqa_logits))
    monkeypatch.setattr(rocm_aiter_ops, "_AITER_ENABLED", True)
    monkeypatch.setattr(module, "_ON_GFX950", True)
    monkeypatch.setattr(module, "_ON_GFX942", False)
    for rows, cols in ((5, 300), (64, 1024), (7, 1)):
        logits = module.rocm_fp8_mqa_logits(*_fp8_inputs(rows, cols))
        assert calls[-1] == ("aiter", False) and logits.shape == (rows, cols)
        assert logits.untyped_storage().nbytes() == aiter_logits_bytes(rows, cols)
    assert get_engine("vllm==0.33.0").rocm_logits_on("gfx950") == "aiter-256"
    assert get_engine("vllm==0.33.0").rocm_arches == ("gfx942", "gfx950")

    monkeypatch.setattr(module, "_ON_GFX950", False)
    monkeypatch.setattr(module, "_ON_GFX942", True)
    for rows, cols in ((5, 300), (64, 1024), (7, 1)):
        logits = module.rocm_fp8_mqa_logits(*_fp8_inputs(rows, cols))
        assert calls[-1] == ("flydsl", True) and logits.shape == (rows, cols)  # clean_logits left at its default
        assert logits.untyped_storage().nbytes() == aiter_logits_bytes(rows, cols, "aiter-flydsl")
    assert get_engine("vllm==0.33.0").rocm_logits_on("gfx942") == "aiter-flydsl"
    assert gpu_refusal("vllm==0.33.0", gfx942()) is None

    monkeypatch.setattr(rocm_aiter_ops, "_AITER_ENABLED", False)
    monkeypatch.setattr(module, "_ON_GFX942", False)
    before = len(calls)
    assert module.rocm_fp8_mqa_logits(*_fp8_inputs(5, 300)).shape == (5, 300)  # fp8_mqa_logits_torch
    assert len(calls) == before
    assert "VLLM_ROCM_USE_AITER" in get_engine("vllm==0.33.0").rocm_path


def test_vllm_033_on_mi355x_chunks_as_on_cuda_with_aiters_full_width_logits():
    """The same metadata builder splits the step (v1/attention/backends/mla/indexer.py:293-294):
    the chunks' rows and requests are the H200's; each chunk's logits are [rows, align(N, 256)]
    fp32 over its whole K (rocm_aiter_mla_sparse.py:1281-1300), not DeepGEMM 2.8's max_seqlen_k."""
    rng = random.Random(355)
    for _ in range(25):
        n = rng.randint(1, 6)
        seqs = [rng.randint(1, 200_000) for _ in range(n)]
        queries = [rng.randint(1, s) for s in seqs]
        batch = StepBatch.from_lengths(queries, seqs)
        budget = rng.choice((64, 512, 2048)) * MIB
        rocm = make_plan(batch, "engine", budget, PlanSettings("glm-5", "vllm", gpu="mi355x", temporaries="deepgemm"))
        cuda = make_plan(batch, "engine", budget, PlanSettings("glm-5", "vllm", gpu="h200", temporaries="deepgemm"))
        assert [(c.requests, c.rows) for c in rocm.chunks] == [(c.requests, c.rows) for c in cuda.chunks]
        for c in rocm.chunks:
            assert c.logits_cols == c.kv_tokens and not c.compressed
            assert logits_bytes(c, rocm) == aiter_logits_bytes(c.num_rows, c.kv_tokens)


# ----------------------------------------------------------------------------- DeepSeek-V4 on vLLM 0.33.0

def test_vllm_033_plans_deepseek_v4_on_gfx942_with_the_flydsl_rule_byte_exact(capsys):
    """On gfx942 vLLM 0.33.0 keeps DeepSeek-V4's FP8 indexer cache (platforms/rocm.py:387-418 turns
    MXFP4 on for CDNA4 only) and scores the C4 layers with rocm_aiter_sparse_attn_indexer: the
    builder's chunker on seq_len // 4 entries, each chunk's K gathered and scored whole by the
    FlyDSL kernel.  8,191 query rows against 1,048,575 tokens (262,143 entries): 512 rows a chunk
    under 512 MiB (134,217,728 // 262,143), the last of 511 rows padded to 512, every chunk
    [512, align(262,143, 256)] fp32; the decode logits the profile run asks for are max_model_len // 4
    columns wide (the indexer's max_model_len, deepseek_v4/attention.py:1010-1012)."""
    code, out, err = run(capsys, "plan", "--gpu", "mi300x", "--engine", "vllm==0.33.0", "--model",
                         "deepseek-v4-flash", "--query-lens", "8191", "--seq-lens", "1048575", "--json")
    assert code == 0, err
    chunks = json.loads(out)["chunks"]
    assert len(chunks) == 16 and [c["rows"] for c in chunks[-2:]] == [[7168, 7680], [7680, 8191]]
    assert {c["logits_bytes"] for c in chunks} == {512 * 262_144 * 4} == {aiter_logits_bytes(511, 262_143, "aiter-flydsl")}
    settings = PlanSettings("deepseek-v4-flash", "vllm==0.33.0", gpu="mi325x", temporaries="deepgemm")
    assert settings.deepgemm == "aiter-flydsl" and settings.workspace == 1_048_576 * 16 // 4
    code, out, err = run(capsys, "plan", "--gpu", "mi300x", "--engine", "vllm==0.33.0", "--model",
                         "deepseek-v4-flash", "--query-lens", "8192", "--seq-lens", "1048576")
    assert code == 0, err
    assert "1,024 rows x 262,144 columns fp32" in out and "aiter-flydsl" in out.splitlines()[0]


def test_vllm_033_deepseek_v4_chunks_on_gfx942_match_its_own_builder():
    """vLLM 0.33.0's own ``DeepseekV32IndexerMetadataBuilder._split_indexer_prefill_chunks``
    (v1/attention/backends/mla/indexer.py:1359-1411), fed the compressed lengths and the K workspace
    in entries as ``build`` feeds it (:1490-1545), cuts the step as the gfx942 plan does; the
    logits cover each chunk's whole K (rocm_aiter_mla_sparse.py:1276-1300), aligned by the FlyDSL rule."""
    torch = pytest.importorskip("torch")
    try:
        from vllm.v1.attention.backends.mla.indexer import DeepseekV32IndexerMetadataBuilder
    except Exception as e:  # noqa: BLE001 - any import failure: vLLM is not importable here
        pytest.skip(f"vLLM's indexer builder does not import here: {e}")
    split = DeepseekV32IndexerMetadataBuilder._split_indexer_prefill_chunks
    settings = PlanSettings("deepseek-v4-flash", "vllm==0.33.0", gpu="mi300x", temporaries="deepgemm")
    rng = random.Random(942)
    for _ in range(20):
        n = rng.randint(1, 5)
        seqs = [rng.randint(4_096, 400_000) for _ in range(n)]
        queries = [rng.randint(1, min(s, 9_000)) for s in seqs]
        budget = rng.choice((64, 512)) * MIB
        entries = torch.tensor([s // 4 for s in seqs])
        theirs = split(entries, torch.tensor(queries), settings.workspace, budget)
        plan = make_plan(StepBatch.from_lengths(queries, seqs), "engine", budget, settings)
        # rows within the chunk's requests, as vLLM's query slice
        assert [(c.requests, c.rows) for c in plan.chunks] == [((r.start, r.stop), (q.start, q.stop)) for r, q in theirs]
        for c in plan.chunks:
            assert c.logits_cols == c.kv_tokens == sum(s // 4 for s in seqs[c.requests[0]:c.requests[1]])
            assert logits_bytes(c, plan) == aiter_logits_bytes(c.num_rows, c.kv_tokens, "aiter-flydsl")


def test_vllm_033_refuses_deepseek_v4_on_gfx950_naming_its_mxfp4_path(capsys):
    """On CDNA4 with aiter vLLM 0.33.0 defaults DeepSeek-V4 to the paged MXFP4 indexer: another
    chunker (rows x the widest context, no K workspace) and [rows, widest // 4] fp32 logits, not
    modelled; the refusal says so in one line with the files and lines."""
    code, out, err = run(capsys, "plan", "--model", "deepseek-v4-flash", "--engine", "vllm==0.33.0", "--gpu",
                         "mi355x", "--query-lens", "8192", "--seq-lens", "1048576")
    assert code == 2 and out == "" and err.count("\n") == 1
    for words in ("platforms/rocm.py:387-418", "paged_mxfp4_mqa_logits", "rocm_paged_mxfp4_indexer.py:206-239",
                  "no K workspace limit", "deepseek-v4-flash on vllm==0.33.0 on gfx942"):
        assert words in err
    assert "MXFP4" in get_engine("vllm==0.33.0").rocm_compressed_not_modelled
    assert get_engine("vllm==0.33.0").rocm_compressed_arches == ("gfx942",)
    assert get_engine("vllm==0.30.0").rocm_compressed_arches is None


# ----------------------------------------------------------------------------- SGLang's own budget on ROCm

@pytest.mark.parametrize("release", ["0.5.23", "0.5.17"])
def test_sglang_rocm_budget_and_row_chunks_match_its_own_code(release):
    """SGLang's own budget and Indexer code with ``is_hip`` true: in 0.5.23 every budget it reads
    capped at 2^31-1 bytes (mqa_logits_utils.py:24, :66-67, :88-89), in 0.5.17 the CUDA budget
    uncapped (dsa/dsa_indexer.py:900-951), its rows sliced by that; ours with the release's
    ``rocm_budget_cap_bytes`` on the MI355X."""
    src = sglang_src(release, needs="sglang/srt/layers/attention/dsa/dsa_indexer.py")
    engine = get_engine(f"sglang=={release}")
    capped_release = release == "0.5.23"
    assert engine.rocm_budget_cap_bytes == (ROCM_CAP if capped_release else None)
    rng = random.Random(2031)
    total = get_gpu("mi355x").capacity_bytes
    scenarios = []
    for _ in range(40):
        calls = []
        for _ in range(rng.randint(1, 6)):
            rows = rng.choice((rng.randint(1, 600), rng.randint(2048, 16384)))
            calls.append({"rows": rows, "cols": rows + rng.randint(8_000, 400_000),
                          "free_bytes": rng.randint(4, 260) * GIB})
        scenarios.append({"total_bytes": total, "mem_fraction_static": rng.choice((None, 0.8, 0.9)),
                          "fraction": rng.choice((0.2, 0.5)), "rocm": True, "calls": calls})
    answers = run_oracle(sys.executable, "sglang_chunks.py", {"scenarios": scenarios}, src)["results"]
    capped = 0
    for scenario, theirs in zip(scenarios, answers, strict=True):
        budget = EngineBudget(engine, value=scenario["fraction"], total_bytes=total,
                              mem_fraction_static=scenario["mem_fraction_static"], rocm=True)
        for call, result in zip(scenario["calls"], theirs, strict=True):
            ours = budget.for_call(call["rows"], call["cols"], call["free_bytes"])
            assert (ours or 0) == result["budget"], (scenario, call)
            plan = make_plan(StepBatch.from_lengths([call["rows"]], [call["cols"]]), "engine", ours,
                             PlanSettings(engine=engine, gpu="mi355x"))
            assert [list(c.rows) for c in plan.chunks] == result["chunks"], (scenario, call)
            for c in plan.chunks:
                assert logits_bytes(c, plan) == aiter_logits_bytes(c.num_rows, call["cols"])
            capped += ours == ROCM_CAP
    assert capped >= 20 if capped_release else capped == 0


# ----------------------------------------------------------------------------- planned and refused

@pytest.mark.parametrize("engine, model, why", [
    ("vllm==0.33.0", "glm-5", None),
    ("sglang==0.5.23", "glm-5", None),
    ("sglang==0.5.20", "deepseek-v3.2", None),
    ("vllm==0.30.0", "glm-5", "its prefill chunk loop and workspace on ROCm were not read"),
    ("sglang==0.5.19", "glm-5", None),
    ("sglang==0.5.17", "glm-5", None),
    ("sglang==0.5.13", "deepseek-v3.2", None),
    ("sglang==0.5.12", "glm-5", "its ROCm indexer path was not read at this release"),
    ("vllm==0.33.0", "deepseek-v4-flash", "switches DeepSeek-V4's indexer cache to MXFP4 by default"),
    ("vllm==0.33.0", "deepseek-v4-pro", "rocm_paged_mxfp4_indexer.py:206-239"),
    ("sglang==0.5.22", "deepseek-v4-flash", "its C4 indexer path on ROCm (deepseek-v4-flash) was not read"),
    ("sglang==0.5.19", "deepseek-v4-pro", "the opt-in FP4 indexer, --enable-deepseek-v4-fp4-indexer"),
])
def test_which_releases_and_models_plan_on_the_mi355x(engine, model, why):
    refusal = gpu_refusal(engine, "mi355x", get_model(model))
    if why is None:
        assert refusal is None
        assert PlanSettings(model, engine, gpu="mi355x").deepgemm == "aiter-256"
    else:
        assert why in refusal and "\n" not in refusal and "mi355x (gfx950, ROCm)" in refusal
        with pytest.raises(BadValue, match="not planned"):
            PlanSettings(model, engine, gpu="mi355x")


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_sglang_0523_plans_deepseek_v4s_c4_path_on_gfx950_alone(model):
    """SGLang 0.5.23's C4 indexer on ROCm (the FP8 indexer by default, plan.paths.SglangC4Hip):
    planned on gfx950 with the allocation rule of its own ``torch.empty`` ([rows, cols] fp32,
    dsv4/indexer.py:148-185); on gfx942, not read, refused in one line naming the path's file."""
    assert gpu_refusal("sglang==0.5.23", "mi355x", get_model(model)) is None
    settings = PlanSettings(model, "sglang==0.5.23", gpu="mi355x", temporaries="deepgemm")
    assert settings.deepgemm == "aiter-unaligned"
    assert PlanSettings("glm-5", "sglang==0.5.23", gpu="mi355x").deepgemm == "aiter-256"  # its DSA path unchanged
    why = gpu_refusal("sglang==0.5.23", gfx942(), get_model(model))
    assert "modelled on gfx950 alone; not read for gfx942" in why and "dsv4/indexer.py:148-185" in why
    assert "\n" not in why
    for pooled in ("glm-5.3-flash", "deepseek-v4.1-flash"):  # other compressed indexers stay refused
        assert "only its DSA indexer" in gpu_refusal("sglang==0.5.23", "mi355x", get_model(pooled))


def test_gfx942_by_architecture_alone():
    """vLLM 0.33.0 runs aiter's FlyDSL kernel on gfx942 (planned with its rule), SGLang 0.5.13-0.5.23
    the same aiter Triton kernel on both architectures; vLLM 0.32.0 as 0.33.0, and before it refused."""
    part = gfx942()
    assert gpu_refusal("vllm", part) is None and gpu_refusal("vllm==0.33.0", part) is None
    assert PlanSettings("glm-5", "vllm==0.33.0", gpu="mi300x").deepgemm == "aiter-flydsl"
    assert PlanSettings("deepseek-v3.2", "vllm==0.33.0", gpu="mi325x").deepgemm == "aiter-flydsl"
    assert PlanSettings("glm-5", "sglang", gpu="mi300x").deepgemm == "aiter-256"
    assert gpu_refusal("sglang", part) is None and gpu_refusal("sglang==0.5.20", part) is None
    assert gpu_refusal("sglang==0.5.13", part) is None and gpu_refusal("sglang==0.5.18", part) is None
    why = gpu_refusal("vllm==0.30.0", part)
    assert "gfx942-part (gfx942, ROCm)" in why and "rocm_aiter_mla_sparse.py:999" in why and "\n" not in why
    assert "modelled on ROCm: atom==0.1.3-0.1.10 on gfx942, gfx950; sglang==0.5.13-0.5.23 on gfx942, gfx950; vllm==0.32.0-0.33.0 on gfx942, gfx950" in \
        gpu_refusal("vllm==0.19.0", part)
    assert gpu_refusal("vllm==0.33.0", part, get_model("deepseek-v4-flash")) is None  # its FP8 C4 path
    assert "only its DSA indexer" in gpu_refusal("vllm==0.33.0", part, get_model("glm-5.3-flash"))
    assert "has no DeepGEMM" in gpu_refusal(None, part)


@pytest.mark.parametrize("gpu", ["mi300x", "mi325x"])
def test_vllm_033_plans_on_gfx942_with_aiters_flydsl_rule(capsys, gpu):
    """``plan --engine vllm==0.33.0 --gpu mi300x`` (or mi325x) plans GLM-5 and names the FlyDSL rule;
    an odd last chunk's logits are counted at the even row count."""
    code, out, err = run(capsys, "plan", "--gpu", gpu, "--engine", "vllm==0.33.0", "--model", "glm-5",
                         "--query-lens", "16383", "--seq-lens", "131071", "--free-gib", "60")
    assert code == 0, err
    assert "aiter-flydsl" in out.splitlines()[0] and f"GPU {gpu} (gfx942)" in out
    code, out, err = run(capsys, "plan", "--gpu", gpu, "--engine", "vllm==0.33.0", "--model", "glm-5",
                         "--query-lens", "16383", "--seq-lens", "131071", "--free-gib", "60", "--json")
    assert code == 0, err
    last = json.loads(out)["chunks"][-1]
    assert last["rows"][1] - last["rows"][0] == 1023 and last["logits_bytes"] == 1024 * 131_072 * 4


@pytest.mark.parametrize("engine, gpu", [("vllm", "mi355x"), ("sglang", "mi355x"), ("vllm", "mi300x")])
def test_plan_frontier_and_auto_run_on_rocm(capsys, tmp_path, engine, gpu):
    code, out, err = run(capsys, "plan", "--gpu", gpu, "--engine", engine, "--model", "glm-5",
                         "--query-lens", "16384", "--seq-lens", "131072", "--free-gib", "60", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["gpu"] == gpu
    csv = tmp_path / "f.csv"
    code, out, err = run(capsys, "frontier", "--model", "glm-5", "--engine", engine, "--gpu", gpu,
                         "--concurrency", "1", "--isl", "8192", "--strategy", "engine", "--free-gib", "60",
                         "--out", str(csv))
    assert code == 0, err
    assert csv.exists()
    code, out, err = run(capsys, "auto", "--engine", engine, "--gpu", gpu, "--free-gib", "60",
                         "--workload", "1x8192x64", "--json")
    assert code == 0, err
    assert json.loads(out)["gpu"] == gpu


def test_a_refused_rocm_release_is_one_line_naming_its_reason(capsys):
    code, out, err = run(capsys, "plan", "--gpu", "mi355x", "--engine", "vllm==0.30.0", "--model", "glm-5",
                         "--query-lens", "4096", "--seq-lens", "65536", "--free-gib", "20")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "rocm_aiter_mla_sparse.py:999" in err and ":810-829" in err


def test_vllm_on_rocm_names_the_aiter_setting_it_is_planned_with(capsys):
    """vLLM 0.33.0 scores with aiter only under VLLM_ROCM_USE_AITER=1 (envs.py:1267-1269, off by
    default): its ROCm plan is made as served so, and the tables and `plan` name that setting."""
    from indexer_lib.cli.main import main
    from indexer_lib.engines import not_default
    from indexer_lib.engines.scheduler import release_scheduler

    config = release_scheduler("vllm==0.33.0", 64, "mi355x")
    assert any(s.startswith("VLLM_ROCM_USE_AITER=1 (default 0)") for s in not_default("vllm==0.33.0", config, "mi355x"))
    assert not any("VLLM_ROCM_USE_AITER" in s for s in not_default("vllm==0.33.0", release_scheduler("vllm==0.33.0", 64, "h200"), "h200"))
    sglang = release_scheduler("sglang", 64, "mi355x")
    assert not any("VLLM_ROCM_USE_AITER" in s for s in not_default("sglang", sglang, "mi355x"))
    assert main(["plan", "--gpu", "mi355x", "--query-lens", "8192", "--seq-lens", "8192", "--free-gib", "10"]) == 0
    assert "served with VLLM_ROCM_USE_AITER=1 (default 0)" in capsys.readouterr().out


def test_a_what_if_logits_rule_runs_on_its_vendors_gpus_only(capsys):
    """DeepGEMM's builds are CUDA's and aiter's rules ROCm's: a project strategy may try another
    rule of the GPU's own vendor, and the other vendor's is refused in one line naming both."""
    aiter = PlanSettings("glm-5", "vllm", gpu="mi355x", deepgemm_version="aiter-unaligned")
    assert aiter.rules is get_rules("aiter-unaligned")
    with pytest.raises(BadValue, match=r"deepgemm_version 2\.1: DeepGEMM is CUDA-only.*aiter-256, aiter-unaligned"):
        PlanSettings("glm-5", "vllm", gpu="mi355x", deepgemm_version="2.1")
    with pytest.raises(BadValue, match=r"deepgemm_version aiter-256: an aiter logits rule, ROCm only; h200"):
        PlanSettings("glm-5", "vllm", gpu="h200", deepgemm_version="aiter-256")
    code, out, err = run(capsys, "plan", "--gpu", "mi355x", "--strategy", "vllm", "--budget-mb", "512",
                         "--deepgemm-version", "2.1", "--model", "glm-5", "--query-lens", "8192", "--seq-lens", "65536")
    assert code == 2 and out == "" and err.count("\n") == 1 and "DeepGEMM is CUDA-only" in err


@pytest.mark.parametrize("release, chunks", [("0.5.17", 1), ("0.5.19", 2)])
def test_sglang_before_020_plans_on_rocm_capped_from_019(capsys, release, chunks):
    """SGLang 0.5.13-0.5.18 read the CUDA budget on ROCm (no cap), 0.5.19 caps it at 2^31-1 bytes
    (dsa/dsa_indexer.py:210, :1021-1024): 8192 x 65536 fp32 logits (2 GiB) under a 4 GiB budget are one
    aiter call in 0.5.17 and two in 0.5.19."""
    assert get_engine(f"sglang=={release}").rocm_budget_cap_bytes == (ROCM_CAP if release == "0.5.19" else None)
    code, out, err = run(capsys, "plan", "--model", "glm-5", "--engine", f"sglang=={release}", "--gpu", "mi355x",
                         "--budget-free-gib", "20", "--query-lens", "8192", "--seq-lens", "65536", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert len(plan["chunks"]) == chunks
    assert plan["chunks"][0]["logits_bytes"] == (8192 if chunks == 1 else 8191) * 65536 * 4

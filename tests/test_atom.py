"""ATOM (ROCm/ATOM) as an engine: its profiles, its ROCm-only refusal and its indexer's row chunks.

The row rule is checked against ATOM's own statements (``engine_oracles/atom_chunks.py``, lifted
from a checkout of ROCm/ATOM main ffdf3bb5 named by ``INDEXER_LAB_ATOM_SRC`` or kept at
``.venv-engines/atom-ffdf3bb5/src``) and, where that checkout is absent, against the rule restated
with its file and line.  ATOM itself imports aiter and ROCm kernels, so it never imports on a CPU.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from indexer_lib.engines import engine_names, get_engine, gpu_refusal
from indexer_lib.plan import PlanSettings
from indexer_lib.plan.make import split_step
from indexer_lib.plan.paths import AtomRows, atom_rows_per_chunk, release_path
from indexer_lib.presets import MIB
from indexer_lib.workload import PrefillRequest, StepBatch

REPO = Path(__file__).resolve().parent.parent
ORACLE = Path(__file__).resolve().parent / "engine_oracles" / "atom_chunks.py"
ATOM_COMMIT = "ffdf3bb5"  # ROCm/ATOM main, 2026-08-22: the newest stored commit


def atom_src() -> str:
    """A checkout of ROCm/ATOM at ``ATOM_COMMIT`` (its ``atom/`` package), or skip."""
    for src in (os.environ.get("INDEXER_LAB_ATOM_SRC"), REPO / ".venv-engines" / f"atom-{ATOM_COMMIT}" / "src"):
        if src and (Path(src) / "atom/models/deepseek_v2.py").exists():
            return str(src)
    pytest.skip(f"ROCm/ATOM {ATOM_COMMIT}'s source is not here (set INDEXER_LAB_ATOM_SRC to a checkout)")


def run_atom(request: dict) -> dict:
    done = subprocess.run([sys.executable, str(ORACLE), atom_src()], input=json.dumps(request),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.fixture
def planned_on_rocm():
    """ATOM's path is planned on an AMD GPU with aiter's logits (``rocm_logits``)."""
    assert gpu_refusal("atom", "mi355x") is None and gpu_refusal("atom", "mi300x") is None


def engine_rows(release: str, batch: StepBatch, budget_mb: int) -> list[tuple[int, int]]:
    settings = PlanSettings("glm-5", release, gpu="mi355x")
    plan = split_step(batch, "engine", budget_mb * MIB, settings)
    return [(c.token_start, c.token_end) for c in plan.chunks]


# ------------------------------------------------------------------------------------ profiles

def test_atom_releases_and_the_bare_name_its_latest():
    assert engine_names("atom") == [f"atom==0.1.{n}" for n in (3, 4, 5, 6, 7, 8, 9, 10)]
    assert get_engine("atom").name == "atom==0.1.10" == get_engine("ATOM==v0.1.10").name
    assert get_engine().name.startswith("vllm==")  # the default engine stays vLLM


def test_the_two_eras_as_read_at_their_source():
    # tags v0.1.3-v0.1.5: deepseek_v2.py:1182 (v0.1.5) one fp8_mqa_logits call, no budget in envs.py
    for release in ("0.1.3", "0.1.4", "0.1.5"):
        p = get_engine(f"atom=={release}")
        assert (p.chunker, p.budget_rule, p.budget_env, p.logits_alive) == ("none", "none", None, 1)
        assert "v0.1.5" in p.sources["chunker"] and "deepseek_v2.py:1182" in p.sources["chunker"]
    # main ffdf3bb5 envs.py:123-125, default 2048 MiB; deepseek_v2.py:1699-1720 the row rule
    for release in ("0.1.6", "0.1.10"):
        p = get_engine(f"atom=={release}")
        assert (p.chunker, p.budget_rule, p.budget_env, p.budget_default) == (
            "rows-128", "fixed-mib", "ATOM_SPARSE_INDEXER_LOGITS_BUDGET_MB", 2048)
        assert "inferred" in p.era and "ffdf3bb5" in p.era
        assert "deepseek_v2.py:1699-1720" in p.sources["chunker"] and "envs.py:124" in p.sources["budget_default"]
    for name in engine_names("atom"):
        p = get_engine(name)
        assert p.rocm_only and p.skip_logits_at_or_below_topk and p.workspace_factor is None
        assert (p.scheduler_max_num_batched_tokens, p.scheduler_max_num_seqs, p.rocm_logits) == (16384, 512, "aiter-256")
        assert all("ROCm/" in s for k, s in p.sources.items() if k != "file"), name


def test_atom_is_refused_on_nvidia_as_rocm_only_and_on_amd_as_any_release_is():
    for gpu in ("h200", "b200", "gb10"):
        why = gpu_refusal("atom==0.1.10", gpu)
        assert why.startswith("atom==0.1.10 runs only on ROCm") and "README.md:61-63" in why
        assert "name one with --gpu (mi300x, mi325x, mi355x)" in why
    assert gpu_refusal("atom", "mi355x") is None  # planned with aiter's logits
    assert gpu_refusal("vllm", "h200") is None
    with pytest.raises(ValueError, match="runs only on ROCm"):
        PlanSettings("glm-5", "atom")


# ------------------------------------------------------------------------------ the row rule

def test_rows_per_call_restated():
    """ROCm/ATOM main ffdf3bb5 atom/models/deepseek_v2.py:1699-1719: budget_rows = budget //
    (total_kv x 4); a multiple of 128 at or above 128, the largest power of two at most
    max(1, budget_rows) below; every row where budget_rows >= rows."""
    budget = 2048 * MIB
    assert atom_rows_per_chunk(budget, 100_000, 16_384) == 5_248  # 5,368 rows -> 41 x 128
    assert atom_rows_per_chunk(budget, 4_000_000, 300) == 128  # 134 rows -> 128
    assert atom_rows_per_chunk(budget, 5_000_000, 300) == 64  # 107 rows -> 64
    assert atom_rows_per_chunk(budget, 2**31, 300) == 1  # no row fits: one at a time
    assert atom_rows_per_chunk(budget, 32_768, 16_384) == 16_384  # 16,384 rows fit: one call
    assert atom_rows_per_chunk(budget, 32_769, 16_384) == 16_256  # one row short: 127 x 128


def test_atom_paths_by_era():
    assert (AtomRows(True).name, AtomRows(True).budget_read) == ("atom-rows", "given")
    assert (AtomRows(False).name, AtomRows(False).budget_read) == ("atom-one-call", "none")
    assert release_path(PlanSettings("glm-5", "vllm")).name == "vllm"  # the other engines keep theirs


def test_the_engine_strategy_walks_atoms_rows(planned_on_rocm):
    batch = StepBatch((PrefillRequest(90_000, 6_000), PrefillRequest(0, 4_000)))  # 100,000 K, 10,000 rows
    assert release_path(PlanSettings("glm-5", "atom", gpu="mi355x")).name == "atom-rows"
    assert engine_rows("atom==0.1.10", batch, 2048) == [(0, 5_248), (5_248, 10_000)]
    assert engine_rows("atom==0.1.10", batch, 4096) == [(0, 10_000)]  # 10,737 rows fit
    one_call = PlanSettings("glm-5", "atom==0.1.5", gpu="mi355x")
    assert release_path(one_call).name == "atom-one-call"
    assert [(c.token_start, c.token_end) for c in split_step(batch, "engine", None, one_call).chunks] == [(0, 10_000)]
    short = StepBatch((PrefillRequest(0, 2_048),))  # deepseek_v2.py:1638: longest seq_len <= top-k
    assert engine_rows("atom==0.1.10", short, 2048) == []


def test_atoms_path_evaluated_for_arrays_of_steps_is_each_steps_plan(planned_on_rocm):
    """Steps of two requests evaluated together (``fast.step_table``) give each step's own plan."""
    from indexer_lib.fast.step_table import step_table
    from test_step_table import assert_each_step, step_by_step

    rng = random.Random(5)
    pairs = [tuple(PrefillRequest(*step[k % len(step)]) for k in range(2)) for step in random_steps(rng, 40)]
    first, second = [a for a, _ in pairs], [b for _, b in pairs]
    for release, budget in (("atom==0.1.5", None), ("atom==0.1.10", 64 * MIB), ("atom==0.1.10", 2048 * MIB)):
        settings = PlanSettings("glm-5", release, gpu="mi355x", temporaries="deepgemm")
        evaluator = step_table("engine", settings, None)
        got = evaluator.at_budget([a.query_len for a in first], [a.context_len for a in first], budget,
                                  second=([b.query_len for b in second], [b.context_len for b in second]))
        assert_each_step(got, step_by_step("engine", settings, None, [StepBatch(p) for p in pairs], budget), pairs)


def test_the_budgets_that_cut_a_step_alike(planned_on_rocm):
    """Every budget in the plan's stable interval gives the same chunks, and its ends do not."""
    settings = PlanSettings("glm-5", "atom", gpu="mi355x")
    batch = StepBatch((PrefillRequest(200_000, 8_192),))  # 208,192 columns
    for budget in (1, 300 * 4 * 208_192, 70 * 4 * 208_192 + 5, 2048 * MIB, 8_192 * 4 * 208_192):
        plan = split_step(batch, "engine", budget, settings)
        low, high = plan.budget_stable
        rows = [(c.token_start, c.token_end) for c in plan.chunks]
        assert [(c.token_start, c.token_end) for c in split_step(batch, "engine", max(low, 1), settings).chunks] == rows
        if high is not None:
            assert [(c.token_start, c.token_end) for c in split_step(batch, "engine", high - 1, settings).chunks] == rows
            assert [(c.token_start, c.token_end) for c in split_step(batch, "engine", high, settings).chunks] != rows


# ------------------------------------------------------------------- differential: ATOM's code

def random_steps(rng: random.Random, count: int) -> list[list[tuple[int, int]]]:
    steps = []
    for _ in range(count):
        steps.append([(rng.choice((0, 0, rng.randint(1, 400_000))), rng.randint(1, 16_384))
                      for _ in range(rng.randint(1, 6))])
    return steps


def test_atoms_own_chunk_loops_and_budget_read():
    rng = random.Random(7)
    cases = [{"budget_mb": rng.choice((64, 512, 2048, 8192, 0)), "total_kv": rng.randint(1, 3_000_000),
              "num_rows": rng.randint(1, 32_768)} for _ in range(300)]
    cases += [{"budget_mb": 1, "total_kv": rng.randint(1, 3_000_000), "num_rows": rng.randint(1, 600)}
              for _ in range(100)]  # below 128 rows: the powers of two
    cases += [{"budget_mb": 2048, "total_kv": 32_768 + k, "num_rows": 16_384} for k in (-1, 0, 1)]
    got = run_atom({"budget_env": [None, "512", "0"], "chunks": cases})
    assert got["budget"] == [2048, 512, 0]  # envs.py:123-125
    for case, v2, v4 in zip(cases, got["v2"], got["v4"]):
        rows, cols, budget = case["num_rows"], case["total_kv"], case["budget_mb"] * MIB
        per = rows if budget == 0 else atom_rows_per_chunk(budget, cols, rows)  # 0: ATOM's "disabled"
        ours = [[s, min(s + per, rows)] for s in range(0, rows, per)]
        assert v2 == ours == v4, case


def test_atoms_builder_sums_every_seq_len_into_the_logits_width(planned_on_rocm):
    """backends.py prepare_prefill: total_kv (the logits' columns) is the step's sum of seq_lens,
    cached prefix or not, and max_seqlen_k (the skip's test) its longest."""
    steps = random_steps(random.Random(11), 60)
    got = run_atom({"steps": [{"context_lens": [c + q for c, q in s], "num_cached_tokens": [c for c, _ in s]}
                              for s in steps]})
    for step, atom in zip(steps, got["total_kv"]):
        batch = StepBatch(tuple(PrefillRequest(c, q) for c, q in step))
        assert atom["total_kv"] == batch.num_kv_tokens and atom["max_seqlen_k"] == batch.longest
        assert atom["has_cached"] == any(c > 0 for c, _ in step)

"""GLM-5.3-Flash's kpool indexer (K pooled 4 tokens to an entry, top-2,048 tokens = 512 pools),
planned on the releases whose path for it was read and held to their own code:

- vLLM 0.33.0: the indexer's KV spec has ``tokens_per_state = index_kpool``, so the shared
  metadata builder chunks ``seq_len // 4`` pooled entries with the same chunker as DeepSeek-V4's
  C4 (``tests/test_engines.py``), the workspace in entries; no logits while the step's longest
  prefill is at most 2,048 tokens (``models/glm5next/nvidia/sparse_indexer.py:280-293``);
- SGLang 0.5.23: every query row of the step against the step's pooled K, each request's
  ``seq_len // 4`` entries in pages of 64, in one call or row chunks under the budget read for the
  call (``dsa/dsa_indexer_kpool.py``, ``dsa/kpool_plan.py``), held to the release's own code by
  ``engine_oracles/sglang_kpool_chunks.py``;
- TensorRT-LLM 1.4.0rc4 (read at its public source, the release assumed to carry the stored
  code): every context row of the step in one fp32 ``[rows, max_model_len // 4]`` call, no chunks,
  no budget (``glm_kpool``), held to that restated rule;
- every other release is refused by name.
"""
from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from indexer_lib.checks import BadValue
from indexer_lib.engines import get_engine, pooled_kv_engines, process_budget
from indexer_lib.plan import PlanSettings
from indexer_lib.memory import make_plan
from indexer_lib.plan.paths import sglang_kpool_cols
from indexer_lib.presets import GIB, MIB, get_model
from indexer_lib.workload import StepBatch

from test_engines import named_batches, random_batches, run_oracle, sglang_src, vllm_python

MODEL = "glm-5.3-flash"
VLLM = Path(__file__).resolve().parent.parent / ".venv"


def settings(engine: str, **kw) -> PlanSettings:
    return PlanSettings(MODEL, engine, temporaries="deepgemm", **kw)


def test_the_kpool_kind_is_planned_as_k_compressed_by_its_pool():
    glm = get_model(MODEL)
    assert (glm.kv_ratio, glm.main_kind.pool, glm.pooled, glm.topk, glm.index_heads) == (4, 4, True, 2048, 32)
    assert not get_model("deepseek-v4-flash").pooled
    assert pooled_kv_engines() == ["sglang==0.5.23", "trtllm==1.4.0rc4", "vllm==0.33.0"]


@pytest.mark.parametrize("engine", [None, "vllm==0.30.0", "sglang==0.5.22", "trtllm==1.4.0rc1"])
def test_a_release_whose_kpool_path_is_not_read_is_refused_by_name(engine):
    with pytest.raises(BadValue, match=r"K pooled 4 tokens to an entry.*not modelled \(its code not read at this "
                                       r"release\); modelled on: sglang==0.5.23, trtllm==1.4.0rc4, vllm==0.33.0"):
        settings(engine)


def test_trtllm_scores_every_context_row_against_the_whole_pooled_table_in_one_call():
    """TensorRT-LLM 1.4.0rc4's ``glm_kpool`` path (restated: ``score_pools`` allocates
    ``torch.empty(rows, ceil(capacity / 4), float32)`` for every context row of the step, the
    capacity the block table's, here max_model_len): one chunk, 1 MiB a row at 1,048,576 tokens,
    whatever the requests' lengths, budget or none; no K gathered, no short-sequence skip."""
    on = settings("trtllm==1.4.0rc4")
    assert on.profile.pooled_kv and "044d703d" in on.profile.sources["pooled_kv"]
    cols = get_model(MODEL).max_model_len // 4
    rng = random.Random("trtllm kpool")
    for _ in range(60):
        queries = [rng.randint(1, 3000) for _ in range(rng.randint(1, 6))]
        batch = StepBatch.from_lengths(queries, [q + rng.choice([0, 7, 2048, 500_000]) for q in queries])
        for budget in (None, 64 * MIB, 8 * GIB):
            plan = make_plan(batch, "engine", budget, on)
            (chunk,) = plan.chunks
            assert (chunk.num_rows, chunk.logits_cols, chunk.kv_tokens) == (batch.num_rows, cols, 0)
            assert chunk.logits_bytes == batch.num_rows * cols * 4
    (chunk,) = make_plan(StepBatch.from_lengths([8192], [8192]), "engine", None, on).chunks
    assert chunk.logits_bytes == 8 * GIB  # 8,192 rows of a 1M-token table, whatever the prompt
    short = make_plan(StepBatch.from_lengths([16], [16]), "engine", None, on)
    assert short.num_chunks == 1  # 16 tokens, under top-k: still scored (no skip read)
    # it reads no budget: the frontier plans one row without one, whatever the grid's budgets
    from indexer_lib.sweep.grid import Grid
    from indexer_lib.sweep.rows import model_rows

    grid = Grid.of(model=MODEL, engine=("trtllm==1.4.0rc4",), strategy=("engine", "vllm"), concurrency=(1,),
                isl=(8192,), osl=4)
    assert grid.budgets("trtllm==1.4.0rc4", "engine") == (None,)
    rows = [r for r in model_rows(grid) if r["strategy"] == "engine"]
    assert len(rows) == 1 and rows[0]["budget_bytes"] == -1 and rows[0]["largest_logits_bytes"] == 8 * GIB


def vllm_release_source(path: str) -> str:
    python = vllm_python("0.33.0")
    found = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('vllm').origin)"],
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-1000:]
    return (Path(found.stdout.strip()).parent / path).read_text()


def test_vllm_0_33_plans_kpool_chunk_for_chunk_as_its_own_chunker():
    """The release's builder for the kpool cache is the one the C4 path uses (its backend does not
    override it), on ``seq_len // 4``; our plan equals that chunker's chunks."""
    backend = vllm_release_source("v1/attention/backends/mla/indexer.py")
    glm_backend = backend[backend.index("class Glm5NextIndexerBackend"):backend.index("class KpoolTailBackend")]
    assert "get_builder_cls" not in glm_backend  # DeepseekV32IndexerBackend's builder
    assert "seq_lens // self.compress_ratio if self.compress_ratio > 1 else seq_lens" in backend
    indexer = vllm_release_source("models/glm5next/nvidia/sparse_indexer.py")
    assert "and prefill_metadata.max_prefill_seq_len <= topk_tokens" in indexer
    rng = random.Random("kpool")
    steps = []
    for b in named_batches() + random_batches(rng, 200):
        seq = [s * 4 + rng.randint(0, 3) for s in b["seq_lens"]]  # tokens: up to 3 in the raw tail
        steps.append((seq, b["query_lens"], b["workspace"], b["max_logits_bytes"]))
    steps.append(([2048], [2048], 1 << 20, 512 * MIB))  # 2,048 tokens: skipped
    steps.append(([2049], [2049], 1 << 20, 512 * MIB))  # 512 pools, but 2,049 tokens: scored
    batches = [{"seq_lens": [s // 4 for s in seq], "query_lens": q, "workspace": w, "max_logits_bytes": budget}
               for seq, q, w, budget in steps]
    answer = run_oracle(vllm_python("0.33.0"), "vllm_chunks.py", {"batches": batches})
    compared = skipped = 0
    for (seq, q, w, budget), b, result in zip(steps, batches, answer["results"], strict=True):
        plan = make_plan(StepBatch.from_lengths(q, seq), "engine", budget, settings("vllm==0.33.0", workspace_tokens=w))
        if max(seq) <= 2048:  # every token selected, no logits
            assert plan.chunks == ()
            skipped += 1
            continue
        assert [[*c.requests, *c.rows] for c in plan.chunks] == result["chunks"], b
        compared += 1
    assert compared >= 150 and skipped >= 1
    one_m = make_plan(StepBatch.from_lengths([8192], [1_048_576]), "engine", 512 * MIB, settings("vllm==0.33.0"))
    # 16 x 1M tokens of workspace // 4 (attention.py:282-284); 512 rows x 262,144 pools per chunk
    assert one_m.workspace_tokens == 16 * 1_048_576 // 4
    assert one_m.num_chunks == 16 and {(c.num_rows, c.logits_cols) for c in one_m.chunks} == {(512, 262_144)}


def test_the_plan_cli_gives_the_largest_logits_on_vllm_0_33(capsys):
    import json

    from indexer_lib.cli import main

    assert main(["plan", "--model", MODEL, "--engine", "vllm==0.33.0", "--query-lens", "8192",
                 "--seq-lens", "200000", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # 50,000 pools; 536,870,912 // (50,000 x 4) = 2,684 rows a chunk, DeepGEMM 2.8's padded width
    assert d["num_chunks"] == 4 and d["chunks"][0]["rows"] == [0, 2684]
    assert d["largest_logits_bytes"] == max(c["logits_bytes"] for c in d["chunks"]) > 0
    assert d["layer_kinds"][0]["name"] == "kpool"


def kpool_forwards(rng: random.Random, count: int) -> list[dict]:
    forwards = []
    for _ in range(count):
        requests = []
        for _ in range(rng.randint(1, 6)):
            query = rng.choice((rng.randint(1, 64), rng.randint(64, 8192), 8192))
            context = rng.choice((0, rng.randint(0, 4000), rng.randint(0, 1_000_000)))
            requests.append([context, query])
        forwards.append({"total_bytes": rng.choice((int(139.8 * GIB), int(178.35 * GIB), 275 * GIB)),
                         "mem_fraction_static": rng.choice((None, 0.85, 0.9)), "fraction": rng.choice((0.1, 0.2, 0.5)),
                         "free_bytes": rng.randint(1, 60) * GIB, "requests": requests})
    # the repro's shape: 8,192 rows against 348,032 pooled entries (three requests' pages)
    forwards.append({"total_bytes": int(139.8 * GIB), "mem_fraction_static": 0.9, "fraction": 0.2,
                     "free_bytes": 50 * GIB, "requests": [[400_000 - 8192, 8192], [500_000, 0 + 1], [492_000, 1]]})
    return forwards


def test_sglang_0_5_23_kpool_width_and_row_chunks_match_its_own_code():
    src = sglang_src()
    forwards = kpool_forwards(random.Random("sglang-kpool"), 120)
    answers = run_oracle(sys.executable, "sglang_kpool_chunks.py", {"forwards": forwards}, src)["results"]
    engine = get_engine("sglang==0.5.23")
    compared = chunked = 0
    for f, want in zip(forwards, answers, strict=True):
        batch = StepBatch.from_lengths([q for _, q in f["requests"]], [c + q for c, q in f["requests"]])
        assert sglang_kpool_cols(batch.compressed(4)) == want["cols"], f
        if max(c + q for c, q in f["requests"]) <= 2048:
            continue  # dsa_indexer_kpool.py:1774-1778: no logits
        budget = process_budget(engine, f["free_bytes"], f["total_bytes"],
                                mem_fraction_static=f["mem_fraction_static"], value=f["fraction"], compressed=True)
        plan = make_plan(batch, "engine", budget, settings("sglang==0.5.23"))
        assert [list(c.rows) for c in plan.chunks] == want["chunks"], f
        assert {c.logits_cols for c in plan.chunks} == {want["cols"]}
        compared += 1
        chunked += len(want["chunks"]) > 1
    assert compared >= 80 and chunked >= 10
    # each chunk's logits freed before the next: one alive
    assert make_plan(batch, "engine", budget, settings("sglang==0.5.23")).logits_alive == 1


def test_sglang_kpool_skips_short_steps_and_widths_are_per_request_pages():
    s = settings("sglang==0.5.23")
    short = make_plan(StepBatch.from_lengths([2048, 100], [2048, 1500]), "engine", None, s)
    assert short.chunks == ()
    # 2,049 tokens: 512 pools in 8 pages; 257 tokens: 64 pools, one page; 260: 65 pools, two
    step = StepBatch.from_lengths([2049, 257, 260], [2049, 257, 260])
    assert sglang_kpool_cols(step.compressed(4)) == (8 + 1 + 2) * 64
    (chunk,) = make_plan(step, "engine", None, s).chunks
    assert (chunk.num_rows, chunk.logits_cols) == (2049 + 257 + 260, 11 * 64)


@pytest.mark.parametrize("case, source, rows, cols, gib, verdict", [
    # the repro's own shape: 8,192 rows x 348k pooled entries, M x N x 4
    ("sglang-glm53-kpool-8192x348k", "https://github.com/sgl-project/sglang/pull/38507", 8192, 348_000, 10.62, True),
    # one request at 1M context through 0.5.23's plan path at its default 16,384-row chunk: 16 GiB
    ("sglang-glm53-kpool-b300-73.65", "https://github.com/sgl-project/sglang/issues/37712", 16_384, 262_144, 16.02,
     False),
])
def test_the_glm_5_3_flash_reports_reproduce_or_say_why_not(case, source, rows, cols, gib, verdict):
    from indexer_lib.study.reported import published_cases, reproduce

    published = {c["case"]: c for c in published_cases()}[case]
    r = reproduce(published)
    got = (r["published_source"], r["rows"], r["kv_tokens"], round(r["reproduced_gib"], 2))
    assert got == (source, rows, cols, gib)
    assert r["matches"] is verdict and (published["status"] == "reproduced") is verdict
    assert "taken" in published["note"]
    if not verdict:
        assert "the report does not give them" in published["note"]
        # 73.65 GiB at 16,384 rows needs about 1.21M pooled columns: several requests' pooled K
        assert 1_200_000 < 73.65 * GIB / 4 / rows < 1_210_000


@pytest.mark.parametrize("engine", ["sglang==0.5.23", "vllm==0.33.0"])
def test_the_kpool_paths_plan_the_same_by_shapes(engine):
    """The frontier's shape planner (``indexer_lib.fast``) gives the kpool paths' chunk count, stable
    budget interval and peak, as ``make_plan`` and the memory model do."""
    from shape_checks import shapes_agree
    from indexer_lib.workload import PrefillRequest

    s = settings(engine)
    rng = random.Random(engine)
    chunked = 0
    for _ in range(40):
        batch = StepBatch(tuple(PrefillRequest(rng.choice((0, rng.randint(0, 1_000_000))),
                                               rng.choice((rng.randint(1, 3000), rng.randint(8192, 12000))))
                                for _ in range(rng.choice((1, 2, 3, 5)))))
        budgets = (2**20, 64 * 2**20, 512 * 2**20, 4 * GIB) + ((None,) if engine.startswith("sglang") else ())
        budget = rng.choice(budgets)
        chunked += shapes_agree(batch, budget, s) > 1
    assert chunked >= 10


def test_the_frontier_and_the_models_of_2026_plan_glm_5_3_flash_where_its_path_is_read(tmp_path, capsys):
    from indexer_lib.cli import main
    from indexer_lib.study.models import release_for

    assert [release_for(MODEL, e) for e in ("vllm", "sglang", "trtllm")] == \
        ["vllm==0.33.0", "sglang==0.5.23", "trtllm==1.4.0rc4"]
    for engine in ("vllm==0.33.0", "sglang==0.5.23", "trtllm==1.4.0rc4"):
        out = tmp_path / f"{engine}.csv"
        assert main(["frontier", "--model", MODEL, "--engine", engine, "--concurrency", "1,4", "--isl", "65536",
                     "--osl", "16", "--strategy", "engine", "--temporaries", "deepgemm", "--free-gib", "30",
                     "--workers", "1", "--out", str(out)]) == 0
        assert out.exists()
    capsys.readouterr()
    assert main(["frontier", "--model", MODEL, "--engine", "trtllm==1.4.0rc1", "--concurrency", "1",
                 "--isl", "65536", "--osl", "16", "--strategy", "engine", "--temporaries", "deepgemm"]) == 2
    assert "not modelled (its code not read at this release)" in capsys.readouterr().err


def test_auto_sets_no_knob_for_a_path_that_reads_none(capsys):
    """TensorRT-LLM's kpool path reads no budget: ``auto`` has nothing to set there, and names no
    element budget as if it changed the plan."""
    from indexer_lib.cli import main

    assert main(["auto", "--model", MODEL, "--engine", "trtllm==1.4.0rc4", "--free-gib", "20",
                 "--workload", "1x8192x4"]) == 0
    out = capsys.readouterr().out
    assert "trtllm==1.4.0rc4: nothing to set" in out and "TLLM_INDEXER_MQA_LOGITS_ELEM_BUDGET=" not in out
    assert "1 of 1 candidates fit" in out

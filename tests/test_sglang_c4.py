"""SGLang's path for DeepSeek-V4's C4 indexer (0.5.12-0.5.23), held to each release's own code.

The differential test runs a release's ``dsv4/metadata.py`` (``PagedIndexerMetadata``; from 0.5.21
its once-per-forward budget and ``plan_indexer_row_chunks``, with ``mqa_logits_utils.py``), the
page table its backend builds and (from 0.5.15) ``_get_nonpaged_indexer_plan`` on a CPU
(``engine_oracles/sglang_c4_chunks.py``), next to ``make_plan(..., "engine", ...)`` and
``EngineBudget(..., compressed=True)``, for one or two releases of each era (``RELEASES``); the
one call of 0.5.12-0.5.20 (no budget, every query row) is restated there with its file:line.
Without ``.venv-engines/sglang-RELEASE`` (or ``$INDEXER_LAB_SGLANG_SRC/sglang-RELEASE``) it
skips (fails under CI), as the other differential tests do.
"""
from __future__ import annotations

import json
import random
import sys

import pytest

from indexer_lib.cli import main
from indexer_lib.engines import EngineBudget, compressed_kv_engines, get_engine, process_budget
from indexer_lib.plan import PlanSettings
from indexer_lib.memory import make_plan
from indexer_lib.plan.paths import sglang_c4_call
from indexer_lib.presets import GIB
from indexer_lib.workload import StepBatch

from test_engines import run_oracle, sglang_src

SGLANG = "sglang==0.5.23"
V4 = PlanSettings("deepseek-v4-flash", SGLANG, temporaries="deepgemm")


def forwards(rng: random.Random, count: int) -> list[dict]:
    """Eager prefill forwards: one to three requests, short and long, on GPUs with little or much free."""
    out = []
    for _ in range(count):
        requests = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            query = rng.choice((rng.randint(1, 600), rng.randint(600, 8191), 8192, rng.randint(8192, 20000)))
            context = rng.choice((0, rng.randint(0, 4096), rng.randint(0, 1_048_576 - query)))
            requests.append([context, query])
        out.append({"total_bytes": rng.choice((int(139.8 * GIB), 80 * GIB, rng.randint(40, 200) * GIB)),
                    "mem_fraction_static": rng.choice((None, 0.85, 0.9, 0.95)),
                    "fraction": rng.choice((0.05, 0.2, 0.2, 0.5)),
                    "free_bytes": rng.choice((rng.randint(1, 40) * GIB, rng.randint(1, 2000) * 2**20)),
                    "requests": requests})
    # the reported step (4,096 rows at 372,736 tokens) and the non-paged one at 1M
    out.append({"total_bytes": int(139.8 * GIB), "mem_fraction_static": 0.9, "fraction": 0.2,
                "free_bytes": 5 * GIB, "requests": [[368_640, 4096]]})
    out.append({"total_bytes": int(139.8 * GIB), "mem_fraction_static": 0.9, "fraction": 0.2,
                "free_bytes": 5 * GIB, "requests": [[1_040_384, 8192]]})
    return out


# one release of each side of every era: 0.5.12-0.5.14 (paged only, one call), 0.5.15-0.5.20
# (paged and non-paged, one call), 0.5.21-0.5.23 (a budget each forward, rows chunked)
RELEASES = ("0.5.12", "0.5.14", "0.5.15", "0.5.17", "0.5.20", "0.5.21", "0.5.22", "0.5.23")


@pytest.mark.parametrize("release", RELEASES)
def test_sglang_c4_budget_path_and_row_chunks_match_its_own_code(release):
    src = sglang_src(release, "sglang/srt/layers/attention/dsv4/metadata.py")
    name = f"sglang=={release}"
    engine, settings = get_engine(name), PlanSettings("deepseek-v4-flash", name, temporaries="deepgemm")
    chunked_era = engine.compressed_budget_rule == "sglang-capped-per-call"
    cases = forwards(random.Random(4), 120 if release == "0.5.23" else 40)
    answers = run_oracle(sys.executable, "sglang_c4_chunks.py", {"forwards": cases}, src)["results"]
    paths = set()
    for case, theirs in zip(cases, answers, strict=True):
        batch = StepBatch.from_lengths([q for _, q in case["requests"]], [c + q for c, q in case["requests"]])
        path, cols, gate_cols = sglang_c4_call(engine, batch.compressed(4))
        assert (path, cols) == (theirs["path"], theirs["cols"]), case
        budget = EngineBudget(engine, case["fraction"], case["total_bytes"], case["mem_fraction_static"],
                              compressed=True).for_call(batch.num_rows, gate_cols, case["free_bytes"])
        assert budget == theirs["budget"], case
        plan = make_plan(batch, "engine", budget, settings)
        assert [list(c.rows) for c in plan.chunks] == theirs["chunks"], case
        for c in plan.chunks:
            assert c.logits_cols == cols and c.compressed
            # the release's [rows, align256(cols)] fp32 (the project aligns rows to 128 / H = 2 as well)
            assert c.logits_bytes == -(-c.num_rows // 2) * 2 * theirs["row_bytes"]
        # the plan is the same for every budget of its stable interval
        low, high = plan.budget_stable
        if budget is not None:
            for b in {low or 1, budget, (high or budget + 1) - 1}:
                assert make_plan(batch, "engine", b, settings).chunks == plan.chunks
        elif not chunked_era:  # no budget read on the one-call releases: one given is refused
            with pytest.raises(ValueError, match="no logits budget on its C4 path"):
                make_plan(batch, "engine", 2**20, settings)
        paths.add((path, len(plan.chunks) > 1))
    want = {("paged", False), ("non-paged", False)}
    if chunked_era:
        want |= {("paged", True), ("non-paged", True)}
    if engine.compressed_nonpaged_min_rows is None:
        want = {("paged", False)}
    assert paths == want
    reported, one_m = answers[-2:]
    if chunked_era:
        assert reported == {"path": "paged", "budget": GIB, "cols": 93_184, "row_bytes": 372_736,
                            "chunks": [[0, 2880], [2880, 4096]]}
        assert one_m["path"] == "non-paged" and one_m["cols"] == 262_144 and len(one_m["chunks"]) == 8
    else:  # the reported step in one call: 4,096 x 93,184 x 4 B
        assert reported == {"path": "paged", "budget": None, "cols": 93_184, "row_bytes": 372_736,
                            "chunks": [[0, 4096]]}
        assert one_m["cols"] == 262_144 and one_m["chunks"] == [[0, 8192]]
        assert one_m["path"] == ("paged" if engine.compressed_nonpaged_min_rows is None else "non-paged")


def test_the_reported_step_plans_through_sglangs_c4_path(capsys):
    base = ["plan", "--model", "deepseek-v4-flash", "--engine", SGLANG, "--query-lens", "4096",
            "--seq-lens", "372736", "--json"]
    assert main(base) == 0
    out = json.loads(capsys.readouterr().out)
    # 4,096 rows x ceil(372,736 / 256) x 64 = 93,184 columns x 4 B: one call under the static budget
    assert out["largest_logits_bytes"] == 4096 * 93_184 * 4 == 1_526_726_656
    assert out["num_chunks"] == 1 and out["logits_alive"] == 1 and out["engine"] == SGLANG
    assert out["budget_bytes"] == process_budget(SGLANG, 10**15, compressed=True)  # free memory not binding
    assert "free memory not given" in out["budget_note"]
    assert main([*base, "--strategy", "engine", "--free-gib", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    # min(5 GiB x 0.2, static) = 1 GiB: 1 GiB // 372,736 B = 2,880 rows a chunk, one alive at a time
    assert out["budget_bytes"] == GIB and "budget_note" not in out
    assert [c["rows"] for c in out["chunks"]] == [[0, 2880], [2880, 4096]]
    assert out["largest_logits_bytes"] == 2880 * 93_184 * 4 and out["logits_alive"] == 1
    assert main([*base, "--free-gib", "40", "--budget-free-gib", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["budget_bytes"] == int(3 * GIB * 0.2) and out["num_chunks"] == 3
    assert out["verdict"] == "fits"


def test_the_c4_path_is_not_the_dsa_one():
    engine = get_engine(SGLANG)
    assert SGLANG in compressed_kv_engines() and not get_engine("sglang==0.5.11").compressed_kv
    assert engine.logits_alive == 2 and engine.compressed_logits_alive == 1
    for fact in ("compressed_kv", "compressed_budget_rule", "compressed_logits_alive", "compressed_page_tokens",
                 "compressed_nonpaged_min_rows"):
        assert "dsv4/" in engine.sources[fact] and ":" in engine.sources[fact]
    # the budget is read on every forward (DSA's is cached for the process)
    budget = EngineBudget(engine, None, int(139.8 * GIB), 0.9, compressed=True)
    assert budget.for_call(4096, 93_184, 20 * GIB) > budget.for_call(4096, 93_184, 2 * GIB) == int(2 * GIB * 0.2)
    assert budget.readings == 2
    assert budget.for_call(100, 64, 2 * GIB) is None  # below 8,000,000 elements: no budget, one call
    # no skip at or below top-k on the C4 path: short sequences compute their logits
    short = make_plan(StepBatch.from_lengths([300], [2000]), "engine", None, V4)
    assert short.num_chunks == 1 and short.chunks[0].logits_cols == 512
    # a page boundary: one token more than 256 pages widens the paged logits by a page's 64 entries
    at, past = (make_plan(StepBatch.from_lengths([4096], [s]), "engine", None, V4).chunks[0].logits_cols
                for s in (372_736, 372_737))
    assert (at, past) == (93_184, 93_248)


def test_sglang_v4_reports_go_through_its_c4_path():
    from indexer_lib.study.reported import published_cases, reproduce

    cases = {c["case"]: c for c in published_cases()}
    want = {"sglang-dsv4-c4-4096x93184": (4096, 93_184, 4096 * 93_184 * 4),
            "sglang-dsv4-c4-4096x800k": (4096, 200_000, 4096 * 200_192 * 4),
            "sglang-dsv4-c4-8192x1m": (8192, 262_144, 8 * GIB),
            "sglang-dsv4-c4-32k-300k": (32_768, 73_728, 32_768 * 73_728 * 4)}
    # the 1.42 GiB report plans on its reporter's release (0.5.17: one call, no budget), the others on 0.5.23
    releases = {name: SGLANG for name in want} | {"sglang-dsv4-c4-4096x93184": "sglang==0.5.17"}
    for name, (rows, cols, nbytes) in want.items():
        case = cases[name]
        assert case["engine"] == releases[name] and case["source"].startswith("https://github.com/sgl-project/sglang/")
        r = reproduce(case)
        assert (r["rows"], r["kv_tokens"], round(r["allocated_gib"] * GIB)) == (rows, cols, nbytes)
        assert r["matches"] and case["status"] == "reproduced"
    assert cases["sglang-dsv4-c4-4096x93184"]["tolerance"] == 0.002
    assert "assumed" not in cases["sglang-dsv4-c4-4096x93184"]["note"]


def test_the_reporters_release_gives_the_reported_allocation_in_one_call(capsys):
    """sgl-project/sglang#35217: v0.5.17, --chunked-prefill-size 4096, 1.42 GiB asked.  0.5.17 reads
    no budget on its C4 path, so free memory changes nothing; 0.5.23 chunks the same step's rows."""
    base = ["plan", "--model", "deepseek-v4-flash", "--engine", "sglang==0.5.17", "--gpu", "h100",
            "--query-lens", "4096", "--seq-lens", "371968", "--json"]
    for extra in ([], ["--free-gib", "5"]):
        assert main([*base, *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["largest_logits_bytes"] == 4096 * 93_184 * 4 and out["num_chunks"] == 1
        assert out["budget_bytes"] is None and "budget_note" not in out and out["logits_alive"] == 1
    assert main([*base[:4], "sglang==0.5.23", *base[5:], "--free-gib", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["num_chunks"] == 2
    # 0.5.12-0.5.14 have no non-paged sub-path: 8,192 rows of one request stay paged
    assert [sglang_c4_call(get_engine(f"sglang=={r}"), StepBatch.from_lengths([8192], [1_048_576]).compressed(4))[0]
            for r in ("0.5.14", "0.5.15")] == ["paged", "non-paged"]


@pytest.mark.parametrize("free_gib", [2.0, 30.0])
def test_the_c4_budget_from_the_strategy_is_sglangs_per_forward_rule(free_gib):
    from indexer_lib.plan import get_strategy

    budget = get_strategy("engine").budget_bytes(None, free_gib, V4)
    assert budget == min(int(free_gib * GIB * 0.2), process_budget(SGLANG, 10**15, compressed=True))


def test_the_c4_path_plans_the_same_by_shapes():
    """The frontier's shape planner (``indexer_lib.fast``) gives the C4 path's chunk count,
    stable budget interval and peak, as ``make_plan`` and the memory model do."""
    from shape_checks import shapes_agree
    from indexer_lib.workload import PrefillRequest

    rng = random.Random(5)
    chunked = 0
    for _ in range(60):
        batch = StepBatch(tuple(PrefillRequest(rng.choice((0, rng.randint(0, 1_000_000))),
                                               rng.choice((rng.randint(1, 3000), rng.randint(8192, 12000))))
                                for _ in range(rng.choice((1, 1, 2, 3)))))
        budget = rng.choice((None, 2**20, 64 * 2**20, 512 * 2**20, 4 * GIB))
        chunked += shapes_agree(batch, budget, V4) > 1
    assert chunked >= 10


def test_the_c4_eras_as_the_releases_ship_them():
    """DeepSeek-V4 first ships in 0.5.12; its C4 path's facts come from the overlay of its era
    (the sglang-dsv4- files in data/engines/) and leave the DSA indexer's facts as they were."""
    from indexer_lib.engines import engine_names

    eras = {}
    for name in engine_names("sglang"):
        p = get_engine(name)
        if p.compressed_kv:
            eras.setdefault((p.compressed_budget_rule, p.compressed_nonpaged_min_rows, p.compressed_logits_alive,
                             p.compressed_page_tokens, p.sources["compressed_file"]), []).append(p.release)
            for fact in ("compressed_kv", "compressed_budget_rule", "compressed_logits_alive",
                         "compressed_nonpaged_min_rows"):
                assert "dsv4/" in p.sources[fact] and ":" in p.sources[fact], (name, fact)
    assert eras == {
        ("none", None, 1, 256, "data/engines/sglang-dsv4-0.5.12.json"):
            ["0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14"],
        ("none", 8192, 1, 256, "data/engines/sglang-dsv4-0.5.15.json"):
            ["0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20"],
        ("sglang-capped-per-call", 8192, 1, 256, "data/engines/sglang-dsv4-0.5.21.json"): ["0.5.21", "0.5.22", "0.5.23"]}
    # the DSA indexer's facts are each release's own
    for release, rule, era_file in (("0.5.12", "sglang-free-per-call", "sglang-0.5.6.json"),
                                    ("0.5.17", "sglang-cached", "sglang-0.5.13.json")):
        p = get_engine(f"sglang=={release}")
        assert p.budget_rule == rule and p.sources["file"] == f"data/engines/{era_file}" and p.logits_alive == 2
    # no budget on the one-call releases' C4 path, whatever the free memory
    assert process_budget("sglang==0.5.17", 40 * GIB, compressed=True) is None
    assert process_budget("sglang==0.5.17", 40 * GIB) == process_budget("sglang==0.5.22", 40 * GIB)


def test_the_frontier_plans_v4_on_every_era(capsys, tmp_path, monkeypatch):
    """At 5 GiB free one 1M-token prompt's last 8,192-row step is 8 GiB of logits in one call on
    0.5.12-0.5.20, chunked under the budget on 0.5.21-0.5.23."""
    monkeypatch.chdir(tmp_path)
    largest = {}
    for release in ("0.5.12", "0.5.17", "0.5.23"):
        assert main(["frontier", "--model", "deepseek-v4-flash", "--engine", f"sglang=={release}", "--strategy",
                     "engine", "--concurrency", "1", "--isl", "400000,1000000", "--osl", "16",
                     "--free-gib", "5", "--out", f"sglang-{release}.csv"]) == 0
        line = next(l for l in capsys.readouterr().out.splitlines() if l.strip().startswith("engine"))
        largest[release] = line.split()[1:]
    assert largest == {"0.5.12": ["none", "400000"], "0.5.17": ["none", "400000"],
                       "0.5.23": ["measured", "1000000"]}


def test_auto_has_nothing_to_set_on_the_one_call_releases(capsys):
    assert main(["auto", "--model", "deepseek-v4-flash", "--engine", "sglang==0.5.17", "--free-gib", "5",
                 "--workload", "1x400000x16"]) == 0
    out = capsys.readouterr().out
    assert "sglang==0.5.17: nothing to set" in out and "1 of 1 candidates fit" in out


def test_sm12x_row_cap_is_refused_by_name(capsys):
    # SGLang's paged C4 indexer cuts calls at 4,096 rows on sm12x (_SM120_INDEXER_M_CHUNK): not modelled
    from indexer_lib.cli.main import main

    args = ["plan", "--model", "deepseek-v4-flash", "--engine", "sglang==0.5.23", "--query-lens", "8192",
            "--seq-lens", "300000", "--free-gib", "50"]
    assert main(args + ["--gpu", "gb10"]) == 2
    assert "_SM120_INDEXER_M_CHUNK" in capsys.readouterr().err
    assert main(args + ["--gpu", "b200"]) == 0


def test_the_frontier_takes_sglangs_mem_fraction_static_and_names_it(tmp_path, capsys):
    """SGLang's --mem-fraction-static caps the budget it measures (f x (1 - it) x the GPU's memory):
    a grid given one plans with that budget and names it in every row; 0.9, SGLang's own choice on
    an H200, is the default and is not named; a grid without SGLang refuses it in one line."""
    from indexer_lib.cli import main
    from indexer_lib.presets import free_bytes_from_gib, get_gpu
    from indexer_lib.sweep.grid import Grid
    from indexer_lib.sweep.rows import model_rows

    axes = dict(model="deepseek-v4-flash", engine=("sglang==0.5.23",), strategy=("engine",), concurrency=(1,),
                isl=(1048576,), free_gib=(20.0,))
    total = get_gpu("h200").capacity_bytes
    for fraction in (None, 0.9, 0.8):
        (row,) = model_rows(Grid.of(**axes, mem_fraction_static=fraction))
        expected = process_budget(SGLANG, free_bytes_from_gib(20.0), total, compressed=True,
                                  **({} if fraction is None else {"mem_fraction_static": fraction}))
        assert row["budget_bytes"] == expected
        assert row["not_default"] == ("mem_fraction_static=0.8 (default 0.9)" if fraction == 0.8 else "")
    assert process_budget(SGLANG, free_bytes_from_gib(20.0), total, mem_fraction_static=0.8, compressed=True) > \
        process_budget(SGLANG, free_bytes_from_gib(20.0), total, compressed=True)  # the cap binds at 0.9
    derived = Grid.of(model="glm-5", engine=("sglang==0.5.23",), strategy=("engine",), concurrency=(1,), isl=(8192,),
                   kv_cache_tokens="auto", tp=8, mem_fraction_static=0.8).kv_cache("sglang==0.5.23")
    assert (derived.setting, derived.fraction) == ("mem_fraction_static", 0.8)  # it sizes the derived cache too
    with pytest.raises(ValueError, match="mem_fraction_static 1.5: must be a fraction"):
        Grid.of(**axes, mem_fraction_static=1.5)
    out = tmp_path / "x.csv"
    assert main(["frontier", "--model", "glm-5", "--mem-fraction-static", "0.8", "--out", str(out)]) == 2
    assert "the grid has no SGLang release (vllm==0.33.0)" in capsys.readouterr().err
    assert not out.exists()


# ----------------------------------------------------------------------------- on ROCm (gfx950)

def test_sglang_c4_on_rocm_allocates_as_its_own_code():
    """0.5.23 on the MI355X, the FP8 indexer (its default): the release's own ``PagedIndexerMetadata``
    with ``is_hip`` true reads no budget and cuts no rows (dsv4/metadata.py:205-208), its page table
    is ceil(longest / 256) columns (kernels/ops/attention/dsv4/attn_glue_hip.py:383-385), and its
    ``_aiter_fp8_paged_mqa_logits`` (dsv4/indexer.py:148-185) allocates ``[rows, cols]`` fp32 with
    no alignment (``engine_oracles/sglang_c4_hip.py``, on meta tensors); ours: one call, those bytes."""
    src = sglang_src("0.5.23", "sglang/kernels/ops/attention/dsv4/attn_glue_hip.py")
    settings = PlanSettings("deepseek-v4-pro", SGLANG, gpu="mi355x", temporaries="deepgemm")
    cases = [{"requests": c["requests"]} for c in forwards(random.Random(7), 60)]
    answers = run_oracle(sys.executable, "sglang_c4_hip.py", {"forwards": cases}, src)["results"]
    unaligned = 0
    for case, theirs in zip(cases, answers, strict=True):
        assert (theirs["deep_gemm_metadata"], theirs["rows_per_chunk"], theirs["budget"]) == (None, None, None)
        assert theirs["dtype"] == "torch.float32"
        batch = StepBatch.from_lengths([q for _, q in case["requests"]], [c + q for c, q in case["requests"]])
        plan = make_plan(batch, "engine", None, settings)
        (chunk,) = plan.chunks
        assert [chunk.num_rows, chunk.logits_cols] == theirs["shape"], case
        assert chunk.logits_bytes == theirs["nbytes"], case
        unaligned += theirs["cols"] % 256 != 0
    assert unaligned >= 5  # the width is whole pages of 64 entries, not 256 columns
    with pytest.raises(ValueError, match="reads no logits budget on its C4 path on ROCm"):
        make_plan(batch, "engine", 2**20, settings)


def test_sglang_c4_on_rocm_known_calls_byte_exact():
    """sglang 0.5.23 dsv4/indexer.py:148-185 ``_aiter_fp8_paged_mqa_logits``: ``torch.empty(rows,
    max_seq_len)`` fp32, max_seq_len = page_table.shape[1] x 64 (dsv4/metadata.py:322-324), the
    page table ceil(longest seq_len / 256) columns (attn_glue_hip.py:383-385); every row in one call
    (indexer.py:1124, metadata.py:205-208)."""
    settings = PlanSettings("deepseek-v4-pro", SGLANG, gpu="mi355x", temporaries="deepgemm")
    for rows, seq, cols in ((8192, 262_144, 65_536), (8000, 100_000, 25_024), (1, 1, 64)):
        (chunk,) = make_plan(StepBatch.from_lengths([rows], [seq]), "engine", None, settings).chunks
        assert (chunk.num_rows, chunk.logits_cols) == (rows, cols)
        assert chunk.logits_bytes == rows * cols * 4
    # 25,024 columns stay unaligned: the CUDA path's DeepGEMM layout would take 25,088
    (chunk,) = make_plan(StepBatch.from_lengths([8000], [100_000]), "engine", None, settings).chunks
    assert chunk.logits_bytes == 800_768_000


def test_the_briefs_plan_runs_on_the_mi355x(capsys):
    argv = ["plan", "--model", "deepseek-v4-pro", "--engine", SGLANG, "--gpu", "mi355x", "--budget-free-gib", "20",
            "--query-lens", "8192", "--seq-lens", "262144", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    # 8,192 rows x ceil(262,144 / 256) x 64 columns x 4 B in one call, no budget read on ROCm
    assert out["largest_logits_bytes"] == 8192 * 65_536 * 4 == 2 * GIB
    assert out["num_chunks"] == 1 and out["budget_bytes"] is None and out["logits_alive"] == 1
    assert "budget_note" not in out


def test_sglang_c4_on_rocm_has_no_budget_for_any_caller(capsys):
    """Every caller of the release's budget (plan, deploy, the sweeps through ``process_budget``)
    gets none for its C4 path on ROCm (dsv4/metadata.py:205-208: no budget read on HIP), and a
    deployment plans through it."""
    total = int(287.98 * GIB)
    assert EngineBudget(SGLANG, None, total, 0.9, compressed=True, rocm=True).rule == "none"
    assert process_budget(SGLANG, 20 * GIB, total, compressed=True, rocm=True) is None
    assert process_budget(SGLANG, 20 * GIB, total, compressed=True) is not None  # CUDA: read every forward
    argv = ["deploy", "--model", "deepseek-v4-pro", "--engine", SGLANG, "--gpu", "mi355x", "--tp", "8",
            "--workload", "1x131072x16"]
    assert main(argv) == 0
    assert "logits budget none" in capsys.readouterr().out

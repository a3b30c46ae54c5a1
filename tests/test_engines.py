"""Engine profiles, checked against the engines' own code (docs/design.md#engines).

The differential tests run each release's real chunker (vLLM 0.15.1, 0.19.0, 0.33.0) and
SGLang 0.5.23's real budget and row-chunk code next to ``make_plan(..., "engine", ...,
PlanSettings(engine=...))`` and ``EngineBudget``; ``bash scripts/install_engines.sh`` installs them
(``scripts/test.sh`` does).  Without them these tests skip, except under CI, where they fail.
"""
from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from indexer_lib.engines import EngineBudget, engine_names, get_engine
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.plan import PlanSettings
from indexer_lib.run.tracer import trace
from indexer_lib.presets import GIB, MIB, get_model
from indexer_lib.workload import StepBatch

REPO = Path(__file__).resolve().parent.parent
ORACLES = Path(__file__).resolve().parent / "engine_oracles"
ENGINES = REPO / ".venv-engines"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
WORKSPACE = get_model("deepseek-v3.2").default_workspace_tokens  # 40 x 163,840


def missing(what: str):
    message = f"{what} is not installed here: bash scripts/install_engines.sh"
    if IN_CI:
        pytest.fail(message + " (CI=true: the differential tests must run)")
    pytest.skip(message)


def vllm_python(release: str) -> str:
    """The interpreter of the environment holding vLLM ``release``."""
    try:
        if importlib.metadata.version("vllm") == release:
            return sys.executable  # the project's own (scripts/install_vllm.sh)
    except importlib.metadata.PackageNotFoundError:
        pass
    python = ENGINES / f"vllm-{release}" / "bin" / "python"
    if not python.exists():
        missing(f"vLLM {release} ({python.parent.parent})")
    return str(python)


def run_oracle(python: str, script: str, request: dict, *args) -> dict:
    done = subprocess.run([python, str(ORACLES / script), *args], input=json.dumps(request),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


# ----------------------------------------------------------------------------------- profiles

def test_every_release_from_the_first_indexer_to_the_latest_has_a_profile():
    vllm = [n.split("==")[1] for n in engine_names("vllm")]
    sglang = [n.split("==")[1] for n in engine_names("sglang")]
    assert vllm[0] == "0.11.0" and vllm[-1] == "0.33.0" and len(vllm) == 35
    assert sglang[0] == "0.5.3" and sglang[-1] == "0.5.23" and len(sglang) == 37
    assert get_engine().name == "vllm==0.33.0" and get_engine("sglang").name == "sglang==0.5.23"
    for name in engine_names():
        profile = get_engine(name)
        for fact in ("chunker", "workspace_lifetime", "budget_rule", "deepgemm_build", "deepgemm_rules",
                     "layout", "topk", "dummy_run", "metadata", "scheduler_max_num_batched_tokens"):
            assert profile.sources.get(fact), f"{name}: {fact} has no source"


def test_an_unknown_release_is_one_line_naming_the_nearest_or_the_known_ones():
    with pytest.raises(ValueError) as e:
        get_engine("vllm==0.10.2")
    text = str(e.value)
    assert "\n" not in text and "unknown engine release 'vllm==0.10.2': did you mean vllm==0.11.0, " in text
    with pytest.raises(ValueError) as e:
        get_engine("tgi==2.0")
    text = str(e.value)
    assert "\n" not in text and "unknown engine release 'tgi==2.0'" in text
    assert "vllm==0.11.0-0.33.0" in text and "sglang==0.5.3-0.5.23" in text


def test_the_eras_as_the_engines_ship_them():
    def facts(name):
        p = get_engine(name)
        return p.chunker, p.workspace_factor, p.workspace_lifetime, p.budget_rule, p.deepgemm_rules, p.layout
    assert facts("vllm==0.11.0") == ("workspace", 2, "chunk", "none", "2.1", "full")
    assert facts("vllm==0.15.1") == ("workspace", 40, "persistent", "none", "2.1", "full")
    assert facts("vllm==0.16.0")[4] == "2.3"
    assert facts("vllm==0.19.0") == ("logits-budget", 40, "persistent", "fixed-mib", "2.3", "full")
    assert facts("vllm==0.20.0")[4] == "2.5.0-initial" and facts("vllm==0.25.0")[4] == "2.5.0"
    assert facts("vllm==0.27.0")[4] == "2.6" and facts("vllm==0.32.0")[4] == "2.6"
    assert facts("vllm==0.33.0") == ("logits-budget", 40, "persistent", "fixed-mib", "2.8", "compressed")
    assert facts("sglang==0.5.3") == ("none", None, "call", "none", "2.1", "full")
    assert facts("sglang==0.5.12")[3:5] == ("sglang-free-per-call", "2.5.0-initial")
    assert facts("sglang==0.5.23") == ("rows", None, "call", "sglang-cached", "2.6", "full")
    assert get_engine("sglang==0.5.23").logits_alive == 2
    assert get_engine("vllm==0.19.0").dummy_logits_reservation and not get_engine("vllm==0.18.1").dummy_logits_reservation


def test_the_profile_run_reserves_one_chunks_logits_from_vllm_0_19_0():
    from indexer_lib.engines import profile_run_logits_bytes

    assert profile_run_logits_bytes("vllm==0.18.1") == 0 == profile_run_logits_bytes("sglang==0.5.23")
    assert profile_run_logits_bytes("vllm==0.19.0") == 512 * MIB == profile_run_logits_bytes("vllm")
    assert profile_run_logits_bytes("vllm==0.33.0", 1024) == 1024 * MIB


def test_the_engine_strategy_refuses_a_budget_the_engine_has_no_use_for(capsys):
    from indexer_lib.cli import main

    batch = StepBatch.from_lengths([256] * 32, [10240] * 32)
    with pytest.raises(ValueError, match="vllm==0.15.1 has no logits budget"):
        make_plan(batch, "engine", 512 * MIB, PlanSettings(engine="vllm==0.15.1"))
    with pytest.raises(ValueError, match="vllm==0.19.0 chunks this step .* budget_bytes must be > 0"):
        make_plan(batch, "engine", None, PlanSettings(engine="vllm==0.19.0"))
    # the engine's own chunker always runs its release's own build: a what-if DeepGEMM is not
    # read by the plan, and the CLI refuses to be asked for one
    v33 = PlanSettings(engine="vllm==0.33.0")
    own = make_plan(batch, "engine", 512 * MIB, v33.where(deepgemm_version="2.6"))
    assert own.deepgemm_version == "2.8" and own.chunks == make_plan(batch, "engine", 512 * MIB, v33).chunks
    step = ["--query-lens", ",".join(["256"] * 32), "--seq-lens", ",".join(["10240"] * 32)]
    assert main(["plan", *step, "--strategy", "engine", "--engine", "vllm==0.33.0", "--deepgemm-version", "2.6"]) == 2
    assert "--deepgemm-version 2.6: the engine strategy runs vllm==0.33.0's own build" in capsys.readouterr().err
    # the project's strategies may run on another DeepGEMM than the engine's (a what-if)
    what_if = make_plan(batch, "vllm", 512 * MIB, v33.where(deepgemm_version="2.6"))
    assert (what_if.engine, what_if.deepgemm_version) == ("vllm==0.33.0", "2.6")
    assert not any(c.compressed for c in what_if.chunks)
    assert make_plan(batch, "vllm", 512 * MIB, v33).deepgemm_version == "2.8"
    # under SGLang's element gate no budget is read, so none is needed
    sglang = PlanSettings(engine="sglang")
    assert make_plan(StepBatch.from_lengths([100], [3000]), "engine", None, sglang).num_chunks == 1
    # no logits at all when every sequence fits the top-k
    assert make_plan(StepBatch.from_lengths([2048], [2048]), "engine", None, sglang).chunks == ()


# ------------------------------------------------ the chunk loops, read from the engines' own code

def vllm_source(release: str) -> Path:
    """The file holding vLLM ``release``'s prefill chunk loop (``sparse_attn_indexer``)."""
    python = Path(vllm_python(release))
    found = subprocess.run([str(python), "-c", "import importlib.util as u; "
                            "print(u.find_spec('vllm').submodule_search_locations[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return Path(found) / "model_executor" / "layers" / "sparse_attn_indexer.py"


def keeps_previous_chunk_alive(path: Path, function: str, name: str) -> bool:
    """Whether ``function`` in ``path`` has a loop that binds ``name`` to a call's result
    (a kernel's new logits) and never deletes it or sets it to None inside the loop: Python
    evaluates the call, which allocates, before the old tensor loses its name."""
    tree = ast.parse(path.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
              and n.name == function)

    def binds(node, value_ok):
        return isinstance(node, ast.Assign) and value_ok(node.value) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets)

    for loop in (n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While))):
        body = list(ast.walk(loop))
        rebinds = any(binds(n, lambda v: isinstance(v, ast.Call)) for n in body)
        released = any(isinstance(n, ast.Delete) and any(isinstance(t, ast.Name) and t.id == name
                                                         for t in n.targets) for n in body) or \
            any(binds(n, lambda v: isinstance(v, ast.Constant) and v.value is None) for n in body)
        if rebinds and not released:
            return True
    return False


@pytest.mark.parametrize("release", ("0.15.1", "0.19.0", "0.33.0"))
def test_vllms_chunk_loop_keeps_the_previous_chunks_logits_alive(release):
    """Each chunk's ``logits = <kernel>(...)`` allocates before the previous chunk's logits lose
    their name: two chunks' logits are alive at that moment, in every era checked."""
    assert keeps_previous_chunk_alive(vllm_source(release), "sparse_attn_indexer", "logits")
    assert get_engine(f"vllm=={release}").logits_alive == 2
    for name in engine_names("vllm"):
        assert get_engine(name).logits_alive == 2, name


def test_the_loop_check_sees_a_release_that_frees_its_logits(tmp_path):
    code = ("def sparse_attn_indexer(chunks):\n    for chunk in chunks:\n        logits = kernel(chunk)\n"
            "        top_k(logits)\n        {free}\n")
    for free, kept in (("pass", True), ("del logits", False), ("logits = None", False)):
        path = tmp_path / "loop.py"
        path.write_text(code.format(free=free))
        assert keeps_previous_chunk_alive(path, "sparse_attn_indexer", "logits") is kept, free


def test_sglangs_chunk_loop_keeps_the_previous_chunks_logits_alive():
    path = Path(sglang_src()) / "sglang/srt/layers/attention/dsa/dsa_indexer.py"
    assert keeps_previous_chunk_alive(path, "_get_topk_ragged", "logits_chunk")
    assert not keeps_previous_chunk_alive(path, "_get_topk_ragged", "no_such_name")  # the check can fail
    assert get_engine("sglang==0.5.23").logits_alive == 2


# --------------------------------------------------------------------- what each release allocates

def test_the_step_of_the_reported_oom_release_by_release():
    """32 requests x (9,984 + 256) on GLM-5 at the default 512 MiB: one 10 GiB chunk before
    #36178, five [1792, 71680] chunks after it, and [1792, 10240] from 0.33.0 on."""
    batch = StepBatch.from_lengths([256] * 32, [10240] * 32)

    def chunks(engine, budget=512 * MIB):
        plan = make_plan(batch, "engine", budget, PlanSettings("glm-5", engine))
        return [(c.num_rows, c.logits_cols, c.compressed, c.logits_bytes) for c in plan.chunks]

    assert chunks("vllm==0.15.1", None) == [(8192, 327680, False, 8192 * (327680 + 256) * 4)]
    assert chunks("vllm==0.19.0") == [(1792, 71680, False, 1792 * 71936 * 4)] * 4 + [(1024, 40960, False, 1024 * 41216 * 4)]
    assert chunks("vllm==0.33.0") == [(1792, 10240, True, 1792 * 10240 * 4)] * 4 + [(1024, 10240, True, 1024 * 10240 * 4)]
    assert chunks("vllm==0.33.0")[0][3] == 73_400_320  # 73 MB, where 0.19.0-0.32.0 allocate 515 MB


def test_the_field_strategies_on_a_compressed_only_deepgemm_allocate_compressed_widths():
    batch = StepBatch.from_lengths([256] * 32, [10240] * 32)
    for strategy in ("n-only", "vllm", "per-request"):
        plan = make_plan(batch, strategy, None if strategy == "n-only" else 512 * MIB,
                         PlanSettings("glm-5", "vllm==0.33.0"))
        assert plan.deepgemm_version == "2.8"
        for c in plan.chunks:
            widest = max(plan.batch.seq_lens[c.requests[0]:c.requests[1]])
            assert c.compressed and c.logits_cols == widest


FULL_SCALE = {
    "32x(9984+256)": StepBatch.from_lengths([256] * 32, [10240] * 32),
    "64K prompt, 8K step": StepBatch.from_lengths([8192], [65536]),
    "2x(111K+3.5K)": StepBatch.from_lengths([3584] * 2, [111 * 1024 + 3584] * 2),
}
ERA_RELEASES = ("vllm==0.11.0", "vllm==0.15.1", "vllm==0.19.0", "vllm==0.20.0", "vllm==0.30.0", "vllm==0.33.0",
                "sglang==0.5.3", "sglang==0.5.12", "sglang==0.5.23")


@pytest.mark.fullscale
@pytest.mark.parametrize("engine", ERA_RELEASES)
def test_the_tracer_equals_the_memory_model_for_every_profile(engine):
    profile = get_engine(engine)
    h200 = EngineBudget(profile, total_bytes=int(139.8 * GIB), mem_fraction_static=0.9) \
        if profile.budget_rule.startswith("sglang") else EngineBudget(profile)
    for name, batch in FULL_SCALE.items():
        budget = h200.for_call(batch.num_rows, batch.num_kv_tokens, free_bytes=20 * GIB)
        plan = make_plan(batch, "engine", budget, PlanSettings("glm-5", profile))
        report = memory_report(plan)
        traced = trace(plan)
        assert traced.peak_bytes == report.peak, (name, engine)
        assert traced.chunk_transient == [c.total for c in report.chunks], (name, engine)
        if profile.logits_alive == 2 and plan.num_chunks > 1:  # two chunks' logits alive at once
            assert report.peak_transient >= report.call + 2 * min(c.logits for c in report.chunks)


# ------------------------------------------------------------------ differential: vLLM's chunkers

def random_batches(rng: random.Random, count: int) -> list[dict]:
    """Batches as vLLM's chunker sees them: seq_lens, query_lens (q <= seq, at most 16,384 rows
    in all), a workspace and a budget; short and long requests, workspaces the requests
    outgrow, budgets below one row."""
    batches = []
    for _ in range(count):
        n = rng.choice((1, 1, 2, 3, rng.randint(4, 16), rng.randint(16, 64)))
        seq = [rng.choice((rng.randint(1, 4096), rng.randint(4096, 65536), rng.randint(65536, 200_000)))
               for _ in range(n)]
        q = [rng.choice((s, rng.randint(1, min(s, 8192)), min(s, 256))) for s in seq]
        while sum(q) > 16384:  # a step holds at most max_num_batched_tokens rows
            q = [max(1, x // 2) for x in q]
        workspace = rng.choice((WORKSPACE, WORKSPACE, rng.randint(1000, 400_000)))
        budget = rng.choice((512 * MIB, rng.randint(1, 4096) * MIB, rng.randint(MIB // 4, 64 * MIB)))
        batches.append({"seq_lens": seq, "query_lens": q, "workspace": workspace, "max_logits_bytes": budget})
    return batches


def named_batches() -> list[dict]:
    """The field's cases and the edge cases, at vLLM's default workspace and budget."""
    cases = [
        ([10240] * 32, [256] * 32),  # the reported OOM step
        ([65536], [8192]), ([65536], [65536]), ([65536, 10240, 10240], [8192, 256, 256]),
        ([111 * 1024 + 3584] * 2, [3584] * 2),  # ATOM's shared prefix
        ([163840], [8192]),  # one request over the budget
        ([200_000] * 40, [64] * 40),  # packing bound by the workspace
        ([WORKSPACE + 1], [256]),  # a request longer than the workspace
        ([1], [1]), ([2048] * 64, [2048] * 64),
    ]
    return [{"seq_lens": s, "query_lens": q, "workspace": WORKSPACE, "max_logits_bytes": 512 * MIB}
            for s, q in cases]


@pytest.mark.parametrize("release", ["0.15.1", "0.19.0", "0.32.0", "0.33.0"])
def test_the_engine_strategy_plans_chunk_for_chunk_as_vllm_does(release):
    engine = get_engine(f"vllm=={release}")
    batches = named_batches() + random_batches(random.Random(release), 600)
    answer = run_oracle(vllm_python(release), "vllm_chunks.py", {"batches": batches})
    assert answer["vllm"] == release
    compared = errors = 0
    for b, result in zip(batches, answer["results"], strict=True):
        budget = b["max_logits_bytes"] if engine.has_budget else None
        plan = make_plan(StepBatch.from_lengths(b["query_lens"], b["seq_lens"]), "engine", budget,
                         PlanSettings(engine=engine, workspace_tokens=b["workspace"]))
        ours = [[*c.requests, *c.rows] for c in plan.chunks]
        if "error" in result:  # the workspace-only chunker asserts every seq_len <= workspace
            assert "AssertionError" in result["error"] and max(b["seq_lens"]) > b["workspace"]
            assert any(c.over_budget and c.kv_tokens > b["workspace"] for c in plan.chunks)
            errors += 1
            continue
        assert ours == result["chunks"], (b, answer["chunker"])
        # a request that outgrows the workspace is the engine's failure, flagged in the plan
        assert plan.over_budget == (max(b["seq_lens"]) > b["workspace"] or any(
            c.over_budget for c in plan.chunks))
        compared += 1
    assert compared >= 500
    assert errors > 0 if not engine.has_budget else errors == 0


def test_a_compressed_indexer_plans_chunk_for_chunk_as_vllm_0_33_does():
    """DeepSeek-V4's C4 indexer on vLLM 0.33.0: the same chunker on seq_len // 4 K entries (the
    query rows unchanged), the workspace in entries; no logits while the longest is <= top-k."""
    rng = random.Random("c4")
    steps = []
    for b in named_batches() + random_batches(rng, 400):
        seq = [s * 4 + rng.randint(0, 3) for s in b["seq_lens"]]  # tokens, at most 3 past a whole entry
        steps.append((seq, b["query_lens"], b["workspace"], b["max_logits_bytes"]))
    steps.append(([1_048_576], [8192], 16 * 1_048_576 // 4, 512 * MIB))  # 1M context: 512-row chunks
    batches = [{"seq_lens": [s // 4 for s in seq], "query_lens": q, "workspace": w, "max_logits_bytes": budget}
               for seq, q, w, budget in steps]
    answer = run_oracle(vllm_python("0.33.0"), "vllm_chunks.py", {"batches": batches})
    topk = get_model("deepseek-v4-flash").topk
    compared = skipped = 0
    for (seq, q, w, budget), b, result in zip(steps, batches, answer["results"], strict=True):
        plan = make_plan(StepBatch.from_lengths(q, seq), "engine", budget,
                         PlanSettings("deepseek-v4-flash", "vllm==0.33.0", workspace_tokens=w, temporaries="deepgemm"))
        if max(b["seq_lens"]) <= topk:  # models/deepseek_v4/attention.py: every entry selected, no logits
            assert plan.chunks == ()
            skipped += 1
            continue
        assert [[*c.requests, *c.rows] for c in plan.chunks] == result["chunks"], b
        # a chunk is as wide as its longest compressed request (DeepGEMM 2.8's max_seqlen_k)
        for c in plan.chunks:
            assert c.kv_tokens == sum(b["seq_lens"][c.requests[0]:c.requests[1]]) or c.num_requests == 1
        compared += 1
    assert compared >= 300 and skipped > 0
    one_m = make_plan(StepBatch.from_lengths([8192], [1_048_576]), "engine", 512 * MIB,
                      PlanSettings("deepseek-v4-flash", "vllm", temporaries="deepgemm"))
    assert one_m.num_chunks == 16 and {c.num_rows for c in one_m.chunks} == {512}
    assert {c.logits_cols for c in one_m.chunks} == {262_144} and one_m.workspace_tokens == 16 * 1_048_576 // 4


# --------------------------------------------------------------- differential: SGLang's budget

def sglang_src(release: str = "0.5.23", needs: str = "sglang/srt/layers/attention/mqa_logits_utils.py") -> str:
    """An unpacked sglang wheel: ``.venv-engines/sglang-RELEASE/src``, or
    ``$INDEXER_LAB_SGLANG_SRC/sglang-RELEASE`` (a folder of unpacked wheels) where that is set."""
    src = ENGINES / f"sglang-{release}" / "src"
    other = os.environ.get("INDEXER_LAB_SGLANG_SRC")
    if not (src / needs).exists() and other and (Path(other) / f"sglang-{release}" / needs).exists():
        src = Path(other) / f"sglang-{release}"
    if not (src / needs).exists():
        missing(f"SGLang {release}'s source ({src})")
    return str(src)


def sglang_scenarios(rng: random.Random, count: int) -> list[dict]:
    """Processes on a GPU whose free memory shrinks call after call."""
    scenarios = []
    for _ in range(count):
        total = rng.choice((int(139.8 * GIB), int(178.35 * GIB), rng.randint(40, 200) * GIB))
        free = rng.randint(1, 60) * GIB
        calls = []
        for _ in range(rng.randint(1, 12)):
            rows = rng.choice((rng.randint(1, 512), rng.randint(512, 16384), 8192))
            cols = rows + rng.choice((rng.randint(2048, 8000), rng.randint(8000, 400_000), 327_680 - rows))
            calls.append({"rows": rows, "cols": cols, "free_bytes": free})
            free = max(1, int(free * rng.uniform(0.3, 1.0)))
        scenarios.append({"total_bytes": total, "mem_fraction_static": rng.choice((None, 0.85, 0.9, 0.92, 0.95)),
                          "fraction": rng.choice((0.1, 0.2, 0.2, 0.5)), "calls": calls})
    # the reported stale budget: 178.35 GiB, mem_fraction_static 0.92, 20 GiB free at the
    # first measured call, 2.20 GiB when a 2.63 GiB chunk is asked for
    scenarios.append({"total_bytes": int(178.35 * GIB), "mem_fraction_static": 0.92, "fraction": 0.2,
                      "calls": [{"rows": 8192, "cols": 327680, "free_bytes": 20 * GIB},
                                {"rows": 8192, "cols": 327680, "free_bytes": int(2.20 * GIB)}]})
    return scenarios


def test_sglang_budget_and_row_chunks_match_its_own_code_call_after_call():
    src = sglang_src()
    engine = get_engine("sglang==0.5.23")
    scenarios = sglang_scenarios(random.Random(23), 100)
    answers = run_oracle(sys.executable, "sglang_chunks.py", {"scenarios": scenarios}, src)["results"]
    calls = 0
    for scenario, theirs in zip(scenarios, answers, strict=True):
        budget = EngineBudget(engine, value=scenario["fraction"], total_bytes=scenario["total_bytes"],
                              mem_fraction_static=scenario["mem_fraction_static"])
        for call, result in zip(scenario["calls"], theirs, strict=True):
            rows, cols = call["rows"], call["cols"]
            ours_budget = budget.for_call(rows, cols, call["free_bytes"])
            assert (ours_budget or 0) == result["budget"], (scenario, call)
            assert budget.readings == result["readings"]
            plan = make_plan(StepBatch.from_lengths([rows], [cols]), "engine", ours_budget,
                             PlanSettings(engine=engine))
            assert [list(c.rows) for c in plan.chunks] == result["chunks"], (scenario, call)
            calls += 1
    assert calls >= 500
    stale = theirs  # the last scenario: the reported case
    assert stale[0]["budget"] == stale[1]["budget"] and stale[1]["readings"] == 1
    assert stale[1]["budget"] > 2.20 * GIB  # the cached budget authorises more than is free


# ------------------------------------------------------------- the field's failures, by release

def test_the_reported_failures_come_from_the_releases_that_had_them():
    from indexer_lib.study.reported import FIELD_RELEASES, stale_budgets, through_releases

    table = through_releases()
    assert set(table["engine"]) == set(FIELD_RELEASES)
    before = table[table["engine"] == "vllm==0.15.1"].set_index("case")
    # from the reporters' own settings: the 16 and 8.03 GiB steps; not the 9.89 GiB one, whose
    # step vLLM's default scheduler never builds from a cold cache (data/field/ says so); from a
    # warm one (a rerun of the same seeded prompts), concurrency 64's first step builds it
    assert before["reproduces_published"].to_dict() == {
        "glm5-c48-isl10240": False, "glm5-c64-isl10240": False,
        "glm5-c48-isl10240-warm": False, "glm5-c64-isl10240-warm": True,
        "prompt-64k-one-step": True, "prompt-64k-mnbt32768-dg2.1": True}
    assert (before.loc[["glm5-c48-isl10240", "glm5-c64-isl10240"], "largest_logits_cols"] < 20_000).all()
    assert before.loc["glm5-c64-isl10240-warm", ["largest_logits_rows", "largest_logits_cols"]].tolist() == [
        4096, 655_360]  # every client's last block against every client's prompt
    for case, rows in table[table["case"].str.startswith("prompt-64k")].groupby("case"):
        by = rows.set_index("engine")
        budgeted = by.loc[["vllm==0.19.0", "vllm==0.33.0"]]
        # the budget holds M x N x 4; DeepGEMM's padding is what it undercounts
        assert (budgeted["largest_logits_rows"] * budgeted["largest_logits_cols"] * 4 <= 512 * MIB).all()
        assert (budgeted["largest_logits_gib"] < by.loc["vllm==0.15.1", "largest_logits_gib"] / 10).all()
        assert by.loc["vllm==0.33.0", "largest_logits_bytes"] <= by.loc["vllm==0.19.0", "largest_logits_bytes"]
    (stale,) = stale_budgets()
    assert stale["engine_allows_the_chunk"] and not stale["chunk_fits_free_memory"]
    assert stale["fresh_budget_would_fit"]
    assert round(stale["cached_budget_gib"], 2) == 2.85 and round(stale["fresh_budget_gib"], 2) == 0.44


def test_where_each_release_runs_out_of_memory_on_the_field_deployments():
    from indexer_lib.notebook import plots
    from indexer_lib.study.releases import deployments, release_table

    assert set(deployments()) == {"glm5-8xh200-isl10240", "mnbt32768-seqs16-isl16384"}
    releases = ("vllm==0.15.1", "vllm==0.19.0", "vllm==0.33.0", "sglang==0.5.12", "sglang==0.5.23")
    # vllm serve's defaults at concurrency 8-64 x ISL 10240: no release OOMs with 2.63 GiB free
    # (the reported OOM is not reproduced from those settings), and nothing is named
    seed = release_table("glm5-8xh200-isl10240", releases)
    assert not seed["oom"].any() and set(seed["not_default"]) == {""}
    # the reporter's own --max-num-batched-tokens 32768 --max-num-seqs 16, named in every row
    table = release_table("mnbt32768-seqs16-isl16384", releases)
    assert all(n.startswith("max_num_batched_tokens=32768 (default 8192); max_num_seqs=16") for n in table["not_default"])
    first_oom = {e: rows[rows["oom"]]["concurrency"].min() for e, rows in table.groupby("engine")}
    assert first_oom["vllm==0.15.1"] == 2  # two 16K prompts in one 32K step: 4.2 GiB of logits
    assert first_oom["sglang==0.5.12"] == 2  # half the free memory per chunk, two chunks alive
    for engine in ("vllm==0.19.0", "vllm==0.33.0", "sglang==0.5.23"):
        assert not table[table["engine"] == engine]["oom"].any()
    v33, v19 = (table[table["engine"] == e]["peak_transient_gib"].to_numpy() for e in ("vllm==0.33.0", "vllm==0.19.0"))
    assert (v33 <= v19).all()
    # 0.19.0's profile run reserves one chunk's logits (512 MiB); the worst step has two alive
    busy = table[(table["engine"] == "vllm==0.19.0") & (table["concurrency"] == 16)].iloc[0]
    assert busy["worst_chunks"] > 1 and busy["profile_run_logits_gib"] == 0.5
    assert 0.5 <= busy["unreserved_gib"] and busy["peak_transient_gib"] >= 2 * 0.5
    assert set(table[table["engine"] == "vllm==0.15.1"]["profile_run_logits_gib"]) == {0.0}
    fig = plots.release_frontier(table)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len([label for label in labels if label.startswith(("vllm==", "sglang=="))]) == 5  # one per release
    title = fig.get_suptitle().replace("\n", " ")
    assert "SGLang's included, scheduled by the vLLM V1 scheduler simulator" in title
    assert "max_num_batched_tokens=32768, max_num_seqs=16" in title


def test_auto_prints_the_chosen_engines_own_setting(capsys):
    from indexer_lib.cli import main

    # a 256-token long_prefill_token_threshold (the releases' default: 0) builds steps of many
    # partial prefills, 32 x (9,984 + 256): large enough to tell the releases apart
    base = ["auto", "--model", "glm-5", "--free-gib", "2.63", "--workload", "32x10240x64",
            "--long-prefill-token-threshold", "256"]
    assert main(base + ["--engine", "vllm==0.19.0"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=")
    assert main(base + ["--engine", "sglang==0.5.23", "--mem-fraction-static", "0.9"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION=")
    # nothing fits: a negative answer (exit 1) under the header, not an error
    assert main(base + ["--engine", "sglang==0.5.12"]) == 1  # half the free memory, two chunks alive
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("none: ") and "no strategy and budget fits" in out[1]
    assert "sglang==0.5.12 at its default" in out[1]
    assert main(base + ["--engine", "vllm==0.15.1"]) == 1  # no budget to set, and the step OOMs
    out = capsys.readouterr().out.splitlines()
    assert "no strategy and budget fits" in out[1] and "vllm==0.15.1 at its default" in out[1]


def test_the_frontier_plans_on_an_engine_release():
    from indexer_lib.cli import main
    from indexer_lib.sweep.grid import Grid
    from indexer_lib.study.releases import release_table
    from indexer_lib.sweep.rows import model_rows, to_frame

    for engine in ("vllm==0.15.1", "vllm==0.33.0", "sglang==0.5.23"):
        grid = Grid.of(concurrency=(16, 64), isl=(10240,), osl=64, budget_mb=(512,), strategy=("engine",),
                    free_gib=(2.63,), engine=engine)  # the release's scheduler, as the deployment
        # to_frame adds peak_transient_gib, as the frontier's rows had it
        rows = to_frame(list(model_rows(grid))).set_index("concurrency")
        table = release_table("glm5-8xh200-isl10240", (engine,)).set_index("concurrency")
        for conc in (16, 64):  # the same deployment through the frontier grid and study.releases
            assert rows.loc[conc, "peak_transient_gib"] == table.loc[conc, "peak_transient_gib"]
            assert rows.loc[conc, "engine"] == engine
            assert rows.loc[conc, "deepgemm_version"] == get_engine(engine).deepgemm_rules
    # without an engine: the latest vLLM
    assert Grid.of(strategy=("engine",)).engine == (get_engine("vllm").name,) == ("vllm==0.33.0",)
    assert main(["frontier", "--concurrency", "64", "--isl", "10240", "--strategy", "engine",
                 "--engine", "vllm==0.99.0"]) == 2

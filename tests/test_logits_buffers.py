"""The what-if prefill logits buffers (``plan.logits_buffer``, ``ledger.buffers``): a fixed width
(vllm-project/vllm#58068) and a pooled buffer (sgl-project/sglang#37660) over the release's own
plan, what each frees and costs in a deployment's ledger, and the decode budget no release has."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from indexer_lib.checks import BadValue
from indexer_lib.cli.auto import parse_workload
from indexer_lib.cli.main import main
from indexer_lib.ledger.buffers import (DECODE_BUDGET_ENV, DECODE_BUDGET_READ, SGLANG_POOL_MIB, decode_budget_note,
                                        what_if_buffer)
from indexer_lib.ledger.deployment import Server, deployment_ledger, what_ifs
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.memory.events import plan_events
from indexer_lib.plan import PlanSettings, get_strategy
from indexer_lib.plan.logits_buffer import LogitsBuffer
from indexer_lib.presets import MIB, get_model
from indexer_lib.workload import StepBatch

ENGINES = Path(__file__).resolve().parent.parent / ".venv-engines"
LONG = Server("glm-5.3-flash", "vllm==0.33.0", "h200", 1, max_model_len=262_144, max_num_seqs=2)


def release_plan(query=2048, seq=200_000):
    settings = PlanSettings("glm-5.3-flash", "vllm==0.33.0", temporaries="deepgemm")
    return make_plan(StepBatch.from_lengths([query], [seq]), "engine", 512 * MIB, settings)


def test_fixed_width_gives_every_launch_one_width_within_one_block():
    plan = release_plan()
    width = 262_144 // 4
    fixed = LogitsBuffer("fixed-width", 512 * MIB, width).apply(plan)
    block = plan.settings.counters[1](fixed.chunks[0].num_rows, width, True)
    assert {c.logits_cols for c in fixed.chunks} == {width}
    assert all(c.logits_bytes <= block for c in fixed.chunks) and max(c.logits_bytes for c in fixed.chunks) == block
    assert all(c.num_rows <= 512 * MIB // (4 * width) for c in fixed.chunks)
    # the same rows as the release's plan, the K gathered once per chunk of it
    assert sum(c.num_rows for c in fixed.chunks) == plan.batch.num_rows
    assert sum(c.gather for c in fixed.chunks) == sum(c.gather for c in plan.chunks)
    # wider than the release's own width: its logits cost more
    assert max(c.logits_bytes for c in fixed.chunks) > plan.largest_logits_bytes


def test_pooled_launches_allocate_nothing_of_their_own():
    plan = release_plan()
    pool = 256 * MIB
    pooled = LogitsBuffer("pooled", pool).apply(plan)
    cols = plan.chunks[0].logits_cols
    assert all(c.num_rows <= pool // (4 * cols) for c in pooled.chunks) and len(pooled.chunks) > len(plan.chunks)
    assert all(plan.settings.counters[1](c.num_rows, cols, c.compressed) <= pool for c in pooled.chunks)
    events = plan_events(pooled, memory_report(pooled, topk_rows=2048), "p", persistent=False)
    assert not [e for e in events if e[0] == "malloc" and e[1].endswith("/logits")]
    assert [e for e in plan_events(plan, memory_report(plan, topk_rows=2048), "p", persistent=False)
            if e[0] == "malloc" and e[1].endswith("/logits")]


def test_a_long_prompt_holds_fewer_segments_under_either_buffer():
    """One 231K-token prompt on an H200: the release's chunks of growing width keep a segment each;
    at one width, or out of one pool, the allocator reuses its blocks."""
    workload = parse_workload("1x231000x64")
    given = deployment_ledger(LONG, workload, free_gib=100)
    fixed = deployment_ledger(replace(LONG, logits_buffer="fixed-width"), workload, free_gib=100)
    pooled = deployment_ledger(replace(LONG, logits_buffer="pooled"), workload, free_gib=100)
    for d in (fixed, pooled):
        assert d.run.allocator.segments < given.run.allocator.segments
        assert d.run.allocator.high_water < given.run.allocator.high_water / 2
    # fixed width costs launches (the widest rows fit fewer per launch) and no boot memory
    assert fixed.run.chunks > given.run.chunks and fixed.run.ledger.boot_bytes == given.run.ledger.boot_bytes
    # the pool is a boot line of the budget's bytes, held apart from the steps
    (line,) = [x for x in pooled.run.ledger.lines if x.name == "pooled prefill logits buffer"]
    assert line.bytes == given.budget_bytes == 512 * MIB and "fp4_indexer_hip.py:62-67" in line.source
    assert pooled.run.ledger.boot_bytes == given.run.ledger.boot_bytes + line.bytes
    assert "vllm-project/vllm#58068" in fixed.not_default and "sglang#37660" in pooled.not_default


def test_the_pool_takes_the_memory_free_and_sglangs_size_on_sglang():
    server = Server("deepseek-v4-flash", "sglang==0.5.23", "h200")
    workload = parse_workload("1x200000x64")
    given, pooled = (deployment_ledger(replace(server, logits_buffer=b), workload) for b in (None, "pooled"))
    assert given.free.bytes - pooled.free.bytes == SGLANG_POOL_MIB * MIB
    assert pooled.run.allocator.high_water < given.run.allocator.high_water


def test_the_pool_is_sglangs_rule_as_installed():
    """The restated rule against the installed SGLang: one module-global buffer of
    SGLANG_DSV4_FP4_LOGITS_BUDGET_MB (2048) x 2**20 // 4 fp32 elements, rows of elements // width."""
    src = ENGINES / "sglang-0.5.23" / "src" / "sglang"
    hip = src / "kernels" / "ops" / "attention" / "dsv4" / "fp4_indexer_hip.py"
    if not hip.exists():
        pytest.skip(f"SGLang 0.5.23 ({hip}) is not installed here: bash scripts/install_engines.sh")
    lines = hip.read_text().splitlines()
    assert lines[65] == "_LOGITS_BUDGET_ELEMS = envs.SGLANG_DSV4_FP4_LOGITS_BUDGET_MB.get() * 2**20 // 4"
    assert lines[66] == "_LOGITS_POOL: dict = {}"
    assert lines[219].strip() == "return max(1, _LOGITS_BUDGET_ELEMS // width)"
    assert "return buf[:n].view(num_tokens, max_seq_len)" in "\n".join(lines[222:257])
    environ = (src / "srt" / "environ.py").read_text().splitlines()
    assert environ[1100].strip() == f"SGLANG_DSV4_FP4_LOGITS_BUDGET_MB = EnvInt({SGLANG_POOL_MIB})"


def test_buffers_are_refused_where_the_path_has_none():
    settings = PlanSettings("glm-5", "vllm==0.30.0", temporaries="deepgemm")
    with pytest.raises(BadValue, match="fixed-width: modelled on vLLM's budgeted chunker"):
        what_if_buffer("fixed-width", get_strategy("engine"), settings, 512 * MIB, 202_752)
    with pytest.raises(BadValue, match="release's own path"):
        what_if_buffer("pooled", get_strategy("vllm"), settings, 512 * MIB, 202_752)
    names = [name for name, _ in what_ifs(Server("glm-5", "vllm==0.30.0"), get_model("glm-5"))]
    assert "pooled prefill logits buffer (sglang#37660)" in names
    assert not [n for n in names if n.startswith("fixed-width")]


def test_no_installed_vllm_release_budgets_its_decode_logits():
    installed = sorted(p.name.split("-", 1)[1] for p in ENGINES.glob("vllm-*") if (p / "site/vllm/envs.py").exists())
    if not installed:
        pytest.skip(f"no vLLM release installed under {ENGINES}: bash scripts/install_engines.sh")
    assert tuple(installed) == DECODE_BUDGET_READ  # the note names exactly the releases read
    for release in installed:
        envs = (ENGINES / f"vllm-{release}" / "site/vllm/envs.py").read_text()
        assert DECODE_BUDGET_ENV not in envs and "DECODE_MAX" not in envs
        assert ("VLLM_SPARSE_INDEXER_MAX_LOGITS_MB" in envs) == (release != "0.15.1")  # the prefill budget, 0.19.0 on


def test_deploy_what_if_shows_the_buffers_and_the_decode_budget(capsys):
    argv = ["deploy", "--model", "glm-5.3-flash", "--gpu", "gb10", "--tp", "2", "--gpu-memory-utilization", "0.85",
            "--max-model-len", "262144", "--max-num-seqs", "2", "--workload", "1x231000x64", "--what-if"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 1
    rows = {m.group(1).strip(): m.group(2) for m in re.finditer(r"^  (\S.{51}) .* (fits|oom)$", out, re.M)}
    assert rows["as given"] == "oom"
    assert rows["fixed-width logits (vllm#58068, sizing assumed)"] == "fits"
    assert rows["pooled prefill logits buffer (sglang#37660)"] == "fits"
    assert decode_budget_note() in out
    main(argv + ["--json"])
    d = json.loads(capsys.readouterr().out)
    assert d["decode_budget"] == decode_budget_note() and d["logits_buffer"] is None
    by = {w["what_if"]: w for w in d["what_ifs"]}
    fixed = by["fixed-width logits (vllm#58068, sizing assumed)"]
    assert fixed["allocator_high_water_bytes"] < d["allocator_high_water_bytes"]
    # the setting itself: named with the numbers it gives
    assert main(argv[:-1] + ["--logits-buffer", "fixed-width", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["logits_buffer"] == "fixed-width" and "fixed width of 65,536 columns" in d["not_default"]
    assert d["allocator_high_water_bytes"] == fixed["allocator_high_water_bytes"]


@pytest.mark.parametrize("argv, says", [
    (["--engine", "vllm==0.30.0", "--logits-buffer", "fixed-width"], "not vllm==0.30.0's vllm path"),
    (["--logits-buffer", "pooled", "--strategy", "vllm", "--budget-mb", "512"], "release's own path"),
    (["--logits-buffer", "pool"], "invalid choice"),
])
def test_a_buffer_the_path_has_not_is_one_line_and_exit_2(argv, says, capsys):
    code = main(["deploy", "--workload", "4x2048x8", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and says in err, err

"""The ledger: each line held to the release's own code where it is installed (vLLM 0.33.0 in
.venv, scripts/install_vllm.sh), or to the restated rule; the allocator line to the memory model;
the free memory to the server's flags; plan and deploy carrying the keys users script against."""
from __future__ import annotations

import ast
import importlib.util
import json
import math
import re
from pathlib import Path

import pytest

from indexer_lib.cli.main import main
from indexer_lib.engines import get_engine, profile_run_logits_bytes
from indexer_lib.ledger import (PHASES, Ledger, LedgerLine, decode_logits_bytes, decode_logits_cols, free_from_flags,
                                plan_ledger, run_allocator)
from indexer_lib.ledger.free import given_free
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.padding import get_rules
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import GIB, MIB, get_gpu, get_model
from indexer_lib.memory.events import live_peak, persistent_events, plan_events
from indexer_lib.workload import StepBatch


def vllm_source(relative: str) -> str:
    """The installed vLLM's source file (skipped where vLLM is not installed)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed here (scripts/install_vllm.sh installs 0.33.0)")
    path = Path(spec.origin).parent / relative
    if not path.exists():
        pytest.skip(f"{path}: not in the installed vLLM")
    return path.read_text()


def constant(source: str, name: str) -> int:
    """A module-level ``NAME = <int expression>`` of a source file, evaluated."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return int(eval(compile(ast.Expression(node.value), name, "eval")))  # a constant expression
    raise AssertionError(f"{name} not found")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def glm5_plan(engine="vllm==0.33.0", query=8192, seq=65536):
    settings = PlanSettings("glm-5", engine, temporaries="deepgemm")
    return make_plan(StepBatch.from_lengths([query], [seq]), "engine", 512 * MIB, settings)


# ----------------------------------------------------------------------------- boot lines

def test_k_workspace_line_is_vllm_033s_buffer():
    """The profile run asks the workspace manager for K values [T, 128] fp8, scales [T, 4] and the
    radix top-k workspace in one buffer, each rounded up to 256 bytes; T = 40 x max_model_len."""
    radix = constant(vllm_source("model_executor/layers/indexer_topk.py"), "RADIX_TOPK_WORKSPACE_SIZE")
    layer = vllm_source("model_executor/layers/sparse_attn_indexer.py")
    assert re.search(r"profile_specs.*?=\s*\[\s*values_spec,\s*scales_spec,\s*\(\(RADIX_TOPK_WORKSPACE_SIZE,\), "
                     r"torch\.uint8\)", layer, re.S)
    plan = glm5_plan()
    ledger = plan_ledger(plan, None, 202_752, 8192)
    (line,) = [x for x in ledger.lines if x.name == "K workspace"]
    tokens = 40 * 202_752
    assert plan.workspace_tokens == tokens
    assert line.bytes == -(-tokens * 128 // 256) * 256 + -(-tokens * 4 // 256) * 256 + radix
    assert "indexer.py:916-928" in line.source


def test_profile_run_reservation_is_the_envs_default():
    envs = vllm_source("envs.py")
    default = int(re.search(r'os\.getenv\("VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", "(\d+)"\)', envs).group(1))
    layer = vllm_source("model_executor/layers/sparse_attn_indexer.py")
    assert "max_logits_elems = envs.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB * 1024 * 1024" in layer
    ledger = plan_ledger(glm5_plan(), None, 202_752, 8192)
    (line,) = [x for x in ledger.lines if x.name == "profile run's logits reservation"]
    assert line.bytes == default * MIB == 512 * MIB
    # a release whose profile run reserves no logits has no such line
    old = plan_ledger(make_plan(StepBatch.from_lengths([1024], [4096]), "engine", None,
                                PlanSettings("glm-5", "vllm==0.15.1")), None, 202_752, 8192)
    assert "profile run's logits reservation" not in [x.name for x in old.lines]


def test_kpool_profile_run_reserves_the_worst_decode_step():
    """vLLM 0.33.0's GLM-5.3-Flash path reserves max(budget, min(max_num_seqs x (1 + drafts),
    max_num_batched_tokens) x max_model_len // 4 x 4): 1 GiB at 1,024 decodes and 1M of context,
    the figure vllm-project/vllm#57701 gives (3,072 MiB saved of 4,096)."""
    source = vllm_source("models/glm5next/nvidia/sparse_indexer.py")
    flat = re.sub(r"\s+", " ", source)
    assert "worst_decode_tokens = min( sched.max_num_seqs * (num_spec + 1), sched.max_num_batched_tokens, )" in flat
    assert "max_logits_elems = max(decode_logits_elems, prefill_cap_elems)" in flat
    assert "self.max_pool_len = vllm_config.model_config.max_model_len // self.index_kpool" in re.sub(
        r"\s+", " ", vllm_source("models/glm5next/common/attention.py"))
    model = get_model("glm-5.3-flash")
    assert profile_run_logits_bytes("vllm==0.33.0", model=model, worst_decode_tokens=min(1024, 16384),
                                    max_model_len=1_048_576) == 1 * GIB
    assert profile_run_logits_bytes("vllm==0.33.0", model=model, worst_decode_tokens=8,
                                    max_model_len=1_048_576) == 512 * MIB  # the budget is larger
    # the DeepSeek path reserves the budget alone
    assert profile_run_logits_bytes("vllm==0.33.0", model=get_model("glm-5"), worst_decode_tokens=1024) == 512 * MIB


def test_rocm_profile_run_puts_the_decode_logits_in_the_workspace():
    """vLLM 0.33.0's ROCm indexer asks the shared workspace for [min(max_num_batched_tokens,
    max_num_seqs x (1 + drafts)), max_model_len] fp32 in its profile run; the workspace keeps the
    larger of that and the K workspace, so the line is what it adds past the K workspace, on ROCm
    only."""
    flat = re.sub(r"\s+", " ", vllm_source("v1/attention/ops/rocm_aiter_mla_sparse.py"))
    assert "return min(num_batched_tokens, max_num_seqs * (1 + num_spec))" in flat
    assert ("decode_rows = _max_decode_logits_rows(hidden_states.shape[0]) if _ON_GFX942 or _ON_GFX950: "
            "workspace_manager.get_simultaneous( ((decode_rows, max_model_len), torch.float32), )") in flat
    batch = StepBatch.from_lengths([8192], [16384])
    mml, rows = 1_048_576, min(8192, 64 * (1 + 3))
    lines = {}
    for gpu in ("mi355x", "h200"):
        plan = make_plan(batch, "engine", 512 * MIB, PlanSettings("glm-5.2", "vllm==0.33.0", gpu=gpu))
        lines[gpu] = {x.name: x for x in plan_ledger(plan, None, mml, 8192, worst_decode_tokens=rows).lines}
    assert "ROCm decode logits in the workspace" not in lines["h200"]
    rocm = lines["mi355x"]
    asked = rows * mml * 4
    assert rocm["ROCm decode logits in the workspace"].bytes == max(0, asked - rocm["K workspace"].bytes)
    assert f"{asked:,} B asked" in rocm["ROCm decode logits in the workspace"].detail
    assert "rocm_aiter_mla_sparse.py:1185-1213" in rocm["ROCm decode logits in the workspace"].source
    # past the K workspace (16 x max_model_len tokens of 132 B), the difference is held at boot
    big = make_plan(batch, "engine", 512 * MIB, PlanSettings("glm-5.2", "vllm==0.33.0", gpu="mi355x"))
    held = {x.name: x for x in plan_ledger(big, None, mml, 8192, worst_decode_tokens=4096).lines}
    assert held["ROCm decode logits in the workspace"].bytes == 4096 * mml * 4 - held["K workspace"].bytes > 0
    # every decode step takes its logits from that workspace (:651-653, :824-826): no step allocation
    assert ("(out_logits,) = current_workspace_manager().get_simultaneous( ((batch_size * next_n, "
            "max_model_len), torch.float32), )") in flat
    from indexer_lib.ledger.build import decode_line

    rocm_decode = decode_line(big, 4096, mml)
    assert rocm_decode.bytes == 0 and "shared workspace" in rocm_decode.detail
    assert "rocm_aiter_mla_sparse.py" in rocm_decode.source
    cuda = make_plan(batch, "engine", 512 * MIB, PlanSettings("glm-5.2", "vllm==0.33.0", gpu="h200"))
    assert decode_line(cuda, rows, mml).bytes == rows * mml * 4


# ----------------------------------------------------------------------------- decode

def test_decode_logits_are_deepgemms_paged_allocation():
    """[decode tokens, align(align(max_model_len, 256), 256)] fp32 (DeepGEMM's 1,024-byte row stride)."""
    layer = vllm_source("model_executor/layers/sparse_attn_indexer.py")
    assert re.search(r"fp8_fp4_paged_mqa_logits\(.*?max_model_len=max_model_len", layer, re.S)
    dg = get_rules(get_engine("vllm==0.33.0").deepgemm_rules)  # DeepGEMM 2.8
    assert decode_logits_bytes(256, 1_048_576, dg) == 256 * 1_048_576 * 4
    assert decode_logits_bytes(3, 1000, dg) == 3 * 1024 * 4
    assert decode_logits_bytes(1, 257, dg) == 512 * 4
    vllm = get_engine("vllm==0.33.0")
    assert decode_logits_cols(vllm, get_model("glm-5"), 202_752) == 202_752
    assert decode_logits_cols(vllm, get_model("glm-5.3-flash"), 1_048_576) == 262_144  # its pools
    assert decode_logits_cols(vllm, get_model("deepseek-v4-flash"), 1_048_576) is None  # C4 decode: not read
    # SGLang's kpool decode path is not read (tests/test_sglang_decode.py holds its DSA one)
    assert decode_logits_cols(get_engine("sglang==0.5.23"), get_model("glm-5.3-flash"), 1_048_576) is None


# ----------------------------------------------------------------------------- allocator

@pytest.mark.parametrize("engine, model, query, seq", [
    ("vllm==0.33.0", "glm-5", 8192, 65536),  # two chunks' logits alive at once
    ("vllm==0.33.0", "glm-5", 4096, 200_000),
    ("sglang==0.5.23", "deepseek-v3.2", 2048, 65536),
    ("vllm==0.19.0", "glm-5", 8192, 100_000),
    ("trtllm==1.3.0rc27", "deepseek-v4-flash", 8192, 400_000),
])
def test_the_allocator_sees_what_the_memory_model_counts(engine, model, query, seq):
    """The events the allocator replays hold, at their peak, the step's transient peak exactly."""
    settings = PlanSettings(model, engine, temporaries="deepgemm")
    budget = None if settings.profile.budget_rule.startswith("sglang") or settings.profile.engine == "trtllm" \
        else 512 * MIB
    if settings.profile.budget_rule.startswith("sglang"):
        from indexer_lib.engines import process_budget
        budget = process_budget(settings.profile, 20 * GIB, get_gpu("h200").capacity_bytes)
    if settings.profile.engine == "trtllm":
        from indexer_lib.engines import process_budget
        budget = process_budget(settings.profile)
    plan = make_plan(StepBatch.from_lengths([query], [seq]), "engine", budget, settings)
    report = memory_report(plan)
    assert live_peak(plan_events(plan, report, "s", persistent=False)) == report.peak_transient
    assert sum(e[2] for e in persistent_events(plan, report, "b")) == report.persistent


def growing_logits_steps(n=40, first=400 * MIB, growth=1.013):
    """A long prefill: each step one logits block a bit larger than the last, freed before the next."""
    steps, size = [], first
    for i in range(n):
        steps.append((i, [("malloc", f"{i}/logits", int(size)), ("free", f"{i}/logits")]))
        size *= growth
    return steps


def test_the_allocator_line_fails_where_kept_segments_are_the_wrong_sizes():
    """Blocks of ever-new sizes, each freed before the next: the allocator keeps every segment until
    the driver has no more, then gives its cached segments back and retries, so each still fits.
    But a block cut from a kept segment pins it: a 300 MiB block alive in the 1 GiB segment a
    larger block left, the next 800 MiB block needs a segment of its own, which does not fit,
    although 1.1 GiB allocated would."""
    alone = run_allocator([], growing_logits_steps(), 3 * GIB)
    assert not alone.failed and alone.retries > 0 and alone.high_water <= 3 * GIB
    pinned = [(0, [("malloc", "0", 1 * GIB), ("free", "0")]), (1, [("malloc", "1", 300 * MIB)]),
              (2, [("malloc", "2", 800 * MIB)])]
    run = run_allocator([], pinned, int(1.5 * GIB))
    assert run.failed and run.fragmented and run.step == 2
    assert run.high_water == 1 * GIB + 800 * MIB > 1.5 * GIB  # what it needed from the driver then
    assert not run_allocator([], pinned, 2 * GIB).failed


def test_boot_buffers_are_held_outside_the_free_memory():
    """The free memory is what a step has beyond the boot buffers: a K workspace larger than it
    does not make a small step fail."""
    boot = [("malloc", "boot/k", 4 * GIB)]
    step = [(0, [("malloc", "0/logits", 256 * MIB), ("free", "0/logits")])]
    run = run_allocator(boot, step, 1 * GIB)
    assert not run.failed and run.high_water == 256 * MIB


# ----------------------------------------------------------------------------- free memory and verdict

def test_free_memory_from_the_servers_flags():
    total = get_gpu("h200").capacity_bytes
    vllm = free_from_flags("vllm==0.33.0", "h200", 512 * MIB)
    assert vllm.bytes == total - math.ceil(total * 0.92) + 512 * MIB  # the release's default utilization
    assert "gpu_memory_utilization 0.92)" in vllm.source
    given = free_from_flags("vllm==0.33.0", "h200", 0, gpu_memory_utilization=0.85)
    assert given.bytes == total - math.ceil(total * 0.85) and "0.85, given" in given.source
    # before vLLM estimated CUDA graphs inside its share, the figure is an upper bound, and says so
    assert any("upper bound" in a for a in free_from_flags("vllm==0.19.0", "h200", 512 * MIB).assumptions)
    sglang = free_from_flags("sglang==0.5.23", "h200", 0, mem_fraction_static=0.8)
    assert sglang.bytes == int(total * (1 - 0.8)) and sglang.assumptions
    with pytest.raises(ValueError, match="give --free-gib"):
        free_from_flags("trtllm==1.3.0rc27", "h200", 0)
    with pytest.raises(ValueError, match="gpu_memory_utilization 1.5"):
        free_from_flags("vllm==0.33.0", "h200", 0, gpu_memory_utilization=1.5)


def test_the_verdict_names_the_first_line_that_does_not_fit():
    lines = (LedgerLine("boot", "K workspace", 10 * GIB, "s"), LedgerLine("prefill", "p", 2 * GIB, "s"),
             LedgerLine("decode", "d", 3 * GIB, "s"), LedgerLine("allocator", "a", 1 * GIB, "s"))
    assert Ledger(lines).verdict is None and Ledger(lines).oom_line is None
    ledger = Ledger(lines, int(2.5 * GIB), "given")
    assert ledger.verdict == "oom" and ledger.oom_line.name == "d"  # boot lines take KV, not free memory
    assert ledger.boot_bytes == 10 * GIB and ledger.needed_bytes == 3 * GIB
    assert Ledger(lines, 3 * GIB, "given").verdict == "fits"
    with pytest.raises(ValueError, match="phase 'warmup'"):
        LedgerLine("warmup", "x", 0, "s")
    d = ledger.to_json()
    assert set(d) >= {"ledger", "boot_bytes", "needed_bytes", "verdict", "oom_line"}
    assert all(set(x) >= {"phase", "name", "bytes", "source"} and x["phase"] in PHASES for x in d["ledger"])


# ----------------------------------------------------------------------------- commands

def test_plan_json_carries_the_ledger(capsys):
    code, out, _ = run(capsys, "plan", "--model", "glm-5", "--query-lens", "8192", "--seq-lens", "65536",
                       "--gpu-memory-utilization", "0.92", "--json")
    d = json.loads(out)
    assert code == 0 and d["verdict"] == "fits" and d["oom_line"] is None
    assert [x["phase"] for x in d["ledger"]] == ["boot", "boot", "boot", "prefill", "allocator"]
    assert d["boot_bytes"] == sum(x["bytes"] for x in d["ledger"] if x["phase"] == "boot")
    assert d["needed_bytes"] == max(x["bytes"] for x in d["ledger"] if x["phase"] != "boot")
    assert "derived" in d["free_source"] and d["ledger_assumptions"]


@pytest.mark.parametrize("model, length", [("glm-5", 202_752), ("deepseek-v4-flash", 1_048_576),
                                           ("glm-5.3-flash", 1_048_576)])
def test_the_models_max_model_len_given_or_not_gives_one_ledger(capsys, model, length):
    base = ["plan", "--model", model, "--query-lens", "8192", "--seq-lens", "65536", "--json"]
    code, plain, _ = run(capsys, *base)
    code, given, _ = run(capsys, *base, "--max-model-len", str(length))
    assert json.loads(plain)["ledger"] == json.loads(given)["ledger"]
    assert json.loads(plain)["workspace_tokens"] == json.loads(given)["workspace_tokens"]


def test_plan_prints_the_ledger_with_its_sources(capsys):
    code, out, _ = run(capsys, "plan", "--model", "glm-5", "--query-lens", "8192", "--seq-lens", "65536",
                       "--free-gib", "0.5")
    assert code == 1
    text = out.split("ledger (modelled; docs/design.md#the-ledger):\n", 1)[1]
    assert re.search(r"boot +1021\.9 MiB +K workspace \(8,110,080 tokens at max_model_len 202,752\)", text)
    assert "source: vllm 0.33.0 vllm/v1/attention/backends/mla/indexer.py:916-928" in text
    assert "<- OOM" in text and out.splitlines()[-1].startswith("OOM: the step allocates 1.02 GiB")


def test_deploy_gives_the_ledger_of_a_run(capsys):
    argv = ["deploy", "--model", "glm-5", "--workload", "16x10240x64", "--speculative-tokens", "1", "--json"]
    code, out, _ = run(capsys, *argv)
    d = json.loads(out)
    assert code == 0 and d["verdict"] == "fits"
    phases = [x["phase"] for x in d["ledger"]]
    assert phases == ["boot", "boot", "boot", "prefill", "decode", "allocator"]
    (decode,) = [x for x in d["ledger"] if x["phase"] == "decode"]
    # at most 16 requests decoding, each with one draft: 32 rows at the model's max_model_len
    assert decode["bytes"] <= decode_logits_bytes(32, 202_752, get_rules("2.8")) and decode["bytes"] % (202_752 * 4) == 0
    assert d["prefill_steps"] > 0 and d["allocator_high_water_bytes"] > 0
    code, out, _ = run(capsys, *argv[:-1], "--free-gib", "0.1")
    assert code == 1 and out.splitlines()[-1].startswith("OOM: ")
    assert "--free-gib 0.1, given" in out


@pytest.mark.parametrize("argv, message", [
    (["--engine", "sglang==0.5.23", "--gpu-memory-utilization", "0.9"], "gpu_memory_utilization is vLLM's"),
    (["--mem-fraction-static", "0.8"], "mem_fraction_static is SGLang's"),
    (["--max-model-len", "4096"], "past max_model_len 4096"),
    (["--engine", "trtllm==1.3.0rc27", "--model", "deepseek-v4-flash"], "give --free-gib"),
])
def test_deploy_refuses_bad_input_in_one_line(capsys, argv, message):
    code, out, err = run(capsys, "deploy", "--workload", "4x8192x64", *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err


def test_given_free_is_named():
    assert given_free(2.63).source == "--free-gib 2.63, given"


# ----------------------------------------------------------------------------- public reports

def test_the_ledgers_public_reports_come_out_as_data_field_says():
    from indexer_lib.study.reported_ledger import ledger_cases, reproduce_ledger

    cases = ledger_cases()
    assert len(cases) >= 6 and len({c["case"] for c in cases}) == len(cases)
    for case in cases:
        r = reproduce_ledger(case)
        assert r["verdict"] == case["status"], (case["case"], r["reported"], r["modelled"])
        assert case["source"].startswith("https://github.com/") and case["note"]
    by = {c["case"]: reproduce_ledger(c) for c in cases}
    # the reporter's build locked 40 x max_model_len entries; vLLM 0.33.0 a tenth of that in pools
    assert by["vllm-55221-kpool-workspace-1m-gb10"]["modelled"] == 40_000_000 * 132 + 2**20
    assert "sizes it at 529,048,576 B" in by["vllm-55221-kpool-workspace-1m-gb10"]["assumptions"][1]
    assert by["vllm-57701-kpool-decode-reservation"]["modelled"] == 3072 * MIB
    # ROCm: the reporter's build reserved max_num_batched_tokens rows of decode logits, 0.33.0 its
    # decode bound; a decode step of 64 requests with 3 drafts takes 256 rows x max_model_len fp32
    rocm = by["vllm-55132-rocm-decode-workspace-32gib"]
    assert rocm["modelled"] == 8192 * 1_048_576 * 4 == 32 * GIB and "asks for 1,073,741,824 B" in rocm["assumptions"][1]
    assert by["vllm-55373-rocm-decode-logits-1.07gb"]["modelled"] == 256 * 1_048_576 * 4
    # the refusals: the release's own reason, before any arithmetic
    for case, why in (("vllm-41525-a800-glm51-refused", "compute capability 8.x"),
                      ("vllm-31480-rtx-pro-6000-dsv32-refused", "compute capability 12.x (rtx-pro-6000"),
                      ("vllm-45317-gb10-glm51-refused", "compute capability 12.x (gb10")):
        assert by[case]["modelled"] == "refused" and why in by[case]["assumptions"][1], case
    amd = by["sglang-37660-mi355x-dsv4-pro-oom"]
    assert (amd["reported"], amd["modelled"], amd["verdict"]) == ("oom", "refused", "not reproduced")
    # the reporter's opt-in FP4 indexer on a build before 0.5.20: the refusal names it, and what is modelled
    assert "was not read at this release" in amd["assumptions"][1]
    assert "--enable-deepseek-v4-fp4-indexer" in amd["assumptions"][1] and "sglang==0.5.23 on gfx950" in amd["assumptions"][1]
    # before SGLang capped its ROCm budget, the second 16,384-row chunk of a 32,768-token prompt
    # asked aiter for 2^31 B in one call, the first at its buffer_store limit
    limit = by["sglang-36960-rocm-aiter-limit-32k"]
    assert limit["modelled"] == 32_768 and "steps of 16,384 rows" in limit["assumptions"][1]
    gpus = {c["gpu"] for c in cases}
    assert {"mi355x", "a100", "rtx-pro-6000", "gb10"} <= gpus


def test_unified_memory_fails_where_pytorch_would_retry():
    """On a GPU that shares the host's memory the driver fails before the allocator's
    free-and-retry; elsewhere the retry rescues blocks of growing sizes."""
    steps = growing_logits_steps()
    assert not run_allocator([], steps, 3 * GIB).failed
    on_unified = run_allocator([], steps, 3 * GIB, retry=False)
    assert on_unified.failed and on_unified.high_water > 3 * GIB


def test_reproduce_prints_each_reports_unit(capsys):
    code, out, _ = run(capsys, "reproduce")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("vllm-", "sglang-"))}
    assert " 116.0K tok " in lines["vllm-58068-kpool-budget-116k"]
    assert re.search(r" oom +oom +reproduced", lines["vllm-55569-gb10-231k"])
    assert re.search(r" 5\.16Gi +5\.16Gi +reproduced", lines["vllm-55222-kpool-workspace-1m"])
    assert re.search(r" 32\.00Gi +32\.00Gi +reproduced", lines["vllm-55132-rocm-decode-workspace-32gib"])
    assert re.search(r" refused +refused +reproduced", lines["vllm-41525-a800-glm51-refused"])
    assert re.search(r" oom +refused +not reproduced", lines["sglang-37660-mi355x-dsv4-pro-oom"])
    assert re.search(r" 32\.8K tok +32\.8K tok +reproduced", lines["sglang-36960-rocm-aiter-limit-32k"])


def test_deploy_what_ifs_say_what_each_frees_and_costs(capsys):
    argv = ["deploy", "--model", "glm-5.3-flash", "--gpu", "gb10", "--tp", "2", "--gpu-memory-utilization", "0.85",
            "--max-model-len", "262144", "--max-num-seqs", "2", "--workload", "1x231000x64", "--what-if", "--json"]
    code, out, _ = run(capsys, *argv)
    d = json.loads(out)
    assert code == 1 and d["verdict"] == "oom" and d["oom_line"] == "caching allocator across the run"
    by = {w["what_if"]: w for w in d["what_ifs"]}
    assert by["as given"]["verdict"] == "oom" and by["as given"]["chunks"] == d["chunks"]
    assert by["expandable_segments on"]["verdict"] == "fits"
    small = by["VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=64"]
    # a smaller budget frees boot memory (the profile run's reservation) and costs logits calls
    assert small["verdict"] == "fits" and small["boot_bytes"] == d["boot_bytes"] - (512 - 64) * MIB
    assert small["chunks"] > d["chunks"]
    (sized,) = [w for name, w in by.items() if name.startswith("K workspace")]
    assert sized["boot_bytes"] < d["boot_bytes"] and sized["chunks"] == d["chunks"]
    # the K workspace given as a setting: 2 requests x 262,144 tokens // 4 entries
    code, out, _ = run(capsys, *argv[:-2], "--workspace-tokens", str(2 * 262_144 // 4), "--json")
    assert json.loads(out)["boot_bytes"] == sized["boot_bytes"]
    assert "workspace_tokens=131072" in json.loads(out)["not_default"]


def test_a_steps_events_free_what_they_allocate():
    assert live_peak([("malloc", "a", 10), ("malloc", "b", 5), ("free", "a"), ("malloc", "c", 7), ("free", "b"),
                      ("free", "c")]) == 15
    with pytest.raises(ValueError, match="never freed, the first 'b'"):
        live_peak([("malloc", "a", 1), ("malloc", "b", 2), ("free", "a")])


def test_auto_derives_the_free_memory_from_the_servers_flags(capsys):
    base = ["auto", "--model", "glm-5", "--workload", "16x10240x64", "--budgets-mb", "256,512"]
    code, out, _ = run(capsys, *base, "--gpu-memory-utilization", "0.95", "--json")
    d = json.loads(out)
    total = get_gpu("h200").capacity_bytes
    assert code == 0 and d["free_bytes"] == total - math.ceil(total * 0.95) + 512 * MIB
    assert d["free_source"].startswith("derived: h200") and "0.95, given" in d["free_source"]
    code, out, _ = run(capsys, *base, "--free-gib", "2.63", "--json")
    assert json.loads(out)["free_source"] == "--free-gib 2.63, given"
    code, out, _ = run(capsys, *base)
    assert code == 0 and "  free memory: derived: h200" in out
    code, out, err = run(capsys, "auto", "--model", "deepseek-v4-flash", "--engine", "trtllm==1.3.0rc27",
                         "--workload", "4x65536x64")
    assert code == 2 and out == "" and "give --free-gib" in err and len(err.strip().splitlines()) == 1


def test_a_single_step_on_unified_memory_has_no_retry_either(capsys):
    """plan and deploy take one allocator rule: on GB10 the driver fails before the retry."""
    argv = ["plan", "--model", "glm-5.3-flash", "--gpu", "gb10", "--query-lens", "2048", "--seq-lens", "200000",
            "--free-gib", "8", "--json"]
    code, out, _ = run(capsys, *argv)
    assert any("shares the host's memory" in a for a in json.loads(out)["ledger_assumptions"])
    code, out, _ = run(capsys, *argv[:4], "h200", *argv[5:])
    assert not any("shares the host's memory" in a for a in json.loads(out)["ledger_assumptions"])


def test_decode_steps_whose_path_is_not_read_are_named_as_left_out(capsys):
    """A run with decode steps on a path whose decode logits are not read (vLLM's DeepSeek-V4 C4
    decode) has no decode line, and its assumptions say those steps are not counted."""
    argv = ["deploy", "--model", "deepseek-v4-flash", "--workload", "2x8192x16", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert not any(line["phase"] == "decode" for line in out["ledger"]) and out["decode_steps"] > 0
    assert (f"the {out['decode_steps']:,} decode steps have no line: vllm==0.33.0's decode path for "
            "deepseek-v4-flash is not read, so their logits are not counted") in out["ledger_assumptions"]
    assert main(["deploy", "--model", "glm-5", "--workload", "2x8192x16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any(line["phase"] == "decode" for line in out["ledger"])
    assert not any("decode steps have no line" in a for a in out["ledger_assumptions"])

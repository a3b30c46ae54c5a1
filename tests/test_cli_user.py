"""What a user trips on at the command line: names as people spell them, a closed pipe, a verdict
against the memory free, the engines' unpadded budget explained, progress on long runs, why
``replay`` and ``plan`` differ, and ``--max-model-len``."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from indexer_lib.checks import BadValue
from indexer_lib.cli.main import main
from indexer_lib.engines import get_engine
from indexer_lib.engines.profiles import normalise_engine
from indexer_lib.presets import GIB, get_model


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- names

@pytest.mark.parametrize("given, name", [
    ("vLLM==v0.16.0", "vllm==0.16.0"), (" VLLM ", "vllm==0.33.0"), ("SGLang==0.5.13.post1", "sglang==0.5.13.post1"),
    ("vllm==0.16.0rc2.dev126", "vllm==0.16.0"), ("vllm==0.16.0.dev3+g1234abc", "vllm==0.16.0"),
    ("sglang==0.5.23rc1", "sglang==0.5.23"),
])
def test_engine_names_as_people_write_them(given, name):
    assert get_engine(given).name == name


def test_a_pre_release_build_is_planned_as_its_release_with_a_note(capsys):
    assert normalise_engine("vllm==0.16.0")[1] is None
    assert "pre-release or development build: planned as vllm==0.16.0" in normalise_engine("vllm==0.16.0rc2.dev126")[1]
    code, out, err = run(capsys, "plan", "--engine", "vllm==0.16.0rc2.dev126", "--model", "GLM-5",
                         "--query-lens", "1024", "--seq-lens", "4096")
    assert code == 0 and out.startswith("engine on vllm==0.16.0, glm-5:")
    assert err.strip() == ("indexer-lab: note: vllm==0.16.0rc2.dev126 is a pre-release or development build: "
                           "planned as vllm==0.16.0")


@pytest.mark.parametrize("given, release, leads_to", [
    ("vllm==0.28.1rc1.dev628", "vllm==0.28.0", "vllm 0.28.1"),  # a nightly of a patch without a profile
    ("vllm==0.28.1.dev5+g1234abc", "vllm==0.28.0", "vllm 0.28.1"),
    ("vllm==0.34.0rc1", "vllm==0.33.0", "vllm 0.34.0"),  # past the latest: the latest is its code
    ("sglang==0.5.24rc1", "sglang==0.5.23", "sglang 0.5.24"),
    ("trtllm==1.4.0rc5.dev3", "trtllm==1.4.0rc4", "trtllm 1.4.0rc5"),
])
def test_a_build_of_a_release_without_a_profile_is_planned_as_the_release_before_it(capsys, given, release, leads_to):
    name, note = normalise_engine(given)
    assert name == release and get_engine(given).name == release
    assert note == (f"{given} is a pre-release or development build of {leads_to}, which has no profile: "
                    f"planned as {release}, the release before it (its code)")
    code, out, err = run(capsys, "plan", "--engine", given, "--model", "glm-5", "--query-lens", "1024",
                         "--seq-lens", "4096")
    assert code == 0 and out.startswith(f"engine on {release}, glm-5:")
    assert err == f"indexer-lab: note: {note}\n"


@pytest.mark.parametrize("given, nearest", [
    ("vllm==0.28.1", "vllm==0.28.0"),  # a final release without a profile: refused, the nearest first
    ("trtllm==1.4.0rc5", "trtllm==1.4.0rc4"),  # TensorRT-LLM's release candidates are releases
    ("vllm==0.10.0rc1", "vllm==0.11.0"),  # a build before the first known release: nothing is its code
])
def test_an_unknown_release_is_refused_with_the_nearest(given, nearest):
    assert normalise_engine(given) == (given, None)
    with pytest.raises(BadValue, match=rf"unknown engine release '{re.escape(given)}': did you mean {re.escape(nearest)}"):
        get_engine(given)


@pytest.mark.parametrize("argv, message", [
    (["--engine", "vlm==0.33.0"], "unknown engine release 'vlm==0.33.0': did you mean vllm==0.33.0, "),
    (["--engine", "vlm"], "unknown engine release 'vlm': did you mean vllm?"),
    (["--engine", "vllm==0.16.5"], "did you mean vllm==0.16.0, "),  # the release at or before it first
    (["--engine", "vllm==0.99.0"], "did you mean vllm==0.33.0, "),
    (["--engine", "sglang==0.5.2"], "did you mean sglang==0.5.3, "),
    (["--strategy", "casual"], "unknown strategy 'casual': did you mean causal?"),
    (["--gpu", "h300"], "unknown GPU 'h300': did you mean h200, "),
    (["--model", "glm5"], "unknown model 'glm5': did you mean glm-5, "),
])
def test_an_unknown_name_suggests_the_nearest(argv, message, capsys):
    """One short line, the nearest name first, at most three of them."""
    code, out, err = run(capsys, "plan", "--query-lens", "1", "--seq-lens", "1", *argv)
    line = err.strip()
    assert code == 2 and out == "" and message in line and "\n" not in line and len(line) < 200, line
    assert line.count(",") + line.count(" or ") <= 2  # at most three names


@pytest.mark.parametrize("argv, known", [
    (["--engine", "foo==1"], "one of vllm==0.11.0-0.33.0, sglang==0.5.3-0.5.23, trtllm==1.3.0rc15.post1-1.4.0rc4"),
    (["--strategy", "bogus"], "one of n-only, vllm, per-request, causal, kv-split, fixed-shape, engine"),
    (["--gpu", "tpu"], "one of a100, b200, b300, gb10, gb200, gb300, h100, h20, h200, l40s, mi300x, mi325x"),
    (["--model", "llama"], "one of deepseek-v3.2, "),
])
def test_an_unknown_name_with_nothing_close_lists_the_known_ones_briefly(argv, known, capsys):
    code, _, err = run(capsys, "plan", "--query-lens", "1", "--seq-lens", "1", *argv)
    assert code == 2 and known in err and len(err.strip().splitlines()) == 1 and len(err) < 250, err


def test_model_names_ignore_case():
    assert get_model(" GLM-5 ").name == "glm-5"


# ----------------------------------------------------------------------------- a closed pipe

def test_a_closed_pipe_ends_quietly():
    # 16,384 chunks: far more output than a pipe buffers, so the writer meets the closed pipe
    cmd = (f"set -o pipefail; {sys.executable} -m indexer_lib plan --query-lens 65536 --seq-lens 65536 "
           "--strategy vllm --budget-mb 1 | head -1")
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout.startswith("vllm on vllm==0.33.0, glm-5: 16384 chunks")


# ----------------------------------------------------------------------------- verdicts

def test_plan_gives_a_verdict_against_the_memory_free(capsys):
    step = ["--model", "glm-5", "--query-lens", "8192", "--seq-lens", "65536", "--engine", "vllm==0.19.0"]
    code, out, _ = run(capsys, "plan", *step, "--json")
    plain = json.loads(out)
    assert code == 0 and "verdict" not in plain  # no --free-gib, no verdict
    assert plain["largest_logits_bytes"] == max(c["logits_bytes"] for c in plain["chunks"])
    for free, word, status in ((0.5, "oom", 1), (2.0, "fits", 0)):  # the verdict is the exit status too
        code, out, _ = run(capsys, "plan", *step, "--free-gib", str(free), "--json")
        d = json.loads(out)
        assert code == status
        # what must fit: the transient peak (the step's allocations beyond its persistent buffers),
        # and the caching allocator's segments for them
        lines = {line["phase"]: line["bytes"] for line in d["ledger"] if line["phase"] != "boot"}
        assert lines["prefill"] == d["peak_transient_bytes"] < d["peak_bytes"]
        assert d["verdict"] == word and d["needed_bytes"] == max(lines.values()) >= d["peak_transient_bytes"]
        assert d["oom_line"] == (None if word == "fits" else "prefill step's transient peak")
    code, out, _ = run(capsys, "plan", *step, "--free-gib", "0.5")
    assert code == 1
    assert out.splitlines()[-1].startswith("OOM: the step allocates 1.02 GiB beyond the buffers it already holds")


def test_sglangs_stale_cached_budget_from_the_command_line(capsys):
    """sgl-project/sglang#35759: a budget measured at a first reading (here 20 GiB free on a
    178.35 GiB GPU at mem_fraction_static 0.92: 2.85 GiB) lets one ~2.6 GiB chunk through when
    only 2.20 GiB are free; a fresh reading (0.44 GiB) would have split the step."""
    step = ["plan", "--engine", "sglang==0.5.23", "--model", "deepseek-v3.2", "--gpu", "b200",
            "--mem-fraction-static", "0.92", "--free-gib", "2.20", "--query-lens", "21100", "--seq-lens", "32768",
            "--json"]
    code, out, _ = run(capsys, *step, "--budget-free-gib", "20")
    stale = json.loads(out)
    assert code == 1 and stale["verdict"] == "oom" and stale["num_chunks"] == 1
    assert round(stale["budget_bytes"] / GIB, 2) == 2.85 and 2.5 * GIB < stale["largest_logits_bytes"] < 2.85 * GIB
    code, out, _ = run(capsys, *step, "--budget-free-gib", "2.20")
    fresh = json.loads(out)
    assert fresh["verdict"] == "fits" and round(fresh["budget_bytes"] / GIB, 2) == 0.44 and fresh["num_chunks"] > 1
    code, out, _ = run(capsys, *step[:-1])  # --budget-free-gib defaults to --free-gib
    assert "fits: the step allocates" in out


def test_run_gives_the_verdict_and_shows_progress(capsys):
    code, out, err = run(capsys, "run", "--device", "cpu", "--model", "glm-5", "--query-lens", "256",
                         "--seq-lens", "2048", "--strategy", "vllm", "--budget-mb", "0.5", "--free-gib", "1",
                         "--topk", "64")
    assert code == 0 and "fits: the step allocates" in out.splitlines()[-1]
    assert "logits of 4 chunks on cpu" in err and "chunk 4/4" in err  # the progress bar, on stderr


# ----------------------------------------------------------------------------- explained numbers

def test_plan_explains_the_engines_unpadded_budget(capsys):
    code, out, _ = run(capsys, "plan", "--engine", "vllm==0.19.0", "--model", "glm-5", "--query-lens", "8192",
                       "--seq-lens", "65536")
    lines = out.splitlines()
    assert code == 0 and "budget 512.0 MiB (unpadded, M x N x 4; DeepGEMM 2.3)" in lines[0]
    note = lines.index("ledger (modelled; docs/design.md#the-ledger):") - 1
    assert all(line.endswith("-") for line in lines[4:note])  # none over the budget as the engine counts it
    assert lines[note].startswith("4 chunk(s) allocate more than the budget (up to 514.0 MiB) and are not over it")
    code, out, _ = run(capsys, "plan", "--engine", "vllm==0.15.1", "--model", "glm-5", "--query-lens", "1024",
                       "--seq-lens", "4096")
    assert "budget none (DeepGEMM 2.1)" in out.splitlines()[0] and "unpadded" not in out


def test_plan_takes_the_servers_max_model_len(capsys):
    base = ["plan", "--model", "glm-5", "--query-lens", "4096", "--seq-lens", "8192", "--json"]
    code, out, _ = run(capsys, *base)
    assert json.loads(out)["workspace_tokens"] == 40 * 202_752
    code, out, _ = run(capsys, *base, "--max-model-len", "16384")
    assert code == 0 and json.loads(out)["workspace_tokens"] == 40 * 16384
    code, _, err = run(capsys, *base, "--max-model-len", "4096")
    assert code == 2 and "--seq-lens 8192 > --max-model-len 4096" in err
    code, _, err = run(capsys, *base, "--max-model-len", "300000")
    assert code == 2 and "above glm-5's max_model_len 202752" in err


# ----------------------------------------------------------------------------- reproduce

def test_reproduce_lists_every_report_from_its_reporters_settings(capsys):
    from indexer_lib.study.reported import published_cases

    code, out, _ = run(capsys, "reproduce", "--json")
    reports = json.loads(out)
    assert code == 0  # every report comes out as data/field/ says it does
    assert {r["case"] for r in reports} >= {c["case"] for c in published_cases()} | {"sglang-stale-budget"}
    for r in reports:
        assert {"source", "reported_bytes", "modelled_bytes", "verdict", "assumptions"} <= r.keys()
        assert r["verdict"] == r["expected"] and r["source"]
    by = {r["case"]: r for r in reports}
    assert by["prompt-64k-one-step"]["modelled_bytes"] == 16 * GIB == by["prompt-64k-one-step"]["reported_bytes"]
    seed = by["glm5-c64-isl10240"]
    assert seed["verdict"] == "not reproduced" and "the report names one" in seed["assumptions"][0]
    assert by["sglang-stale-budget"]["modelled_bytes"] > by["sglang-stale-budget"]["reported_bytes"]
    code, out, _ = run(capsys, "reproduce")
    assert code == 0 and out.startswith(f"{len(reports)} public reports, each from its reporter's own settings")


# ----------------------------------------------------------------------------- exit statuses

STEP = ["--model", "glm-5", "--query-lens", "8192", "--seq-lens", "65536", "--engine", "vllm==0.19.0"]
SMALL_MIX = ["--workload", "4x2048x8", "--budgets-mb", "512", "--data-dir", "/nonexistent"]


@pytest.mark.parametrize("argv, status", [
    (["plan", *STEP], 0),  # no verdict asked for
    (["plan", *STEP, "--free-gib", "2"], 0),
    (["plan", *STEP, "--free-gib", "0.5"], 1),
    (["plan", *STEP, "--free-gib", "0.5", "--json"], 1),
    (["time", *STEP, "--free-gib", "2"], 0),
    (["time", *STEP, "--free-gib", "0.5"], 1),
    (["run", *STEP, "--device", "meta", "--free-gib", "2"], 0),
    (["run", *STEP, "--device", "meta", "--free-gib", "0.5"], 1),
    (["auto", "--free-gib", "2.63", *SMALL_MIX], 0),
    (["auto", "--free-gib", "0.01", *SMALL_MIX], 1),  # nothing fits, not even the engine's knob
    (["auto", "--free-gib", "0.01", *SMALL_MIX, "--strategies", "vllm,causal"], 1),
    (["auto", "--free-gib", "0.01", *SMALL_MIX, "--json"], 1),
])
def test_the_exit_status_is_the_verdict(argv, status, capsys):
    """0: it fits (or no verdict was asked for), 1: OOM or nothing fits, said on stdout."""
    code, out, err = run(capsys, *argv)
    assert code == status, err
    assert out.strip() and "Traceback" not in err
    if status == 1 and "--json" not in argv:
        assert "\nOOM: " in out or "\nnone: " in out


def test_auto_with_nothing_fitting_says_so_under_its_header(capsys):
    code, out, err = run(capsys, "auto", "--free-gib", "0.01", *SMALL_MIX)
    lines = out.splitlines()
    assert code == 1 and err == ""
    assert lines[0] == f"glm-5 on {get_engine('vllm').name} (h200), 0.01 GiB free, 1 workload (modelled):"
    assert lines[1].startswith("none: free memory 0.01 GiB: no strategy and budget fits")
    code, out, _ = run(capsys, "auto", "--free-gib", "0.01", *SMALL_MIX, "--json")
    d = json.loads(out)
    assert d["deploy"] is None and d["why_none"] == lines[1] and d["fitting"] == 0 and d["model"] == "glm-5"


@pytest.mark.parametrize("argv", [
    ["plan", "--query-lens", "1", "--seq-lens", "1", "--model", "llama"],
    ["time", "--query-lens", "1", "--seq-lens", "1", "--gpu", "h300"],
    ["run", "--query-lens", "1", "--seq-lens", "1", "--strategy", "casual"],
    ["frontier", "--engine", "vlm==0.33.0", "--out", "x.csv"],
    ["auto", "--free-gib", "0", "--workload", "4x2048x8"],
    ["replay", "--query-lens", "1"],
    ["reproduce", "--bogus"],
])
def test_bad_input_is_exit_status_2_in_every_subcommand(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_an_interrupt_is_130_and_a_crash_is_not_a_verdict(capsys, monkeypatch):
    from indexer_lib.cli import plan as plan_command

    def interrupted(args):
        raise KeyboardInterrupt

    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setattr(plan_command, "cmd_plan", interrupted)
    code, _, err = run(capsys, "plan", "--query-lens", "1", "--seq-lens", "1")
    assert code == 130 and err.strip() == "indexer-lab plan: interrupted"
    monkeypatch.setattr(plan_command, "cmd_plan", broken)
    code, _, err = run(capsys, "plan", "--query-lens", "1", "--seq-lens", "1")
    assert code == 3 and "Traceback" in err and "KeyError: 'a bug'" in err
    assert err.strip().endswith("indexer-lab plan: failed (the traceback above says where)")


# ----------------------------------------------------------------------------- help

def subcommand_parsers() -> dict:
    import argparse

    from indexer_lib.cli.main import build_parser

    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_option_of_every_subcommand_says_what_it_is_and_its_default():
    import argparse

    commands = subcommand_parsers()
    assert set(commands) == {"plan", "time", "frontier", "run", "auto", "deploy", "replay", "reproduce", "app"}
    for name, parser in commands.items():
        for a in parser._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            assert a.help and a.help.strip(), (name, a.option_strings)
            switch = a.nargs == 0  # --json, --no-padding, --async-scheduling / --no-async-scheduling
            if a.default is not None and not switch:
                assert "default" in a.help, (name, a.option_strings, a.help)


def test_every_subcommand_plans_the_same_model_by_default():
    from indexer_lib.presets import DEFAULT_MODEL
    from indexer_lib.sweep.grid import Grid

    defaults = {name: p.get_default("model") for name, p in subcommand_parsers().items() if name not in ("reproduce", "app")}
    assert set(defaults.values()) == {DEFAULT_MODEL} == {Grid.of().model} == {"glm-5"}, defaults


@pytest.mark.parametrize("argv", [[], ["plan"], ["time"], ["frontier"], ["run"], ["auto"], ["deploy"], ["replay"], ["reproduce"], ["app"]])
def test_help_states_the_exit_statuses(argv, capsys):
    code, out, _ = run(capsys, *argv, "--help")
    assert code == 0 and "\nexit status:\n" in out
    for status in (0, 1, 2, 3, 130):
        assert f"\n  {status:<5}" in out, status
    assert "\n  130  interrupted (Ctrl-C)" in out


def test_the_top_level_help_is_written_for_users(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "``" not in out  # not a developer docstring
    words = " ".join(out.split())
    assert "run out of GPU memory in prefill" in words and "README.md" in words
    for name in subcommand_parsers():
        assert f"\n    {name} " in out or f"\n    {name}\n" in out, name  # each with its line


@pytest.mark.parametrize("argv", [
    ["plan", "--query-lens", "256", "--seq-lens", "1024"],
    ["time", "--query-lens", "256", "--seq-lens", "1024"],
    ["run", "--query-lens", "256", "--seq-lens", "1024", "--device", "meta"],
    ["auto", "--free-gib", "2.63", *SMALL_MIX],
    ["frontier", "--concurrency", "1", "--isl", "2048", "--osl", "1", "--strategy", "vllm", "--budget-mb", "512"],
])
def test_the_first_line_names_the_model(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for model in ("glm-5", "deepseek-v3.2"):
        table = ["--out", f"{model}.csv"] if argv[0] == "frontier" else []  # each its own table
        code, out, err = run(capsys, *argv, *table, *(["--model", model] if model != "glm-5" else []))
        first = out.splitlines()[0]
        assert code == 0 and re.search(rf"(^|[ ,]){re.escape(model)}[ ,:]", first), (err, first)

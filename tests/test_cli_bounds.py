"""Every size, length and count is checked before any work: one line naming the value and the
rule (exit 2) within seconds, and the bounds themselves hold (a lower bound is never above what
the simulator runs, the budget a refusal suggests plans within the bound)."""
import json
import time

import pytest
from hypothesis import given, settings, strategies as st

from indexer_lib.cli import main
from indexer_lib.cli.common import MAX_PLAN_CHUNKS
from indexer_lib.presets import get_gpu
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, scheduled_steps
from indexer_lib.workload.simulator import least_steps


def run(capsys, *args):
    start = time.perf_counter()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err, time.perf_counter() - start


STEP = ("--query-lens", "100", "--seq-lens", "1000")


@pytest.mark.parametrize("args, message", [
    (("plan", "--query-lens", "1000000000000", "--seq-lens", "1000000000000"),
     "--seq-lens 1000000000000: past glm-5's max_model_len 202,752"),
    (("plan", "--model", "deepseek-v3.2", "--query-lens", "100", "--seq-lens", "200000"),
     "--seq-lens 200000: past deepseek-v3.2's max_model_len 163,840"),
    (("plan", "--model", "glm-5", "--query-lens", "100", "--seq-lens", "10000000"),
     "--seq-lens 10000000: past glm-5's max_model_len 202,752"),
    (("time", "--query-lens", "100", "--seq-lens", "300000"), "past glm-5's max_model_len"),
    (("run", "--device", "meta", "--query-lens", "100", "--seq-lens", "300000"), "past glm-5's max_model_len"),
    (("plan", *STEP, "--free-gib", "1000"), "--free-gib 1000: more than the h200 holds (139.8 GiB)"),
    (("plan", *STEP, "--gpu", "h100", "--free-gib", "100"), "--free-gib 100: more than the h100 holds"),
    (("time", *STEP, "--free-gib", "1000"), "--free-gib 1000: more than the h200 holds"),
    (("plan", *STEP, "--budget-mb", "1e30"), "--budget-mb 1e+30: more than the h200 holds"),
    (("plan", *STEP, "--budget-bytes", str(1 << 62)), f"--budget-bytes {1 << 62}: more than the h200 holds"),
    (("plan", "--query-lens", "163840", "--seq-lens", "163840", "--budget-bytes", "1"),
     "budget 1 byte: the step's 100.00 GiB of logits would take at least 163,840 chunks, more than 32,768 planned here; give a budget "
     "of at least 3.13 MiB"),
    (("plan", "--query-lens", ",".join(["1"] * 70_000), "--seq-lens", ",".join(["2"] * 70_000)),
     "--seq-lens: 70,000 requests in one step, more than 65,536"),
    (("plan", *STEP, "--budget-free-gib", "3"), "--budget-free-gib: an SGLang server's setting, which vllm==0.33.0"),
    (("plan", *STEP, "--mem-fraction-static", "0.5"), "--mem-fraction-static: an SGLang server's setting"),
    (("plan", *STEP, "--engine", "sglang", "--strategy", "vllm", "--budget-free-gib", "3"),
     "SGLang's own chunker reads it (--strategy engine); vllm reads --budget-mb"),
    (("run", *STEP, "--backend", "foo"), "invalid choice: 'foo'"),
    (("auto", "--workload", "16x10240x512", "--free-gib", "100000"), "--free-gib 100000: more than the h200 holds"),
    (("auto", "--workload", "16x10240x512", "--free-gib", "4", "--budgets-mb", "1e9"), "--budgets-mb 1e+09: more than"),
    (("frontier", "--free-gib", "1000", "--out", "unused.csv"), "free_gib 1000: more than the h200 holds"),
    (("frontier", "--budget-mb", "1e30", "--out", "unused.csv"), "budget_mb 1e+30: more than the h200 holds"),
    (("frontier", "--concurrency", "65536", "--isl", "202752", "--osl", "1048576", "--out", "unused.csv"),
     "at least 3,244,032 engine steps, more than the 500,000 one schedule is simulated for"),
    (("replay", "--query-lens", "100", "--seq-lens", "10000000"), "--seq-lens 10000000: past glm-5's max_model_len"),
    (("replay", "--query-lens", "100", "--seq-lens", "1000", "--budget-mb", "0"), "--budget-mb 0: must be"),
    (("replay", "--query-lens", "100", "--seq-lens", "1000", "--budget-mb", "1000000"),
     "--budget-mb 1000000: more than the h200 holds"),
    (("replay", "--query-lens", "2000", "--seq-lens", "1000"), "query_len 2000 > seq_len 1000"),
])
def test_bad_sizes_are_refused_before_any_work_in_one_line(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code, out, err, seconds = run(capsys, *args)
    assert code == 2 and out == "" and message in err, err
    assert err.count("\n") == 1 and seconds < 5
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_budget_below_one_rows_logits_is_said_and_the_suggested_budget_is_taken(capsys):
    code, out, _, _ = run(capsys, "plan", "--query-lens", "8192", "--seq-lens", "8192", "--budget-bytes", "1")
    assert code == 0 and "budget 1 byte (" in out
    assert "over budget: 8,192 of 8,192 chunks hold more than the budget allows" in out
    code, _, err, _ = run(capsys, "plan", "--query-lens", "163840", "--seq-lens", "163840", "--budget-bytes", "1")
    suggested = err.rsplit("at least ", 1)[1].split(" MiB")[0]
    code, out, _, _ = run(capsys, "plan", "--query-lens", "163840", "--seq-lens", "163840",
                          "--strategy", "vllm", "--budget-mb", suggested, "--json")
    # taken; the bound counts unpadded logits, DeepGEMM's padding adds rows
    assert code == 0 and json.loads(out)["num_chunks"] <= 2 * MAX_PLAN_CHUNKS


def test_time_gives_the_verdict_its_free_gib_asks_for(capsys):
    code, out, _, _ = run(capsys, "time", *STEP, "--free-gib", "0.05")
    assert code == 0 and out.splitlines()[-1].startswith("fits: the step allocates")
    # a few MiB of transients, but the caching allocator asks the driver for a 20 MiB segment
    code, out, _, _ = run(capsys, "time", *STEP, "--free-gib", "0.01")
    assert code == 1 and out.splitlines()[-1].startswith("OOM: the step allocates 22.0 MiB")
    code, out, _, _ = run(capsys, "time", "--query-lens", "8192", "--seq-lens", "100000", "--free-gib", "0.5")
    assert out.splitlines()[-1].startswith("OOM: the step allocates")
    code, out, _, _ = run(capsys, "time", *STEP, "--free-gib", "0.05", "--json")
    assert json.loads(out)["verdict"] == "fits"


def test_sglangs_options_are_read_on_its_own_chunker(capsys):
    args = ("plan", *STEP, "--engine", "sglang", "--free-gib", "100", "--json")  # the cap binds
    _, default, _, _ = run(capsys, *args)
    _, lower, _, _ = run(capsys, *args, "--mem-fraction-static", "0.95")
    assert json.loads(lower)["budget_bytes"] < json.loads(default)["budget_bytes"]  # its cap moved


def test_a_size_up_to_the_gpus_capacity_is_taken():
    capacity = get_gpu("h200").capacity_bytes
    code = main(["plan", *STEP, "--budget-bytes", str(capacity), "--free-gib", str(capacity / 2**30), "--json"])
    assert code == 0


@settings(max_examples=60, deadline=None)
@given(concurrency=st.integers(1, 12), isl=st.integers(1, 3000), osl=st.integers(1, 40),
       prefix=st.integers(0, 500), tokens=st.integers(16, 4096))
def test_the_fewest_steps_are_never_more_than_the_simulator_runs(concurrency, isl, osl, prefix, tokens):
    workload = ClosedLoopWorkload(concurrency, max(isl, prefix), osl, prefix)
    config = SchedulerConfig(max_num_batched_tokens=tokens)
    assert least_steps(workload, config) <= sum(1 for _ in scheduled_steps(workload, config))


@pytest.mark.parametrize("model, engine, rows, tokens", [
    ("deepseek-v4-flash", "vllm==0.33.0", 8192, 1_048_576),  # K compressed 4 tokens to an entry
    ("glm-5", "vllm==0.33.0", 8192, 65536),
    ("glm-5", "vllm==0.15.1", 4096, 32768),
])
def test_a_max_model_len_given_equal_to_the_models_plans_the_same_workspace(capsys, model, engine, rows, tokens):
    from indexer_lib.presets import get_model

    args = ["plan", "--model", model, "--engine", engine, "--query-lens", str(rows), "--seq-lens", str(tokens)]
    _, default, _, _ = run(capsys, *args, "--json")
    longest = str(get_model(model).max_model_len)
    _, given, _, _ = run(capsys, *args, "--max-model-len", longest, "--json")
    default, given = json.loads(default), json.loads(given)
    assert default["workspace_tokens"] == given["workspace_tokens"] and default["peak_bytes"] == given["peak_bytes"]
    small = args[:5] + ["--query-lens", "100", "--seq-lens", "1000"]  # the workspace is the server's, not the step's
    _, half, _, _ = run(capsys, *small, "--max-model-len", str(get_model(model).max_model_len // 2), "--json")
    assert json.loads(half)["workspace_tokens"] == default["workspace_tokens"] // 2  # the rule scales with it
    _, text, _, _ = run(capsys, *args)
    ratio = get_model(model).kv_ratio
    assert f"K workspace {default['workspace_tokens']:,} {'entries' if ratio != 1 else 'tokens'}" in text.splitlines()[2]

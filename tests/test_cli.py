"""The indexer-lab command line: JSON plans, the frontier table, one-line errors."""
import json
import subprocess
import sys

import pytest

from indexer_lib.cli import main
from indexer_lib.plan import STRATEGIES


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_has_the_documented_fields(capsys):
    code, out, err = run(capsys, "plan", "--strategy", "vllm", "--budget-mb",
                         "0.00095367431640625", "--workspace-tokens", "1000",
                         "--query-lens", "10,10,10", "--seq-lens", "100,100,100",
                         "--no-padding", "--json")
    assert code == 0 and err == ""
    plan = json.loads(out)
    assert plan["budget_bytes"] == 1000
    assert plan["num_chunks"] == 15 == len(plan["chunks"])
    assert {"strategy", "budget_bytes", "num_chunks", "peak_bytes", "chunks"} <= plan.keys()
    first = plan["chunks"][0]
    assert {"requests", "rows", "token_start", "token_end", "kv_tokens", "logits_cols",
            "logits_bytes", "gather", "over_budget"} <= first.keys()
    assert first["requests"] == [0, 1] and first["rows"] == [0, 2]
    assert plan["chunks"][1]["gather"] is False
    assert plan["chunks"][-1]["token_end"] == 30


def test_budget_bytes_equals_fractional_budget_mb(capsys):
    args = ["plan", "--query-lens", "10,10", "--seq-lens", "100,100", "--json"]
    _, by_mb, _ = run(capsys, *args, "--budget-mb", "0.00095367431640625")
    _, by_bytes, _ = run(capsys, *args, "--budget-bytes", "1000")
    assert json.loads(by_mb) == json.loads(by_bytes)


def test_plan_table_lists_every_chunk(capsys):
    code, out, _ = run(capsys, "plan", "--strategy", "causal", "--budget-mb", "512", "--model", "deepseek-v3.2",
                       "--query-lens", "65536", "--seq-lens", "65536")
    assert code == 0
    # the default engine: the latest vLLM; the first line names the model
    assert out.startswith("causal on vllm==0.33.0, deepseek-v3.2: 18 chunks")
    lines = out.strip().splitlines()
    assert lines[1].startswith("deepseek-v3.2: layer kind dsa (64 heads x 128, top-2048) on 61 of 61 layers")
    assert lines[2] == "persistent 1.31 GiB: K workspace 6,553,600 tokens, 825.0 MiB; top-k output 512.0 MiB"
    assert lines.index("ledger (modelled; docs/design.md#the-ledger):") == 4 + 18  # then the ledger


@pytest.mark.parametrize("args, message", [
    (["--strategy", "bogus"], "unknown strategy 'bogus'"),
    (["--model", "llama"], "unknown model 'llama'"),
    (["--deepgemm-version", "9"], "unknown DeepGEMM version '9'"),
    (["--budget-mb", "0"], "budget 0.0 MiB: must be > 0"),
    (["--budget-mb", "-1"], "budget -1.0 MiB"),
    (["--budget-bytes", "0"], "--budget-bytes 0"),
    (["--workspace-tokens", "0"], "workspace_tokens 0"),
    (["--query-lens", "5", "--seq-lens", "4"], "query_len 5 > seq_len 4"),
    (["--query-lens", "1,2", "--seq-lens", "4"], "2 query lengths and 1 sequence lengths"),
    (["--query-lens", "-1", "--seq-lens", "4"], "query_len -1"),
    (["--query-lens", "x", "--seq-lens", "4"], "'x' is not a whole number"),
    (["--query-lens", "1.5", "--seq-lens", "4"], "'1.5' is not a whole number"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    base = {"--query-lens": "1", "--seq-lens": "4"}
    merged = list(args)
    for k, v in base.items():
        if k not in args:
            merged += [k, v]
    code, out, err = run(capsys, "plan", *merged)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert message in err
    assert "Traceback" not in err


def test_budget_below_one_row_is_flagged_not_an_error(capsys):
    code, out, _ = run(capsys, "plan", "--budget-bytes", "1", "--query-lens", "3",
                       "--seq-lens", "10", "--json")
    plan = json.loads(out)
    assert code == 0 and plan["num_chunks"] == 3
    assert all(c["over_budget"] for c in plan["chunks"])


def test_frontier_writes_a_tidy_table(tmp_path, capsys):
    import pandas as pd

    out = tmp_path / "f.parquet"
    # on a release from before the logits budget (DeepGEMM 2.3, full [M, N] logits), with a
    # 256-token long_prefill_token_threshold (the release's default is 0): named in every row
    code, stdout, _ = run(capsys, "frontier", "--concurrency", "8,64", "--isl", "10240",
                          "--budget-mb", "256,512", "--strategy", "n-only,vllm",
                          "--free-gib", "2.63,20", "--osl", "4", "--out", str(out),
                          "--engine", "vllm==0.18.1", "--long-prefill-token-threshold", "256")
    assert code == 0
    table = pd.read_parquet(out)
    assert set(table["not_default"]) == {"long_prefill_token_threshold=256 (default 0)"}
    assert "not the release default: long_prefill_token_threshold=256 (default 0)" in stdout
    assert len(table) == 2 * 1 * (1 + 2) * 2  # n-only reads no budget: one row per workload and free GiB
    assert table[table.strategy == "n-only"]["budget_mb"].isna().all()
    assert set(table["mode"]) == {"model"} and set(table["engine"]) == {"vllm==0.18.1"}
    no_budget = table[(table.strategy == "n-only") & (table.concurrency == 64)
                      & (table.free_gib == 2.63)]
    assert no_budget["oom"].all()  # the reported OOM: ~10 GiB of logits with 2.63 GiB free
    # N ~ 327K (steps of equal padded logits differ only by their metadata and temporaries)
    assert (no_budget["worst_kv_tokens"] >= 327_000).all()
    # the one allocation a "Tried to allocate" message names: 8,192 x ~327K x 4 bytes
    assert no_budget["largest_logits_bytes"].between(9.9 * 2**30, 10.1 * 2**30).all()
    budgeted = table[(table.strategy == "vllm") & (table.budget_mb == 512)]
    assert not budgeted["oom"].any()
    assert "largest ISL without OOM" in stdout and str(out) in stdout
    # the default engine is the latest vLLM: its compressed logits (DeepGEMM 2.8) are as wide
    # as a chunk's longest request, so the same step without a budget fits
    other = tmp_path / "latest.parquet"  # another grid: the first table is not its to overwrite
    code, stdout, _ = run(capsys, "frontier", "--concurrency", "64", "--isl", "10240",
                          "--strategy", "n-only", "--free-gib", "2.63", "--osl", "4", "--out", str(other))
    latest = pd.read_parquet(other)
    assert code == 0 and set(latest["engine"]) == {"vllm==0.33.0"} and set(latest["deepgemm_version"]) == {"2.8"}
    assert not latest["oom"].any() and (latest["peak_transient_gib"] < 1).all()
    # no scheduler setting given: the release's own defaults, and nothing named
    assert (latest["long_prefill_token_threshold"] == 0).all() and latest["async_scheduling"].all()
    assert (latest["max_num_seqs"] == 1024).all() and set(latest["not_default"].fillna("")) == {""}
    assert "scheduler: the release defaults" in stdout


@pytest.mark.parametrize("model, longest", [("glm-5", 202_752), ("deepseek-v3.2", 163_840)])
def test_frontier_default_isl_axis_reaches_the_models_max_model_len(model, longest, tmp_path, capsys):
    import pandas as pd

    out = tmp_path / "f.csv"
    code, stdout, _ = run(capsys, "frontier", "--model", model, "--concurrency", "1", "--budget-mb", "64",
                          "--strategy", "vllm", "--osl", "1", "--out", str(out))
    table = pd.read_csv(out)
    assert code == 0
    assert sorted(table["isl"]) == [2048, 4096, 8192, 10240, 16384, 32768, 65536, 131072, longest]
    # two prompts of max_model_len, one after the other, in 8K-token steps: more chunks than at 2K
    chunks = table.set_index("isl")["total_chunks"]
    assert chunks[longest] > chunks[2048]


def test_frontier_bad_value_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "frontier", "--concurrency", "0", "--out", str(tmp_path / "x.csv"))
    assert code == 2 and "concurrency 0" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "frontier", "--out", str(tmp_path / "x.txt"), "--isl", "64",
                       "--concurrency", "1")
    assert code == 2 and "must end in .csv or .parquet" in err


def test_console_script_and_module_entry_point():
    result = subprocess.run([sys.executable, "-m", "indexer_lib", "plan", "--strategy", "x",
                             "--query-lens", "1", "--seq-lens", "1"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "indexer-lab plan: error: unknown strategy 'x': must be one of "
        + ", ".join(STRATEGIES))
    assert "n-only, vllm, per-request, causal" in result.stderr

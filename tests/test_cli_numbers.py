"""Every numeric option of every subcommand, given a non-finite, negative, zero or huge
value: it runs (exit status 0, or 1 with its negative verdict), or it ends with one line naming
the option or the value, exit status 2; never a traceback, never a hang."""
from __future__ import annotations

import pytest

from indexer_lib.cli import main

BASE = {
    "plan": ["plan", "--query-lens", "256,256", "--seq-lens", "10240,10240"],
    "run": ["run", "--query-lens", "4,4", "--seq-lens", "3000,3000", "--device", "meta"],
    "frontier": ["frontier", "--concurrency", "4", "--isl", "2048", "--budget-mb", "512", "--strategy", "vllm"],
    "auto": ["auto", "--free-gib", "2.63", "--workload", "4x2048x8", "--budgets-mb", "512"],
    "replay": ["replay", "--query-lens", "256", "--seq-lens", "1024"],
}
OPTIONS = {
    "plan": ["--free-gib", "--mem-fraction-static", "--budget-mb", "--budget-bytes", "--workspace-tokens"],
    "run": ["--free-gib", "--mem-fraction-static", "--budget-mb", "--budget-bytes", "--workspace-tokens",
            "--seed", "--topk", "--topk-rows"],
    "frontier": ["--concurrency", "--isl", "--osl", "--budget-mb", "--free-gib", "--shared-prefix",
                 "--max-num-batched-tokens", "--max-num-seqs", "--long-prefill-token-threshold", "--workers"],
    "auto": ["--free-gib", "--budgets-mb", "--max-num-batched-tokens", "--max-num-seqs",
             "--long-prefill-token-threshold", "--mem-fraction-static"],
    "replay": ["--budget-mb", "--max-num-batched-tokens"],
}
VALUES = ["nan", "inf", "-inf", "-1", "0", "1e30", str(10**18)]
CASES = [(cmd, opt, v) for cmd, opts in OPTIONS.items() for opt in opts for v in VALUES]


@pytest.mark.parametrize("command, option, value", CASES)
def test_a_numeric_option_runs_or_says_what_is_wrong_in_one_line(command, option, value, tmp_path,
                                                                 monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = [a for a in BASE[command]]
    if option in argv:  # replace the base value
        i = argv.index(option)
        del argv[i:i + 2]
    argv.append(f"{option}={value}")  # '=': argparse reads -inf as a value, not an option
    if command in ("plan", "run") and option in ("--free-gib", "--mem-fraction-static"):
        argv += ["--engine", "sglang==0.5.23"]  # the release that reads them
    if command == "frontier":
        argv += ["--out", str(tmp_path / "f.csv")]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), (argv, err)
    if code == 1:  # the step runs out of memory, or no setting fits: said on stdout
        assert "OOM" in out or "\nnone: " in out, (argv, out)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("indexer-lab"), err
        words = (option, option.lstrip("-").replace("-", "_"), option.lstrip("-").replace("-", " "), value)
        assert any(w in lines[0] for w in words), lines[0]
    else:
        assert value not in ("nan", "inf", "-inf"), f"{option}={value} was accepted"


def test_huge_values_that_would_never_finish_are_refused_before_any_work(capsys):
    assert main(["frontier", "--concurrency", str(10**18), "--isl", "2048", "--out", "x.csv"]) == 2
    assert "concurrency 1000000000000000000: must be at most 65536" in capsys.readouterr().err
    assert main(["frontier", "--osl", str(10**18), "--isl", "2048", "--out", "x.csv"]) == 2
    assert "osl 1000000000000000000: must be at most 1048576" in capsys.readouterr().err
    assert main(["run", "--query-lens", "4", "--seq-lens", "300", "--device", "meta", "--topk-rows", str(10**18)]) == 2
    assert "more than it holds" in capsys.readouterr().err

"""Every option of every subcommand, given values a person mistypes or a script gets wrong (empty,
a word, negative, zero, nan, inf, huge, a broken list) and options that contradict each other: each
run ends within seconds in a result or in one line naming the value (exit 2), never a traceback,
and all of them together stay within a GiB of memory."""
import argparse
import resource
import time

import pytest

from indexer_lib.cli import main
from indexer_lib.cli import replay as replay_cli
from indexer_lib.cli.main import build_parser

VALUES = ("", "x", "-1", "0", "nan", "inf", "1e30", "99999999999999999999", "1,,2")
STEP = ["--query-lens", "100", "--seq-lens", "1000"]
# a valid run of each subcommand, small enough to end in a second; each case changes one option
BASE = {
    "plan": STEP, "time": STEP, "run": [*STEP, "--device", "meta"],
    "frontier": ["--concurrency", "1", "--isl", "2048", "--budget-mb", "512", "--strategy", "vllm"],
    "auto": ["--workload", "4x2048x16", "--free-gib", "4"],
    "replay": STEP, "reproduce": [],
}
CONTRADICTIONS = [
    ["plan", *STEP, "--budget-mb", "64", "--budget-bytes", "1000"],
    ["plan", "--query-lens", "100,100", "--seq-lens", "1000"],
    ["plan", "--query-lens", "2000", "--seq-lens", "1000"],
    ["plan", *STEP, "--max-model-len", "500"],
    ["plan", *STEP, "--strategy", "n-only", "--budget-mb", "64"],
    ["plan", *STEP, "--strategy", "vllm", "--compressed"],
    ["plan", *STEP, "--strategy", "engine", "--no-padding"],
    ["run", *STEP, "--device", "meta", "--save-topk", "x.npy"],
    ["frontier", *BASE["frontier"], "--ray", "--workers", "2"],
    ["frontier", *BASE["frontier"], "--shared-prefix", "4096"],
    ["replay", "--profile-run", *STEP],
    ["auto", *BASE["auto"], "--strategies", "engine"],
]
SECONDS = 5
STARTS_A_CLUSTER = {"--ray"}  # any value starts or reaches a Ray cluster (tests/test_cluster.py)


class Ran(BaseException):  # past the command line's own handlers
    """The replay would start the release's code: the input was taken."""


def value_options(command: str) -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return [a.option_strings[-1] for a in sub._actions
            if a.option_strings and a.nargs != 0 and not isinstance(a, argparse._HelpAction)
            and a.option_strings[-1] not in STARTS_A_CLUSTER]


def outcome(capsys, argv: list[str]) -> str | None:
    """What is wrong with one run, or None."""
    start = time.perf_counter()
    try:
        code = main(argv)
    except Ran:
        code = 0
    except SystemExit as e:
        code = e.code
    seconds = time.perf_counter() - start
    out, err = capsys.readouterr()
    if code not in (0, 1, 2):
        return f"exit {code}"
    if code == 2 and (err.count("\n") != 1 or out or "Traceback" in err):
        return f"not one line: {err[:300]!r}"
    if seconds > SECONDS:
        return f"{seconds:.1f} s"
    return None


@pytest.fixture
def quiet_replay(monkeypatch):
    def ran(*args, **kwargs):
        raise Ran()

    monkeypatch.setattr(replay_cli, "replay_steps", ran)
    monkeypatch.setattr(replay_cli, "replay_profile_run", ran)


@pytest.mark.parametrize("command", list(BASE))
def test_every_option_takes_every_bad_value_in_one_line(command, capsys, tmp_path, monkeypatch, quiet_replay):
    monkeypatch.chdir(tmp_path)
    base = [command, *BASE[command]]
    out = ["--out", "first.csv"] if command == "frontier" else []
    assert outcome(capsys, base + out) is None  # the base runs (and warms the imports up)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    wrong = []
    for option in value_options(command):
        for k, value in enumerate(VALUES):
            argv = [*base, option, value]
            if command == "frontier" and option != "--out":
                argv += ["--out", f"{option[2:]}-{k}.csv"]  # each its own table
            why = outcome(capsys, argv)
            if why:
                wrong.append(f"{' '.join(argv[1:])!r}: {why}")
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert not wrong, "\n".join(wrong)
    assert grown < 2**30


@pytest.mark.parametrize("argv", CONTRADICTIONS, ids=lambda a: " ".join(a))
def test_contradictory_options_are_refused_in_one_line(argv, capsys, tmp_path, monkeypatch, quiet_replay):
    monkeypatch.chdir(tmp_path)
    argv = argv + (["--out", "x.csv"] if argv[0] == "frontier" else [])
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err

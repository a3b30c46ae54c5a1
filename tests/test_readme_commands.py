"""Every ``indexer-lab`` command line the README and the guide (docs/usage.md) show runs as written
(in a scratch folder, so the tables it writes land there), and so does the DeepGEMM probe the guide
names."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from indexer_lib.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "usage.md"


def readme_commands() -> list[str]:
    """``indexer-lab ...`` lines of the README's and the guide's bash blocks and inline code (an
    inline one may wrap over lines); placeholders (``...``, ``X.Y.Z``, ``<name>``) are not commands."""
    text = README.read_text() + "\n" + GUIDE.read_text()
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        found += [line.split("#")[0].strip() for line in block.splitlines()]
    found += [" ".join(span.split()) for span in re.findall(r"`(indexer-lab [^`]+)`", text)]
    commands = [c for c in found if c.startswith("indexer-lab ") and "..." not in c and "X.Y.Z" not in c
                and "<" not in c]
    return list(dict.fromkeys(commands))


def test_the_readme_shows_the_commands_of_every_subcommand():
    commands = readme_commands()
    assert {c.split()[1] for c in commands} >= {"plan", "frontier", "auto"}
    assert len(commands) >= 10


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_line_runs(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(command)[1:]
    code = main(argv)
    out, err = capsys.readouterr()
    # 1: an example of a negative verdict (the step runs out of memory, no setting fits), said on stdout
    negative = "\nOOM: " in out or "\nnone: " in out or '"verdict": "oom"' in out
    assert code == 0 or (code == 1 and negative), (command, code, err)
    assert out.strip(), command


def test_the_deepgemm_probe_the_readme_names_runs_without_deepgemm():
    assert "python -m indexer_lib.run.kernels.deepgemm" in GUIDE.read_text()
    done = subprocess.run([sys.executable, "-m", "indexer_lib.run.kernels.deepgemm"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "Traceback" not in done.stderr and (done.stdout + done.stderr).strip()


def test_the_readme_answers_each_question_with_a_command_in_few_lines():
    """A newcomer's README: short, its questions each answered by a command that runs (above)."""
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    table = text[text.index("## Your question, one command"):text.index("## The notebooks")]
    rows = [r for r in table.splitlines() if r.startswith("| ") and "indexer-lab " in r]
    assert len(rows) >= 6 and all(re.search(r"`indexer-lab [a-z]+", r) for r in rows)
    for notebook in sorted(p.stem for p in (ROOT / "notebooks").glob("0*.ipynb")):
        assert f"`{notebook}`" in text, notebook

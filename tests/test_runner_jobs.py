"""The headless runner executes notebooks side by side (``--jobs``), each in its own kernel, and
after a failure starts no other: checked on two small notebooks that stand in for the real ones
(the runner checks their parameters as the real ones'), one of which waits for the other."""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import run_notebooks  # noqa: E402

# the first notebook waits (up to 20 s) for a file the second one writes: it ends well only when
# both run at once
WAITS = """import time
from pathlib import Path
for _ in range(400):
    if (Path(output_dir) / "second-started").exists():
        break
    time.sleep(0.05)
else:
    raise TimeoutError("the second notebook never started")
"""
FAILS = 'raise ValueError("a failing cell")\n'
WRITES = 'from pathlib import Path\n(Path(output_dir) / "second-started").write_text("yes")\n'


def _notebook(path: Path, code: str) -> None:
    params = nbformat.v4.new_code_cell('output_dir = "."\ndata_dir = "."')
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def two_notebooks(tmp_path, monkeypatch, first: str):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "02_chunk_overhead.ipynb", first)
    _notebook(folder / "03_strategies.ipynb", WRITES)
    monkeypatch.setattr(run_notebooks, "NOTEBOOKS", folder)
    spec = tmp_path / "two.yaml"
    spec.write_text(yaml.safe_dump({"run_name": "two", "notebooks": {"02_chunk_overhead": {}, "03_strategies": {}}}))
    return spec, tmp_path / "results"


def test_two_jobs_run_the_notebooks_at_once(tmp_path, monkeypatch, capsys):
    spec, results = two_notebooks(tmp_path, monkeypatch, WAITS)
    assert run_notebooks.main([str(spec), "--results", str(results), "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "02_chunk_overhead: done in" in out and "03_strategies: done in" in out
    assert (results / "two" / "second-started").exists()


def test_after_a_failure_no_other_notebook_starts(tmp_path, monkeypatch, capsys):
    spec, results = two_notebooks(tmp_path, monkeypatch, FAILS)
    assert run_notebooks.main([str(spec), "--results", str(results), "--jobs", "1"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("02_chunk_overhead: failed in cell ")
    assert err[0].endswith("ValueError: a failing cell")
    assert err[1].endswith("02_chunk_overhead.ipynb") and len(err) == 2
    # the failed notebook is kept with its error; the one after it never ran
    assert (results / "two" / "notebooks" / "02_chunk_overhead.ipynb").exists()
    assert not (results / "two" / "notebooks" / "03_strategies.ipynb").exists()
    assert not (results / "two" / "second-started").exists()


@pytest.mark.parametrize("jobs", ["0", "two", "-1"])
def test_a_bad_jobs_value_is_refused(jobs, capsys):
    with pytest.raises(SystemExit) as stop:
        run_notebooks.main([str(REPO / "notebooks/params/ci.yaml"), "--jobs", jobs])
    assert stop.value.code == 2
    assert f"argument --jobs: {jobs!r}: must be a whole number of notebooks, at least 1" in capsys.readouterr().err

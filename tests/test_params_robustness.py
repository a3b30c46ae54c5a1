"""A bad parameter stops a notebook at its parameters cell with one clear line,
before any work, whether papermill runs it directly or the headless runner does
(which then reports it and exits non-zero without starting a kernel)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
RUNNER = REPO / "scripts" / "run_notebooks.py"
sys.path.insert(0, str(REPO / "scripts"))
import run_notebooks  # noqa: E402

# notebook, parameter, bad value, the rule the message must state
CASES = [
    ("01_oom_frontier", "concurency", [1, 8], "unknown name"),
    ("01_oom_frontier", "isl", "2048", "= '2048': Input should be a valid list"),
    ("01_oom_frontier", "concurrency", [1, -4], "concurrency -4: must be a whole number >= 1"),
    ("01_oom_frontier", "budget_mb", [0], "budget 0 MiB: must be > 0"),
    ("01_oom_frontier", "strategies", ["vllm", "fastest"], "unknown strategy 'fastest': must be one of"),
    ("01_oom_frontier", "model", "llama-3", "must be one of deepseek-v3.2, deepseek-v4-flash, deepseek-v4-pro, deepseek-v4.1-flash, glm-5, glm-5.1, glm-5.2"),
    ("01_oom_frontier", "free_gib", float("inf"), "must be a finite number"),
    ("01_oom_frontier", "isl", [2048, 300000], "isl 300000 > max_model_len 202752 of glm-5"),
    ("01_oom_frontier", "shared_prefix", 300_000, "> every isl (at most 202752)"),
    ("01_oom_frontier", "osl", 1.5, "= 1.5: Input should be a valid integer"),
    ("02_chunk_overhead", "budget_mb", [64, 0], "budget 0 MiB: must be > 0"),
    ("02_chunk_overhead", "model", "gpt-4", "must be one of"),
    ("02_chunk_overhead", "max_overhead", -0.1, "max_overhead -0.1: must be a finite number > 0"),
    ("03_strategies", "budget", 0, "budget 0 MiB: must be > 0"),
    ("03_strategies", "strategies", ["causal", "greedy"], "unknown strategy 'greedy': must be one of"),
    ("03_strategies", "concurrency", [-1], "must be a whole number >= 1"),
    ("03_strategies", "max_num_batched_tokens", "8192", "= '8192': Input should be a valid integer"),
    ("01_oom_frontier", "executor", "dask", "= 'dask': Input should be 'local' or 'ray'"),
    ("01_oom_frontier", "ray_address", "http://head", "must be null (a new local instance), 'auto'"),
    ("01_oom_frontier", "ray_address", "ray://head:70000", "'ray://HOST:PORT' or 'HOST:PORT'"),
    ("01_oom_frontier", "long_isl", [300_000], "isl 300000 > max_model_len 202752 of glm-5"),
    ("01_oom_frontier", "random_range_ratio", 1.5, "'random_range_ratio': random_range_ratio 1.5: must be a number in [0, 1)"),
    ("01_oom_frontier", "mix", "0.1x", "'mix': mix '0.1x': expected SHARExLENGTH"),
    ("01_oom_frontier", "mix", "0.1x300000", "mix length 300000 > max_model_len 202752 of glm-5"),
    ("01_oom_frontier", "engines", ["vllm", "vllm==9"], "unknown engine release 'vllm==9'"),
    ("03_strategies", "speculative_tokens", -1, "speculative_tokens -1: must be a whole number >= 0"),
]


def bad_yaml(tmp_path, notebook, name, value) -> Path:
    path = tmp_path / "bad.yaml"
    spec = {"run_name": "bad", "common": {"model": "glm-5"},
            "notebooks": {n: {} for n in ("01_oom_frontier", "02_chunk_overhead",
                                          "03_strategies")}}
    spec["notebooks"][notebook][name] = value
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("notebook, name, value, rule", CASES)
def test_the_runner_reports_a_bad_parameter_in_one_line_and_exits_2(tmp_path, capsys, notebook,
                                                                    name, value, rule):
    code = run_notebooks.main([str(bad_yaml(tmp_path, notebook, name, value)),
                               "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"run_notebooks: parameter error: {notebook}.ipynb parameter "
                               f"{name!r}") and rule in lines[0], lines[0]
    assert not (tmp_path / "results").exists()  # no kernel started, nothing written


def test_the_runner_as_a_process_exits_non_zero(tmp_path):
    proc = subprocess.run([sys.executable, str(RUNNER),
                           str(bad_yaml(tmp_path, "03_strategies", "budget", 0)),
                           "--results", str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("run_notebooks: parameter error: 03_strategies.ipynb parameter "
                           "'budget': budget 0 MiB: must be > 0\n")


# papermill directly (a kernel each): one case of each kind, across the notebooks
KERNEL_CASES = [CASES[0], CASES[1], CASES[2], CASES[10], CASES[4], CASES[11], CASES[13],
                ("03_strategies", "strategy", "vllm", "unknown name")]


@pytest.mark.parametrize("notebook, name, value, rule", KERNEL_CASES)
def test_papermill_stops_at_the_parameters_cell_before_any_work(tmp_path, notebook, name, value,
                                                                rule):
    import nbformat
    import papermill as pm

    out_nb = tmp_path / "out.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as e:
        pm.execute_notebook(REPO / "notebooks" / f"{notebook}.ipynb", out_nb,
                            parameters={name: value, "output_dir": str(tmp_path / "work")},
                            cwd=str(REPO / "notebooks"), progress_bar=False, kernel_name="python3")
    assert e.value.ename == "ParameterError"
    assert "\n" not in e.value.evalue and rule in e.value.evalue
    assert e.value.evalue.startswith(f"{notebook}.ipynb parameter {name!r}")
    nb = nbformat.read(out_nb, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    failed = [i for i, c in enumerate(code) if any(o.output_type == "error" for o in c.outputs)]
    assert len(failed) == 1
    stop = code[failed[0]]
    assert stop.source.startswith("params = P.check(")  # the cell right after the parameters
    assert "injected-parameters" in code[failed[0] - 1].metadata.get("tags", [])
    assert all(c.execution_count is None for c in code[failed[0] + 1:])  # nothing after it ran
    assert not (tmp_path / "work").exists()  # no output folder: no work was done


@pytest.mark.parametrize("values, rule", [
    ({"executor": "ray", "mode": "trace"}, "'executor': executor 'ray' runs model and measure sweeps"),
    ({"ray_address": "auto"}, "'ray_address': ray_address 'auto' is used only with executor 'ray'"),
    ({"executor": "local", "ray_address": "ray://head:10001"}, "used only with executor 'ray'"),
])
def test_ray_parameters_that_cannot_go_together(values, rule):
    from indexer_lib.notebook.params import ParameterError, check_values

    with pytest.raises(ParameterError, match=rule):
        check_values("01_oom_frontier", values)


def test_a_measure_sweep_on_ray_does_not_need_a_local_gpu(monkeypatch):
    """The cluster's GPUs measure (sweep.run checks there is one); without Ray it is one line."""
    import importlib.util

    import torch

    from indexer_lib.notebook.params import ParameterError, check_values

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ParameterError, match="'mode': mode 'measure' needs a CUDA GPU"):
        check_values("01_oom_frontier", {"mode": "measure"})
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "ray"
                        else real(name, *a))
    values = {"mode": "measure", "executor": "ray", "ray_address": "auto"}
    checked = check_values("01_oom_frontier", values)
    assert (checked.mode, checked.executor, checked.ray_address) == ("measure", "ray", "auto")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray"
                        else real(name, *a))
    with pytest.raises(ParameterError, match=r'needs Ray, not installed here \(pip install -e ".\[cluster\]"\)'):
        check_values("01_oom_frontier", values)

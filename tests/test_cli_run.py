"""``indexer-lab run``: per-chunk figures, traced peak on meta, saved top-k, one-line errors."""
from __future__ import annotations

import json

import numpy as np

from indexer_lib.cli import main

STEP = ["--query-lens", "40,2,90", "--seq-lens", "300,2,900", "--model", "glm-5", "--topk", "32"]


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_on_meta_reports_the_traced_peak_equal_to_the_model(capsys):
    code, out, _ = run(capsys, "run", "--strategy", "causal", "--budget-mb", "0.1", "--device", "meta",
                       "--json", *STEP)
    assert code == 0
    data = json.loads(out)
    assert data["peak_bytes_traced"] == data["peak_bytes_model"]
    assert data["num_chunks"] == len(data["chunks"]) > 1
    for c in data["chunks"]:
        assert {"rows", "width", "logits_bytes", "metadata_bytes", "seconds", "traced_peak"} <= set(c)


def test_saved_topk_is_the_same_for_every_strategy_and_budget(capsys, tmp_path):
    saved = []
    for strategy, budget in (("n-only", None), ("vllm", "0.05"), ("causal", "0.2"), ("per-request", "1")):
        path = tmp_path / f"{strategy}.npy"
        extra = [] if budget is None else ["--budget-mb", budget]
        code, out, _ = run(capsys, "run", "--strategy", strategy, *extra, "--seed", "7",
                           "--save-topk", str(path), *STEP)
        assert code == 0 and "peak_bytes_model" in out
        saved.append(np.load(path))
    assert saved[0].shape == (132, 32) and saved[0].dtype == np.int32
    for other in saved[1:]:
        assert np.array_equal(other, saved[0])
    # another seed: other inputs, other indices
    code, _, _ = run(capsys, "run", "--strategy", "n-only", "--seed", "8", "--save-topk",
                     str(tmp_path / "s8.npy"), *STEP)
    assert not np.array_equal(np.load(tmp_path / "s8.npy"), saved[0])


def test_bad_input_is_one_line_and_exit_2(capsys):
    for args, message in (
        (["--device", "cuda"], "--device cuda: no CUDA device here"),
        (["--topk", "0"], "--topk 0: must be >= 1"),
        (["--device", "meta", "--save-topk", "x.npy"], "--save-topk: the meta device computes no indices"),
        (["--backend", "fast"], "invalid choice: 'fast'"),
    ):
        code, out, err = run(capsys, "run", *STEP, *args)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and message in err and "Traceback" not in err

"""The per-kernel time model: every published kernel timing reproduced, every constant sourced or
labelled assumed, the kernels' work counted as the kernels iterate, and the CLI's JSON."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from indexer_lib.cli.main import main
from indexer_lib.plan import PlanSettings
from indexer_lib.memory import make_plan
from indexer_lib.timemodel.features import chunk_useful_elements
from indexer_lib.timemodel.work import block_tiles, chunk_work
from indexer_lib.refdata import read_rows
from indexer_lib.timemodel import kernel_rates as kr
from indexer_lib.timemodel import model as timemodel
from indexer_lib.timemodel.ttft import added_time
from indexer_lib.engines.scheduler import release_scheduler
from indexer_lib.workload import ClosedLoopWorkload, PrefillRequest, StepBatch


def test_every_published_kernel_timing_is_reproduced():
    """On the GPUs the constants were fitted on (logits and clean: an H200; top-k: an H20)."""
    checks = [c for c in kr.published_checks() if c["gpu"] == kr.FIT_GPU[c["kernel"]]]
    assert {c["kernel"] for c in checks} == {"logits", "clean", "topk"}
    assert len([c for c in checks if c["kernel"] == "logits"]) == 9
    for c in checks:
        assert abs(c["error"]) <= 0.10, c
    # the check rows (not used to fix a constant) are predictions
    assert any(c["use"] == "check" for c in checks)


# the top-k rows published on other GPUs, each a check of the model there: (GPU, how many, the band
# their errors lie in).  vLLM's and aiter's top-k on an MI355X within 25 %; SGLang's top-k on a B200
# within 45 %; the model faster than published on both.
OTHER_GPU_CHECKS = [("mi355x", 6, (-0.25, 0.0)), ("b200", 3, (-0.45, 0.0))]


def test_rows_on_other_gpus_are_checks_with_their_errors():
    checks = [c for c in kr.published_checks() if c["gpu"] != kr.FIT_GPU[c["kernel"]] and c["kernel"] == "topk"]
    for c in checks:
        print(f"{c['kernel']:>6} {c['gpu']:>6} {c['shape']:<40} published {c['published_us']:>8g} us, "
              f"modelled {c['modelled_us']:>8.1f} us, error {c['error']:+.1%}  {c['source']}")
        assert c["use"] == "check" and c["held_out_error"] is None
    for gpu, count, (lo, hi) in OTHER_GPU_CHECKS:
        errors = [c["error"] for c in checks if c["gpu"] == gpu and lo <= c["error"] <= hi]
        assert len(errors) == count, (gpu, lo, hi)
    assert len(checks) == sum(n for _, n, _ in OTHER_GPU_CHECKS)


def test_the_h20s_logits_fit_its_own_rate():
    """The H20's six published logits rows (with the clean kernel after them, every window the
    whole K) fit one constant, its logits rate against its FP8 rate per SM; each row's error with
    the rate fitted to the other five is within 5 %.  The FP8 rate per SM alone would make them
    15-30 % too fast."""
    from dataclasses import replace

    rows = [c for c in kr.published_checks() if (c["kernel"], c["gpu"]) == ("logits", "h20")]
    assert len(rows) == 6
    scaled_only = replace(kr.fitted(), logits_gpu_rates=())
    for c, r in zip(rows, kr.published_timings("logits", "h20")):
        print(f"logits h20 {c['shape']:<32} published {c['published_us']:>7g} us, modelled "
              f"{c['modelled_us']:>7.1f} us ({c['error']:+.1%}, held out {c['held_out_error']:+.1%}); "
              f"FP8 rate per SM alone {kr._row_us(r, scaled_only) / r['us'] - 1:+.1%}")
        assert abs(c["held_out_error"]) <= 0.05 and "H20's logits rate" in c["use"]
        assert -0.30 <= kr._row_us(r, scaled_only) / r["us"] - 1 <= -0.15
    (gpu, rate), = kr.fitted().logits_gpu_rates
    assert gpu == "h20" and 0.7 < rate < 0.8


def _cli_json(argv):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def test_block_tiles_follow_the_kernels_schedule():
    # H = 64: blocks of 2 rows; rows see [0, 300) and [0, 301): one block spanning 301 -> 2 tiles
    assert block_tiles(np.array([0, 0]), np.array([300, 301]), 64).tolist() == [2]
    # start rounds down to a multiple of 4: [6, 262) is read from 4 -> 258 wide -> 2 tiles
    assert block_tiles(np.array([6]), np.array([262]), 64).tolist() == [2]
    # H = 32: blocks of 4 rows; a short last block repeats its last row
    assert block_tiles(np.array([0] * 5), np.array([256, 256, 256, 256, 513]), 32).tolist() == [1, 3]


def test_chunk_work_counts_what_the_rows_score():
    rng = np.random.default_rng(0)
    for strategy, mb in [("n-only", None), ("vllm", 64), ("causal", 64), ("kv-split", 64), ("per-request", 64)]:
        for _ in range(10):
            reqs = tuple(PrefillRequest(int(rng.integers(0, 20000)), int(rng.integers(1, 3000)))
                         for _ in range(int(rng.integers(1, 5))))
            batch = StepBatch(reqs)
            plan = make_plan(batch, strategy, None if mb is None else mb << 20, PlanSettings("glm-5"))
            for c, w in zip(plan.chunks, chunk_work(plan)):
                assert w.scored == chunk_useful_elements(c, batch)
                assert w.rows == c.num_rows and len(w.row_lens) == c.num_rows
                assert w.gathered_tokens == (c.kv_tokens if c.gather else 0)


def test_small_chunks_pay_for_idle_sms():
    """A chunk too small to fill the GPU's SMs costs more per scored logit than a large one."""
    tm = timemodel.TimeModel()
    settings = PlanSettings("glm-5")
    one = make_plan(StepBatch((PrefillRequest(16384, 8192),)), "n-only", None, settings)
    sliced = make_plan(StepBatch((PrefillRequest(16384, 8192),)), "vllm", 16 << 20, settings)
    assert sliced.num_chunks > 8
    big, small = tm.plan_time(one), tm.plan_time(sliced)
    assert small.kernel_us("logits") > big.kernel_us("logits")
    assert small.host_us > big.host_us
    assert small.total_us > big.total_us


def test_releases_that_clean_pay_for_it():
    tm = timemodel.TimeModel()
    batch = StepBatch(tuple(PrefillRequest(9984, 256) for _ in range(8)))
    old = tm.plan_time(make_plan(batch, "engine", None, PlanSettings("glm-5", engine="vllm==0.15.1")))
    new = tm.plan_time(make_plan(batch, "engine", 512 << 20, PlanSettings("glm-5", engine="vllm==0.19.0")))
    assert old.kernel_us("clean") > 0 and new.kernel_us("clean") == 0


def test_the_band_comes_from_the_published_spread():
    """A GPU's band per kernel: the rows on it, else those on the GPUs of its architecture."""
    def ratios(kernel, gpus):
        return [1 / (1 + (c["error"] if c["held_out_error"] is None else c["held_out_error"]))
                for c in kr.published_checks() if c["kernel"] == kernel and c["gpu"] in gpus]

    expected = {"h200": {"logits": ["h200"], "clean": ["h200"], "topk": ["h20"]},
                "h20": {"logits": ["h20"], "clean": ["h200"], "topk": ["h20"]},
                "h100": {"logits": ["h200", "h20"], "clean": ["h200"], "topk": ["h20"]}}
    for gpu, kernels in expected.items():
        band = kr.error_band(gpu)
        assert band["gather"] == (1.0, 1.0)
        for kernel, gpus in kernels.items():
            assert band[kernel] == (min(ratios(kernel, gpus)), max(ratios(kernel, gpus))), (gpu, kernel)
    assert 0.95 <= kr.error_band("h20")["logits"][0] <= kr.error_band("h20")["logits"][1] <= 1.05


def test_other_gpus_scale_or_are_refused():
    # an H20 has 78 SMs at a quarter of an H200 SM's FP8 rate: the logits take far longer (and
    # its own published rows slow its SMs further, by its fitted rate)
    assert kr.gpu_rates("h20").sm_speed == pytest.approx((296 / 78) / (1979 / 132))
    assert kr.fitted().logits_speed(kr.gpu_rates("h20")) < kr.gpu_rates("h20").sm_speed
    assert kr.gpu_rates("h100").sm_speed == pytest.approx(1.0)
    with pytest.raises(ValueError, match="DeepGEMM's SM100 fp8_mqa_logits"):
        kr.gpu_rates("b200").sm_speed


# the GPUs whose time is not modelled, and what the refusal names as published on them
NOT_TIMED = {"gb200": "none", "gb300": "vllm-project/vllm#54915", "b200": "flashinfer-ai/flashinfer#2461",
             "b300": "none", "rtx-pro-6000": "none", "gb10": "none", "mi300x": "none", "mi325x": "none",
             "mi355x": "ROCm/aiter#5445"}


@pytest.mark.parametrize("gpu", sorted(NOT_TIMED))
def test_time_refuses_a_gpu_it_cannot_time_in_one_line(gpu, capsys):
    from indexer_lib.cli.main import main as cli

    # on gfx942 the kernel named is aiter's Triton one, which ATOM runs (vLLM 0.33.0 runs its FlyDSL one)
    engine = ["--engine", "atom"] if gpu in ("mi300x", "mi325x") else []
    step = ["--gpu", gpu, *engine, "--model", "deepseek-v3.2", "--query-lens", "2048", "--seq-lens", "4096"]
    rc = cli(["time", *step])
    err = capsys.readouterr().err.strip().splitlines()
    kernel = kr.LOGITS_KERNEL[kr.gpu_rates(gpu).arch]
    assert rc == 2 and len(err) == 1, err
    assert f"GPU {gpu!r}" in err[0] and f"no published timing of the logits kernel it runs ({kernel})" in err[0]
    published = err[0].split("published on it: ")[1]
    assert published.startswith("none;") if NOT_TIMED[gpu] == "none" else NOT_TIMED[gpu] in published
    assert cli(["plan", *step]) == 0  # its memory is planned all the same
    capsys.readouterr()


def test_the_sm90_parts_are_timed():
    for gpu in ("h200", "h100", "h20"):
        assert kr.time_refusal(gpu) is None


def test_time_model_fits_measured_rows(tmp_path):
    rows = [{"mode": "measure", "model": "glm-5", "oom": False, "time_ms": 2.0 * m, "model_time_ms": m}
            for m in (1.0, 3.0, 10.0)]
    (tmp_path / "h200").mkdir()
    pd.DataFrame(rows + [{**rows[0], "mode": "model"}]).to_parquet(tmp_path / "h200" / "m.parquet")
    fitted = timemodel.TimeModel.from_data(tmp_path / "h200")
    assert fitted.scale == pytest.approx(2.0)
    assert "fitted" in fitted.source and "3 measured H200 steps" in fitted.source
    assert timemodel.TimeModel.from_data(tmp_path / "nothing").source == timemodel.PUBLISHED_SOURCE


def test_budget_cost_in_time_to_first_token():
    settings = PlanSettings("glm-5", engine="vllm==0.33.0")
    config = release_scheduler("vllm==0.33.0", 64)
    rows = added_time(ClosedLoopWorkload(16, 10240, 64), config, "engine", [16, 2048], settings)
    small, large = rows
    assert small["added_ttft_p90_ms"] >= small["added_ttft_p50_ms"] > 0
    assert small["added_ttft_p50_ms"] > large["added_ttft_p50_ms"] >= 0
    assert small["added_per_output_token_ms"] > 0
    assert all(r["time_source"] == "modelled" for r in rows)
    # each figure with its band: the same sums with every kernel at the published checks' low and high ends
    for r in rows:
        for name in ("added_ttft_p50", "added_ttft_p90", "added_per_output_token"):
            ends = sorted((r[f"{name}_low_ms"], r[f"{name}_high_ms"]))
            assert ends[0] <= r[f"{name}_ms"] <= ends[1]
    assert small["added_ttft_p90_high_ms"] > small["added_ttft_p90_low_ms"]


def random_plans(seed: int, count: int):
    """Plans of many strategies, engines and models under budgets small and large (from 1 to
    hundreds of chunks; kv-split's column ranges among them)."""
    import random

    from indexer_lib.presets import MIB

    rng = random.Random(seed)
    while count:
        model = rng.choice(["glm-5", "deepseek-v4-flash", "glm-5.3-flash", "glm-5.2", "qwen3.8-flash-next"])
        engine = rng.choice(["vllm==0.33.0", "sglang==0.5.23", "trtllm==1.4.0rc4"])
        strategy = rng.choice(["vllm", "causal", "per-request", "engine", "kv-split"])
        requests = tuple(PrefillRequest(rng.choice([0, rng.randrange(0, 300_000)]), rng.randrange(1, 5000))
                         for _ in range(rng.randrange(1, 5)))
        try:
            plan = make_plan(StepBatch(requests), strategy, rng.choice([MIB, 16 * MIB, 256 * MIB]),
                             PlanSettings(model, engine))
        except ValueError:  # a strategy this model's K or this build has no layout for
            continue
        count -= 1
        yield plan


def test_a_plans_chunks_work_counted_together_is_each_chunks_own():
    """``chunk_work`` takes every row's window once for the step and every chunk's query blocks
    at once: the same row lengths, block tiles and cells as each chunk's own windows give."""
    from indexer_lib.timemodel.work import _chunk_work_alone
    from indexer_lib.padding import get_rules

    seen = 0
    for plan in random_plans(1, 120):
        rules = get_rules(plan.deepgemm_version)
        for got, c in zip(chunk_work(plan), plan.chunks, strict=True):
            want = _chunk_work_alone(plan.batch, c, plan.settings.preset.index_heads, rules)
            assert (got.rows, got.logits_cols, got.outside_cells, got.gathered_tokens) == \
                (want.rows, want.logits_cols, want.outside_cells, want.gathered_tokens)
            assert np.array_equal(got.row_lens, want.row_lens) and np.array_equal(got.block_tiles, want.block_tiles)
            seen += 1
    assert seen > 5000  # many plans of many chunks


def test_the_kernels_of_many_chunks_timed_together_are_each_chunks_own():
    """``logits_us_each`` and ``topk_us_each`` give each chunk the time ``logits_us`` and
    ``topk_us`` give it alone, to the last bit (the same sums in the same order)."""
    for plan in random_plans(2, 60):
        work = chunk_work(plan)
        for name in ("h200", "h100", "h20"):
            gpu, fit = kr.gpu_rates(name), kr.fitted()
            assert kr.logits_us_each([w.block_tiles for w in work], gpu, fit).tolist() == \
                [kr.logits_us(w.block_tiles, gpu, fit) for w in work]
            topk = plan.settings.preset.topk
            assert kr.topk_us_each([w.row_lens for w in work], topk, gpu, fit).tolist() == \
                [kr.topk_us(w.row_lens, topk, gpu, fit) for w in work]


def test_a_table_shows_each_gpus_own_time_or_says_whose_stands_in(capsys):
    """``for_gpu``: the GPU's own modelled time where it is modelled (a factor fitted to measured
    H200 steps stays the H200's), else the H200's time with the refusal in its source; frontier
    rows name whose time they show, and auto says so beside the time it prints."""
    from indexer_lib.sweep import Grid, model_rows

    measured = timemodel.TimeModel(scale=1.2, source="fitted: x 1.2")
    assert measured.for_gpu("H200") is measured and not measured.stands_in
    h20 = measured.for_gpu("h20")
    assert (h20.gpu, h20.scale, h20.stands_in) == ("h20", 1.0, False)
    b200 = measured.for_gpu("b200")
    assert b200.gpu == "h200" and b200.scale == 1.2 and b200.stands_in
    assert b200.source.startswith("fitted: x 1.2; an H200's time standing in for b200: ")
    assert kr.time_refusal("b200") in b200.source
    assert timemodel.TimeModel.published("mi355x").for_gpu("mi355x").gpu == "h200"

    for gpu, whose in (("h20", "h20"), ("b200", "h200")):
        grid = Grid.of(model="glm-5", gpu=gpu, concurrency=(2,), isl=(8192,), osl=(16,), budget_mb=(512,),
                       strategy=("vllm",), free_gib=(20.0,))
        (row,) = model_rows(grid)
        assert row["model_time_gpu"] == whose and row["model_time_ms"] > 0
    assert main(["auto", "--gpu", "b200", "--free-gib", "20", "--workload", "2x8192x16"]) == 0
    out = capsys.readouterr().out
    assert "(modelled, another GPU's time standing in: see time below)" in out
    assert "an H200's time standing in for b200" in out
    assert main(["auto", "--gpu", "h20", "--free-gib", "20", "--workload", "2x8192x16"]) == 0
    assert "standing in" not in capsys.readouterr().out

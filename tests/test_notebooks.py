"""CI runs every notebook headless (papermill, small parameters) and checks what it wrote."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parent.parent
RUNNER = REPO / "scripts" / "run_notebooks.py"


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    # one notebook at a time: the suite's workers already keep every core busy
    # (tests/test_runner_jobs.py runs notebooks side by side)
    proc = subprocess.run([sys.executable, str(RUNNER), str(REPO / "notebooks/params/ci.yaml"),
                           "--results", str(results), "--jobs", "1"], capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return results / "ci", proc.stdout


def test_every_notebook_ran_and_wrote_figures_and_tables(ci_run):
    out, stdout = ci_run
    for name in ("01_oom_frontier", "02_chunk_overhead", "03_strategies", "04_beyond", "05_default_policy"):
        assert (out / "notebooks" / f"{name}.ipynb").exists()
        pngs = list((out / "figures").glob(f"{name[:2]}_*.png"))
        assert pngs, name
        for png in pngs:  # every figure in both formats
            assert png.with_suffix(".svg").exists()
    tables = out / "tables"
    for table in ("reproductions.csv", "frontier-model.parquet", "01_largest_isl_vllm.csv", "01_long_context.csv",
                  "02_chunk_overhead.csv", "02_budget_payoff.csv", "03_strategies_steps.csv",
                  "03_strategies_workloads.csv", "04_frontier.parquet", "04_chunks.csv",
                  "04_reserved.csv", "04_policies.csv", "04_auto.csv", "04_ledger.csv", "default_policies.csv"):
        assert (tables / table).exists(), table
    # a results folder of tables: the finished sweep's journal and lock are gone
    assert not list(tables.glob("*.journal")) and not list(tables.glob("*.lock"))
    for name in ("01_oom_frontier", "04_beyond"):  # no progress bar saved frozen at 0%
        assert "%|" not in (out / "notebooks" / f"{name}.ipynb").read_text()
    frame = pd.read_parquet(tables / "frontier-model.parquet")
    # n-only reads no budget: one row per workload (budget_mb empty), the other strategies one per budget
    assert len(frame) == 3 * 2 * (2 + 1 + 2 + 2) and set(frame["mode"]) == {"model"}
    assert frame[frame["strategy"] == "n-only"]["budget_mb"].isna().all()
    assert frame[frame["strategy"] != "n-only"]["budget_mb"].notna().all()
    # notebooks plan on the latest vLLM by default; its own chunker is among the strategies
    assert set(frame["engine"]) == {"vllm==0.33.0"} and "engine" in set(frame["strategy"])
    # ci.yaml gives the frontier mixed lengths: every row names them, and so does the summary
    assert set(frame["random_range_ratio"]) == {0.25} and set(frame["mix"]) == {"0.05x65536"}
    assert (frame[frame["strategy"] == "n-only"]["worst_kv_tokens"] > 60_000).all()  # the 64K prompts meet short ones
    mixes = pd.read_csv(tables / "01_long_among_short.csv")
    assert set(mixes["mix"].fillna("")) == {"", "0.01x131072"} and mixes["prompt_tokens"].nunique() == 1
    beyond = pd.read_parquet(tables / "04_frontier.parquet")
    assert set(beyond["engine"]) == {"vllm==0.32.0"} and set(beyond["deepgemm_version"]) == {"2.6"}
    summary = (out / "summary.txt").read_text().splitlines()
    assert len(summary) == 3
    assert "Summary:" in stdout and str(out.name) in stdout
    assert "modelled" in summary[0] and "modelled" in summary[1]


def test_every_figure_the_notebooks_saved_kept_the_figure_style(ci_run):
    """The runner saves each figure in strict mode (a broken rule stops the run naming it): none
    was let through with a warning, and every PNG is at most 8 inches wide at 150 dpi."""
    from PIL import Image

    from indexer_lib.notebook import style

    out, _ = ci_run
    for nb in (out / "notebooks").glob("*.ipynb"):
        assert "breaks the figure style" not in nb.read_text(), nb.name
    pngs = list((out / "figures").glob("*.png"))
    assert len(pngs) >= 20
    for png in pngs:
        with Image.open(png) as im:
            assert im.size[0] <= style.WIDTH * style.DPI and round(im.info["dpi"][0]) == style.DPI, png.name


def test_every_table_the_notebooks_show_reads_plain_numbers(ci_run):
    """The Markdown tables of the executed notebooks: no e-notation (1.02e+03) and no -1 for a
    strategy without a budget; no two figures of the run draw the same data."""
    import json
    import re

    from indexer_lib.notebook.figure_check import duplicate_figures

    out, _ = ci_run
    tables = 0
    for nb in (out / "notebooks").glob("*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            for output in cell.get("outputs", []):
                text = "".join(output.get("data", {}).get("text/markdown", ""))
                if text.startswith("|"):
                    tables += 1
                    assert not re.search(r"\d\.?\d*e[+-]\d", text), (nb.name, text[:300])
                    assert "| -1 |" not in text, (nb.name, text[:300])
    assert tables >= 10
    assert duplicate_figures(list((out / "figures").glob("*.png"))) == []


def test_reproduced_allocations_match_published(ci_run):
    out, _ = ci_run
    repro = pd.read_csv(out / "tables" / "reproductions.csv").set_index("case")
    assert (repro["matches"] == (repro["expected"] == "reproduced")).all()
    assert repro.loc["prompt-64k-one-step", "reproduced_gib"] == 16.0
    assert round(repro.loc["prompt-64k-mnbt32768-dg2.1", "reproduced_gib"], 2) == 8.03
    # from the reporter's settings (vllm serve's defaults) the seed's 9.89 GiB step is not built
    assert not repro.loc["glm5-c64-isl10240", "matches"] and not repro.loc["glm5-c48-isl10240", "matches"]


def test_overhead_without_measurements_says_modelled(ci_run):
    out, _ = ci_run
    overhead = pd.read_csv(out / "tables" / "02_chunk_overhead.csv")
    assert set(overhead["time_source"]) == {"modelled"}
    nb = (out / "notebooks" / "02_chunk_overhead.ipynb").read_text()
    assert "every time below is modelled" in nb


def test_frontier_notebook_shows_the_simulator_next_to_vllm(ci_run):
    from indexer_lib.workload import vllm_scheduler

    out, _ = ci_run
    table = out / "tables" / "01_simulator_vs_vllm.csv"
    if not vllm_scheduler.vllm_available():
        nb = (out / "notebooks" / "01_oom_frontier.ipynb").read_text()
        assert "this comparison is skipped" in nb  # said so, and the notebook went on
        return
    side = pd.read_csv(table).set_index("source")
    worst = ["steps", "worst_rows", "worst_kv_tokens", "worst_m_times_n"]
    assert (side.loc["simulator", worst] == side.loc["vllm", worst]).all()
    assert list((out / "figures").glob("01_simulator_vs_vllm_*.png"))


def test_beyond_notebook_shows_the_published_policy_failure_and_flat_fixed_shape(ci_run):
    out, _ = ci_run
    policies = pd.read_csv(out / "tables" / "04_policies.csv")
    cached = policies[policies["policy"] == "sglang-cached"]
    # SGLang's rule with the reporter's flags: 0.2 x (1 - 0.92) x 178.35 GiB, below 0.2 x 20 GiB free
    assert (cached["budget_bytes"] / 2**30).round(2).eq(2.85).all()
    failed = cached[~cached["fits"]]
    assert len(failed) == 1 and round(failed["free_bytes"].iloc[0] / 2**30, 2) == 2.20
    assert policies[policies["policy"] == "fresh"]["fits"].all()
    res = pd.read_csv(out / "tables" / "04_reserved.csv")
    fixed = res[res["strategy"] == "fixed-shape"]
    assert fixed["reserved"].nunique() == 1 and set(res["mode"]) == {"model"}
    auto = pd.read_csv(out / "tables" / "04_auto.csv")
    assert len(auto) == 5 and auto["deploy"].str.len().gt(0).all()
    # a mixed-length deployment is one schedule: its long prompts share steps with the short ones
    assert "chat, long tail: 64 x 2K, 1% at 128K" in set(auto["deployment"])
    # the ledger of the grid's largest workload, as given and under each what-if
    ledger = pd.read_csv(out / "tables" / "04_ledger.csv")
    assert ledger["what_if"].iloc[0] == "as given" and "expandable_segments on" in set(ledger["what_if"])
    assert ledger["verdict"].isin(["fits", "oom"]).all() and (ledger["boot_bytes"] > 0).all()
    by = ledger.set_index("what_if")
    # expandable segments keep no segment per size; a smaller budget costs logits calls
    assert by.loc["expandable_segments on", "allocator_bytes"] <= by.loc["as given", "allocator_bytes"]
    assert by.loc["VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=64", "chunks"] > by.loc["as given", "chunks"]


def test_notebook_01_opens_with_the_public_reports(ci_run):
    out, _ = ci_run
    reports = pd.read_csv(out / "tables" / "01_public_reports.csv")
    assert (reports["verdict"] == reports["expected"]).all() and len(reports) >= 6
    assert reports["source"].str.len().gt(0).all()


def test_notebook_01_shows_which_releases_send_decodes_with_drafts_through_the_prefill_path(ci_run):
    out, _ = ci_run
    drafts = pd.read_csv(out / "tables" / "01_speculative.csv").set_index(["engine", "speculative_tokens"])
    assert not drafts.loc[("vllm==0.16.0", 1), "oom"] and drafts.loc[("vllm==0.16.0", 2), "oom"]
    assert not drafts.xs("vllm==0.33.0")["oom"].any()


def test_the_indexers_of_2026_in_notebook_01(ci_run):
    out, _ = ci_run
    models = pd.read_csv(out / "tables" / "01_models_2026.csv")
    planned = models[models["planned"]]
    assert set(planned["model"]) == {"deepseek-v3.2", "glm-5", "glm-5.1", "glm-5.2", "deepseek-v4-flash",
                                     "deepseek-v4-pro", "deepseek-v4.1-flash",
                                     "glm-5.3-flash", "qwen3.8-flash-next"}
    assert (planned["isl"] == planned["max_model_len"]).all() and set(planned["concurrency"]) == {1, 8}
    assert {e.split("==")[0] for e in planned["engine"]} == {"vllm", "sglang", "trtllm"}
    v4 = planned[(planned["model"] == "deepseek-v4-flash") & (planned["concurrency"] == 1)].set_index("engine")
    assert v4.loc["vllm==0.33.0", "peak_layer_kind"] == "c4" and v4.loc["vllm==0.33.0", "worst_chunks"] == 16
    # TensorRT-LLM's cap is 2^31 elements per call, not a memory budget: 8 GiB of logits at 1M
    assert v4.filter(like="trtllm", axis=0)["largest_logits_mib"].iloc[0] > 8000
    unknown = models[~models["planned"] & models["engine"].isna()]
    assert unknown.empty  # every known model is planned
    v41 = planned[planned["model"] == "deepseek-v4.1-flash"]
    assert set(v41["engine"]) == {"vllm==0.33.0", "sglang==0.5.23"}  # TensorRT-LLM's path not read: refused
    assert set(v41["peak_layer_kind"]) <= {"c2", "c1_candidate_source", "c1_candidate_consumer"}
    qwen = planned[planned["model"] == "qwen3.8-flash-next"]
    assert set(qwen["engine"]) == {"vllm==0.33.0", "sglang==0.5.23"} and (qwen["peak_layer_kind"] == "qsa").all()
    assert unknown["why_not"].str.startswith("its ").all()
    refused = models[~models["planned"] & models["engine"].notna()]
    assert refused["why_not"].str.contains("not modelled").all()


def test_beyond_notebook_prints_no_line_the_engines_own_chunker_would_oom_with(ci_run):
    """Every line notebook 04 prints to deploy, replayed with the release's own chunker on the
    same deployments and scheduler (the release's defaults: ci.yaml sets none)."""
    from deploy_check import memory_needed
    from indexer_lib.engines import release_scheduler
    from indexer_lib.notebook.beyond import DEPLOYMENTS
    from indexer_lib.presets import free_bytes_from_gib
    from indexer_lib.search.worst_step import prefill_batches

    out, _ = ci_run
    auto = pd.read_csv(out / "tables" / "04_auto.csv")
    assert auto["scheduler not default"].isna().all()  # every row on its release's own scheduler
    deployed = 0
    for row in auto.itertuples():
        if row.deploy.startswith("none"):
            continue
        scheduler = release_scheduler(row.engine, 64)
        mix, free_gib = DEPLOYMENTS[row.deployment]
        schedules = [prefill_batches(w, scheduler) for w in mix]
        free = free_bytes_from_gib(free_gib)
        assert memory_needed(row.deploy, row.engine, schedules, free) <= free, row.deployment
        deployed += 1
    assert deployed >= 3  # the chat deployment's 2048 MiB line of the project's vllm strategy is gone
    assert not auto["deploy"].str.contains("indexer-lab strategy").any()


def test_numbers_shared_between_notebooks_agree(ci_run):
    """A named step planned with the same strategy, budget and release shows the same chunks, peak
    and time in every notebook that shows it; a table that plans it on another release names that
    release in its rows. SGLang's stale budget is the same cached reading in notebooks 01 and 04."""
    out, _ = ci_run
    tables = out / "tables"
    shown = {
        "02": pd.read_csv(tables / "02_chunk_overhead.csv"),
        "03": pd.read_csv(tables / "03_strategies_steps.csv").assign(
            budget_mb=lambda t: pd.to_numeric(t["budget"].str.removesuffix(" MiB"), errors="coerce")),
        "04": pd.read_csv(tables / "04_chunks.csv"),
    }
    keys, values = ["step", "strategy", "budget_mb", "engine"], ["chunks", "peak_transient_bytes", "time_ms"]
    compared = 0
    for a, b in (("02", "03"), ("02", "04"), ("03", "04")):
        both = shown[a][keys + values].merge(shown[b][keys + values], on=keys, suffixes=("_a", "_b"))
        for value in values if len(both) else ():
            assert (both[f"{value}_a"] - both[f"{value}_b"]).abs().max() <= 1e-9 * both[f"{value}_a"].abs().max(), \
                (a, b, value)
        compared += len(both)
    assert compared >= 5  # the steps notebooks 02 and 03 share at least
    steps_03 = set(shown["03"]["step"])
    assert steps_03 & set(shown["04"]["step"]), "notebook 04 names the steps as notebook 03 does"
    assert shown["04"]["engine"].nunique() == 1  # one release, named in every row
    stale = pd.read_csv(tables / "01_stale_budgets.csv").set_index("case").loc["sglang-stale-budget"]
    policies = pd.read_csv(tables / "04_policies.csv")
    cached = policies[policies["policy"] == "sglang-cached"].sort_values("step")
    assert (cached["budget_bytes"] / 2**30).round(6).eq(round(stale["cached_budget_gib"], 6)).all()
    assert abs(cached["free_bytes"].iloc[-1] / 2**30 - stale["free_gib"]) < 1e-3

"""The KV cache a deployment has per GPU (engines.kv_capacity), held to the engines' arithmetic
and to the public deployments it was calibrated on and checked against."""
import json
import math

import pytest

from indexer_lib.checks import BadValue
from indexer_lib.cli.main import main
from indexer_lib.engines.kv_capacity import checkpoints, derive_kv_cache
from indexer_lib.refdata import data_path
from indexer_lib.presets import GIB, get_gpu
from indexer_lib.sweep.grid import Grid

RULES = json.loads(data_path("kv_cache_rules.json").read_text())["facts"]
H200 = get_gpu("h200").capacity_bytes


def test_vllm_cache_is_the_release_arithmetic_byte_for_byte():
    # GLM-5-FP8 on 8 x H200 with MTP on vLLM 0.16.0 (its default gpu_memory_utilization 0.9, bf16 latent)
    c = derive_kv_cache("glm-5", "vllm==0.16.0", "h200", tp=8, speculative_tokens=1)
    weights = -(-checkpoints()["glm-5"].weights_bytes // 8)
    kv = math.ceil(H200 * 0.9) - weights - RULES["vllm_other_bytes"]["value"]
    per_token = 79 * 1152 + 79 * 132  # 78 layers + the MTP layer, latent and indexer K each
    assert c.bytes_per_token == per_token == 101_436
    assert c.kv_bytes == kv and c.blocks == kv // (64 * per_token) and c.tokens == c.blocks * 64 == 244_928
    assert c.fraction == 0.9 and c.setting == "gpu_memory_utilization"
    assert "244,928 tokens per GPU (derived" in c.phrase() and "(assumed)" in c.phrase()


def test_calibration_gives_back_the_recipe_it_was_taken_from():
    # vllm-project/recipes#893: GLM-5.3 FP8 (the GLM-5.2 geometry: 21 indexer caches) on 8 x H200 under
    # vLLM 0.28.0 with an fp8 cache: 94.46 GiB of weights per rank, 25.94 GiB of KV; 53,940 B per token
    c = derive_kv_cache("glm-5.2", "vllm==0.28.0", "h200", tp=8, kv_cache_dtype="fp8")
    assert c.bytes_per_token == 78 * 656 + 21 * 132 == 53_940
    assert c.weights_bytes == pytest.approx(94.46 * GIB, abs=GIB / 100)
    assert c.kv_bytes == pytest.approx(25.94 * GIB, abs=GIB / 100)


def test_derived_cache_is_within_two_percent_of_another_public_deployment():
    # LMCache/LMCache#3339: GLM-5-FP8 with its MTP layer on vLLM 0.21.0, 'GPU KV Cache Dimensions:
    # [158][4372, 64, 132]', 4,372 blocks of 64 tokens; not the deployment the calibration came from
    c = derive_kv_cache("glm-5", "vllm==0.21.0", "h200", tp=8, speculative_tokens=1)
    assert c.fraction == 0.92  # 0.21.0's default
    assert abs(c.tokens - 4372 * 64) / (4372 * 64) < 0.02


def test_sglang_cache_is_its_fraction_less_the_weights():
    c = derive_kv_cache("glm-5", "sglang==0.5.23", "h200", tp=8, fraction=0.88)
    weights = -(-checkpoints()["glm-5"].weights_bytes // 8)
    kv = int(H200 * 0.88) - weights
    assert c.other_bytes == 0 and c.kv_bytes == kv and c.tokens == kv // (64 * 100_152) * 64


def test_refusals_name_the_value_and_the_way_out():
    with pytest.raises(BadValue, match="give a larger --tp"):
        derive_kv_cache("glm-5", "vllm==0.33.0", "h200", tp=1)
    with pytest.raises(BadValue, match="trtllm.*--kv-cache-tokens N"):
        derive_kv_cache("glm-5", "trtllm", "h200", tp=8)
    with pytest.raises(BadValue, match="no checkpoint of deepseek-v4-flash"):
        derive_kv_cache("deepseek-v4-flash", "vllm==0.33.0", "h200", tp=8)
    with pytest.raises(BadValue, match="not read"):
        derive_kv_cache("glm-5", "vllm==0.11.0", "h200", tp=8)
    with pytest.raises(BadValue, match="kv_cache_dtype 'fp16'"):
        derive_kv_cache("glm-5", "vllm==0.33.0", "h200", tp=8, kv_cache_dtype="fp16")


def test_grid_derives_per_release_and_names_where_the_cache_comes_from():
    grid = Grid.of(model="glm-5", concurrency=(48,), isl=(10240,), osl=(64,), engine=("vllm==0.16.0", "vllm==0.33.0"),
                strategy=("engine",), tp=8, kv_cache_tokens="auto", async_scheduling=False)
    assert grid.kv_cache_tokens_on("vllm==0.16.0") != grid.kv_cache_tokens_on("vllm==0.33.0")  # 0.9 vs 0.92
    (config,) = grid.schedulers("vllm==0.33.0")
    assert config.num_kv_blocks * config.block_size == grid.kv_cache("vllm==0.33.0").tokens
    assert "tokens per GPU (derived: gpu_memory_utilization 0.92" in grid.not_default("vllm==0.33.0")
    with pytest.raises(BadValue, match="only with kv_cache_tokens auto"):
        Grid.of(model="glm-5", concurrency=(1,), isl=(1024,), kv_cache_dtype="fp8")


def test_frontier_with_a_derived_cache_runs_and_names_it(tmp_path, capsys):
    out = tmp_path / "x.csv"
    assert main(["frontier", "--model", "glm-5", "--engine", "vllm==0.16.0", "--tp", "8", "--speculative-tokens", "2",
                 "--strategy", "engine", "--concurrency", "48", "--isl", "10240", "--osl", "64", "--free-gib", "5.56",
                 "--kv-cache-tokens", "auto", "--no-async-scheduling", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "kv_cache_tokens=244,928 tokens per GPU (derived" in text and "OOM" in text
    assert main(["frontier", "--model", "glm-5", "--gpu-memory-utilization", "0.9", "--out", str(out)]) == 2
    assert "only with kv_cache_tokens auto" in capsys.readouterr().err


def test_tp_row_sharding_of_vllm_0_33_is_refused_where_it_would_apply(tmp_path, capsys):
    # vLLM 0.33.0 splits a step of >= 65,536 prefill rows over its TP ranks (indexer_tp_shard_min_rows):
    # never at its default 8,192-16,384 batched tokens, so only such a scheduler is refused, in one line
    args = ["frontier", "--model", "glm-5", "--tp", "8", "--concurrency", "1", "--isl", "65536", "--osl", "1"]
    assert main(args + ["--max-num-batched-tokens", "65536", "--out", str(tmp_path / "x.csv")]) == 2
    assert "split over the TP ranks" in capsys.readouterr().err
    assert main(args + ["--max-num-batched-tokens", "65536", "--engine", "vllm==0.30.0",
                        "--out", str(tmp_path / "x.csv")]) == 0
    assert main(args + ["--out", str(tmp_path / "y.csv")]) == 0  # another grid: another table


def test_the_servers_indexer_tp_shard_min_rows_moves_where_vllm_0_33_splits_rows(tmp_path, capsys):
    # vLLM 0.33.0's attention config indexer_tp_shard_min_rows (default 65,536; data/engines/vllm-0.33.json
    # with its source): a TP grid whose batched tokens stay below the value given splits no step, so it is
    # planned, its rows are the TP 1 grid's (TP changes no step) and the value is named as not the default
    from indexer_lib.engines import get_engine
    from indexer_lib.sweep.rows import model_rows

    assert get_engine("vllm==0.33.0").tp_prefill_row_shard_min_rows == 65_536
    grid = dict(model="glm-5", concurrency=(1, 4), isl=(65536,), osl=(1,), max_num_batched_tokens=65536,
                strategy=("vllm", "engine"), budget_mb=(512,))
    with pytest.raises(BadValue, match="its indexer_tp_shard_min_rows"):
        Grid.of(**grid, tp=8)
    with pytest.raises(BadValue, match="indexer_tp_shard_min_rows as given") as e:
        Grid.of(**grid, tp=8, indexer_tp_shard_min_rows=4096)
    assert e.value.name == "tp" and "\n" not in str(e.value)
    later = Grid.of(**grid, tp=8, indexer_tp_shard_min_rows=131_072)
    rows, alone = list(model_rows(later)), list(model_rows(Grid.of(**grid)))
    named = "max_num_batched_tokens=65536 (default 8192); indexer_tp_shard_min_rows=131072 (default 65536)"
    assert later.not_default() == named + "; tp=8" and {r["not_default"] for r in rows} == {named}

    def numbers(row):
        return {k: v for k, v in row.items() if k not in ("tp", "not_default")}

    assert len(rows) == 4 and [numbers(r) for r in rows] == [numbers(r) for r in alone]
    # at the release's own value nothing is named; where no release splits rows it is refused
    at_default = Grid.of(**grid, indexer_tp_shard_min_rows=65_536)
    assert at_default.not_default() == "max_num_batched_tokens=65536 (default 8192)"
    with pytest.raises(BadValue, match="no release of the grid splits prefill rows over TP") as e:
        Grid.of(**grid, engine="vllm==0.30.0", indexer_tp_shard_min_rows=131_072)
    assert e.value.name == "indexer_tp_shard_min_rows"
    with pytest.raises(BadValue, match="indexer_tp_shard_min_rows 0: must be a whole number >= 1"):
        Grid.of(**grid, indexer_tp_shard_min_rows=0)
    # the command line takes it as it takes the grid's other settings, frontier and auto alike
    args = ["--model", "glm-5", "--tp", "8", "--max-num-batched-tokens", "65536", "--indexer-tp-shard-min-rows",
            "131072"]
    assert main(["frontier", *args, "--concurrency", "1", "--isl", "65536", "--osl", "1", "--strategy", "vllm",
                 "--budget-mb", "512", "--out", str(tmp_path / "x.csv")]) == 0
    assert "indexer_tp_shard_min_rows=131072 (default 65536)" in capsys.readouterr().out
    assert main(["auto", *args, "--workload", "1x65536x1", "--free-gib", "5"]) in (0, 1)
    assert "indexer_tp_shard_min_rows=131072 (default 65536)" in capsys.readouterr().out
    assert main(["auto", *args[:-1], "4096", "--workload", "1x65536x1", "--free-gib", "5"]) == 2
    assert "indexer_tp_shard_min_rows as given" in capsys.readouterr().err


def test_auto_sizes_sglangs_cache_with_its_own_static_fraction(capsys):
    assert main(["auto", "--model", "glm-5", "--engine", "sglang==0.5.23", "--tp", "8", "--kv-cache-tokens", "auto",
                 "--no-async-scheduling", "--mem-fraction-static", "0.85", "--workload", "8x10240x64",
                 "--free-gib", "5"]) == 0
    expected = derive_kv_cache("glm-5", "sglang==0.5.23", "h200", tp=8, fraction=0.85)
    assert f"kv_cache_tokens={expected.tokens:,} tokens per GPU (derived: mem_fraction_static 0.85" in capsys.readouterr().out

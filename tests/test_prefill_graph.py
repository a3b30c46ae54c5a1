"""SGLang's breakable prefill CUDA graph for DeepSeek-V4 (0.5.21-0.5.23): the C4 logits it captures
into its graph pool, a boot line of the ledger taken from the memory free when a step runs, held to
the release's own bucket generator and to the sizes its pull request states."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from indexer_lib.cli.main import main
from indexer_lib.ledger.boot import graph_buckets, prefill_graph_line
from indexer_lib.ledger.deployment import Server, deployment_ledger, what_ifs
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import GIB, get_model
from indexer_lib.workload import ClosedLoopWorkload

from test_engines import sglang_src

V4 = PlanSettings("deepseek-v4-flash", "sglang==0.5.23", temporaries="deepgemm")
WORKLOAD = ClosedLoopWorkload(4, 65536, 16)


@pytest.mark.parametrize("release", ("0.5.21", "0.5.23"))
def test_the_buckets_are_the_releases_own(release):
    path = Path(sglang_src(release, "sglang/srt/arg_groups/cuda_graph_hook.py")) / "sglang/srt/arg_groups/cuda_graph_hook.py"
    tree = ast.parse(path.read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "generate_prefill_cuda_graph_batch_sizes"]
    scope: dict = {}
    exec(compile(ast.Module([fn], []), str(path), "exec"), scope)
    theirs = scope["generate_prefill_cuda_graph_batch_sizes"]
    for max_bs in (4, 100, 4096, 4700, 8192, 16384):
        assert graph_buckets(max_bs) == theirs(max_bs)
    assert len(graph_buckets(8192)) == 58 and len(graph_buckets(16384)) == 74


def test_the_captured_logits_are_the_largest_bucket_at_the_context_width():
    # the model's 1M context plus the request-to-token row's 4 tokens: 4,097 pages of 64 entries,
    # which DeepGEMM's paged kernel aligns to 262,400 columns; sgl-project/sglang#36534 states
    # "N=8192 ... 8GB"
    line = prefill_graph_line(V4, 8192, 1_048_576, 0)
    assert line.phase == "boot" and line.bytes == 8192 * 262_400 * 4
    assert "262,208 columns" in line.detail and "8,192 rows" in line.detail
    assert prefill_graph_line(V4, 16384, 1_048_576, 0).bytes == 2 * line.bytes
    # bounded: rounded up to a 256-token page, no headroom
    assert prefill_graph_line(V4, 8192, 1_048_576, 0, 131_072).bytes == 8192 * 32_768 * 4 == 1 * GIB
    assert prefill_graph_line(V4, 8192, 1_048_576, 0, 131_000).bytes == 1 * GIB


def test_the_graph_pool_takes_the_free_memory_not_the_kv_cache():
    off = deployment_ledger(Server("deepseek-v4-flash", "sglang==0.5.23"), WORKLOAD)
    on = deployment_ledger(Server("deepseek-v4-flash", "sglang==0.5.23", cuda_graph_prefill=True), WORKLOAD)
    (graph,) = [line for line in on.run.ledger.of("boot") if line.name == "prefill CUDA graph's C4 logits"]
    assert not [line for line in off.run.ledger.of("boot") if line.name == graph.name]  # off by default
    assert on.free.bytes == off.free.bytes - graph.bytes and "graph's pool" in on.free.source
    assert "--cuda-graph-backend-prefill breakable" in on.not_default
    # a free memory given is what is free when a step runs: the pool is already out of it
    given = deployment_ledger(Server("deepseek-v4-flash", "sglang==0.5.23", cuda_graph_prefill=True), WORKLOAD,
                              free_gib=4.0)
    assert given.free.bytes == 4 * GIB


def test_the_what_if_bounds_the_graph_to_the_workloads_longest_context():
    server = Server("deepseek-v4-flash", "sglang==0.5.23", cuda_graph_prefill=True)
    (name, bounded), = [w for w in what_ifs(server, get_model("deepseek-v4-flash"), 65_552)
                        if "prefill-max-context" in w[0]]
    assert bounded.cuda_graph_prefill_max_context == 65_792  # rounded up to 256
    assert not [w for w in what_ifs(Server("deepseek-v4-flash", "sglang==0.5.23"), get_model("deepseek-v4-flash"),
                                     65_552) if "prefill-max-context" in w[0]]


@pytest.mark.parametrize("argv, message", [
    (["--model", "glm-5", "--cuda-graph-backend-prefill", "breakable"], "modelled for DeepSeek-V4"),
    (["--model", "deepseek-v4-flash", "--cuda-graph-prefill-max-context", "1000"], "turn it on"),
    (["--model", "deepseek-v4-flash", "--cuda-graph-backend-prefill", "breakable",
      "--cuda-graph-prefill-max-context", "0"], "must be in [1,"),
])
def test_bad_graph_flags_are_refused_in_one_line(capsys, argv, message):
    assert main(["deploy", "--engine", "sglang==0.5.23", "--workload", "4x4096x16", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1

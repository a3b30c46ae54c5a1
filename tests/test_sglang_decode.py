"""SGLang's decode line (docs/design.md#the-ledger): its DSA indexer's paged logits at the static
page table's width, the SM-count chunks of 0.5.20 on, and the decode CUDA graph whose pool holds
the largest capture's logits; held to the releases' own code where it runs on a CPU
(tests/engine_oracles/sglang_decode.py), else to their source."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from indexer_lib.engines import decode_graph_max_bs, get_engine
from indexer_lib.ledger.deployment import Server, deployment_ledger
from indexer_lib.memory.decode import decode_logits_cols, decode_step_bytes, page_table_tokens
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import GIB, get_gpu, get_model
from indexer_lib.workload import ClosedLoopWorkload

from test_engines import run_oracle, sglang_src

CHUNKED = ("0.5.20", "0.5.21", "0.5.22", "0.5.23")
GLM5 = get_model("glm-5").max_model_len  # 202,752


def stride_bytes(rows: int, cols: int) -> int:
    """DeepGEMM's paged fp32 logits: [rows, align(cols, 256)]."""
    return rows * -(-cols // 256) * 256 * 4


@pytest.mark.parametrize("release", CHUNKED)
def test_the_decode_logits_are_the_releases_own(release):
    """Rows above and below the SM count, the model's context and short ones: the bytes its split
    path holds at once and the columns it asks for, from the release's own code."""
    src = sglang_src(release, needs="sglang/kernels/ops/attention/dsa/paged_mqa_logits.py")
    engine = f"sglang=={release}"
    profile = get_engine(engine)
    cases = [(rows, mml, gpu) for rows in (1, 64, 132, 133, 256, 300) for mml in (GLM5, 100_000, 4096)
             for gpu in ("h200", "b200")]
    request = {"paged": [{"rows": r, "width": page_table_tokens(profile, mml), "sm_count": get_gpu(g).sm_count}
                         for r, mml, g in cases],
               "headroom": [0, 1, 2, 3, 5],
               "tiers": [{"gpu_mib": get_gpu(g).capacity_bytes // 2**20, "tp": tp, "max_running_requests": n}
                         for g in ("h100", "h200", "b200") for tp in (1, 4) for n in (None, 100, 2048)]}
    theirs = run_oracle(sys.executable, "sglang_decode.py", request, src)
    for (rows, mml, gpu), result in zip(cases, theirs["paged"], strict=True):
        settings = PlanSettings("glm-5", engine, temporaries="deepgemm", gpu=gpu)
        assert decode_logits_cols(profile, settings.preset, mml) == result["max_seq_len"]
        assert decode_step_bytes(settings, rows, mml) == result["peak"], (rows, mml, gpu)
    for drafts, extra in zip(request["headroom"], theirs["headroom"], strict=True):
        assert page_table_tokens(profile, GLM5, drafts) == GLM5 + extra
    for case, max_bs in zip(request["tiers"], theirs["tiers"], strict=True):
        gpu = {get_gpu(g).capacity_bytes // 2**20: g for g in ("h100", "h200", "b200")}[case["gpu_mib"]]
        # and the capture list is clamped to the request pool, max_running_requests a rank
        # (0.5.23 model_executor/runner/base_cuda_graph_runner.py:77-101, which the hook's own cap
        # of 0.5.22 on repeats)
        cap = case["max_running_requests"] or max_bs
        assert decode_graph_max_bs(profile, gpu, case["tp"], case["max_running_requests"]) == min(max_bs, cap)


def test_the_chunked_step_holds_the_chunks_and_their_join():
    """0.5.20 on an H200 (132 SMs): 256 rows are 132 + 124 DeepGEMM allocations and torch.cat's copy."""
    settings = PlanSettings("glm-5", "sglang==0.5.23", temporaries="deepgemm")
    cols = decode_logits_cols(settings.profile, settings.preset, GLM5)
    assert cols == 202_816  # 202,752 + 4 rounded up to 64-token pages
    assert decode_step_bytes(settings, 132, GLM5) == stride_bytes(132, cols)
    assert decode_step_bytes(settings, 256, GLM5) == stride_bytes(256, cols) + 256 * cols * 4
    older = PlanSettings("glm-5", "sglang==0.5.17", temporaries="deepgemm")
    assert decode_step_bytes(older, 256, GLM5) == stride_bytes(256, cols)  # one call
    assert decode_step_bytes(settings, 256, GLM5, graph_bs=256) == 0  # a graph replay allocates nothing


@pytest.mark.parametrize("release, width, chunked", [
    ("0.5.14", r"self\.max_context_len \+ \(self\.speculative_num_draft_tokens or 0\)", False),
    ("0.5.15", r"max_ctx_len = self\.req_to_token\.shape\[1\]", False),
    ("0.5.17", r"max_ctx_len = self\.req_to_token\.shape\[1\]", False),
])
def test_the_older_releases_width_and_single_call_are_their_source(release, width, chunked):
    """Where the oracle's files are missing (before 0.5.20), the facts restated from the source."""
    src = Path(sglang_src(release, needs="sglang/srt/layers/attention/dsa_backend.py"))
    backend = (src / "sglang/srt/layers/attention/dsa_backend.py").read_text()
    indexer = (src / "sglang/srt/layers/attention/dsa/dsa_indexer.py").read_text()
    assert re.search(width, backend)
    assert "max_seq_len = block_tables.shape[1] * page_size" in indexer
    assert ("torch.cat(logits_chunks" in indexer) == chunked
    profile = get_engine(f"sglang=={release}")
    assert profile.decode_logits_sm_chunks == chunked
    expected = "context+drafts" if release == "0.5.14" else "req-to-token"
    if release == "0.5.17":
        expected = "req-to-token-page-reserve"
        sizing = (src / "sglang/srt/mem_cache/allocation_sizing.py").read_text()
        assert "get_alloc_reserve_per_decode(server_args) + server_args.page_size - 1" in sizing
    assert profile.decode_page_table_width == expected
    assert page_table_tokens(profile, 1000, 3) == {"context+drafts": 1004, "req-to-token": 1008,
                                                   "req-to-token-page-reserve": 1071}[expected]


WORKLOAD = ClosedLoopWorkload(8, 2048, 16)


def test_deploy_counts_the_decode_graphs_pool_and_its_replays():
    """Eight requests on an H200: every decode replays the graph captured at 256 requests, whose
    pool holds the chunks and their join (396.3 MiB) and takes the memory free when a step runs."""
    d = deployment_ledger(Server("glm-5", "sglang==0.5.23"), WORKLOAD)
    (graph,) = [line for line in d.run.ledger.of("boot") if line.name == "decode CUDA graph's paged logits"]
    assert graph.bytes == stride_bytes(256, 202_816) + 256 * 202_816 * 4 == 415_563_776
    assert "256 requests" in graph.detail and "memory_hook.py" in graph.source
    (decode,) = d.run.ledger.of("decode")
    assert decode.bytes == 0 and "replayed in the decode CUDA graph" in decode.detail
    assert "8 decode tokens" in decode.detail  # the step that decodes the most
    assert d.free.bytes == int(get_gpu("h200").capacity_bytes * 0.1) - graph.bytes
    assert "decode CUDA graph's pool" in d.free.source


def test_a_batch_past_the_graph_runs_eagerly_and_tp4_captures_more():
    """300 requests decode eagerly past the 256 an H200 captures at TP 1; at TP 4 (512) they replay."""
    workload = ClosedLoopWorkload(300, 64, 64)
    d = deployment_ledger(Server("glm-5", "sglang==0.5.23"), workload)
    (decode,) = d.run.ledger.of("decode")
    assert decode.bytes == stride_bytes(300, 202_816) + 300 * 202_816 * 4
    assert "300 decode tokens x 202,816 columns" in decode.detail
    tp4 = deployment_ledger(Server("glm-5", "sglang==0.5.23", tp=4), workload)
    assert tp4.run.ledger.of("decode")[0].bytes == 0
    (graph,) = [line for line in tp4.run.ledger.of("boot") if line.name.startswith("decode CUDA graph")]
    assert graph.bytes == stride_bytes(512, 202_816) + 512 * 202_816 * 4


def test_drafts_and_a_given_max_running_requests_size_the_graph():
    """Two drafts: three rows a request, the page table 2 x 3 + 63 tokens past the context; at most
    the requests a server runs are captured."""
    d = deployment_ledger(Server("glm-5", "sglang==0.5.23", speculative_tokens=2, max_num_seqs=16), WORKLOAD)
    (graph,) = [line for line in d.run.ledger.of("boot") if line.name.startswith("decode CUDA graph")]
    cols = -(-(GLM5 + 69) // 64) * 64
    assert graph.bytes == stride_bytes(48, cols)  # 16 requests x 3 rows, one call (48 <= 132 SMs)


def test_where_the_decode_path_is_not_read_there_is_no_line():
    """SGLang's kpool path, and ROCm (aiter, its page size set by the Triton build): no decode line."""
    kpool = PlanSettings("glm-5.3-flash", "sglang==0.5.23", temporaries="deepgemm")
    assert decode_step_bytes(kpool, 64, 1_048_576) is None
    rocm = PlanSettings("glm-5", "sglang==0.5.23", temporaries="deepgemm", gpu="mi355x")
    assert decode_step_bytes(rocm, 64, GLM5) is None
    d = deployment_ledger(Server("glm-5", "sglang==0.5.23", gpu="mi355x"), WORKLOAD)
    assert not d.run.ledger.of("decode") and not [line for line in d.run.ledger.of("boot") if "decode" in line.name]

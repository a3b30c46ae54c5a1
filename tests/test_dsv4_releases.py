"""DeepSeek-V4 (compressed K) on every vLLM release that has a path for it, held to the releases'
own code (``.venv-engines``, ``bash scripts/install_engines.sh``): 0.20.0 to 0.31.0 pack a chunk's
compressed entries against the undivided workspace, 40 x max_model_len, while the layer gathers
them into a buffer of get_max_prefill_buffer_size // compress_ratio entries and slices each
chunk's K to it; 0.32.0 divides the chunker's workspace too; before 0.33.0 the logits are the full
[M, N] layout; from 0.27.0 no logits while the longest compressed K is at most top-k."""
from __future__ import annotations

import random
import re

import pytest

from test_engines import ENGINES, named_batches, random_batches, run_oracle, vllm_python

from indexer_lib.checks import BadValue
from indexer_lib.engines import engine_names, engines_for, get_engine
from indexer_lib.memory import make_plan
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import MIB, get_model
from indexer_lib.workload import StepBatch

DSV4_RELEASES = [n for n in engine_names("vllm") if (0, 20) <= tuple(int(p) for p in n.split("==")[1].split(".")[:2])]
TOPK = get_model("deepseek-v4-flash").topk


def source_line(release: str, path: str, line: int) -> str:
    """Line ``line`` (1-based) of ``path`` in the installed vLLM ``release``."""
    file = ENGINES / f"vllm-{release}" / "site" / "vllm" / path
    if not file.exists():
        pytest.skip(f"vLLM {release} ({file}) is not installed here: bash scripts/install_engines.sh")
    return file.read_text().splitlines()[line - 1]


def cited_lines(text: str) -> set[int]:
    """Every line a source text cites, ``:12`` or ``:10-14``."""
    return {n for a, b in re.findall(r":(\d+)(?:-(\d+))?", text) for n in range(int(a), int(b or a) + 1)}


@pytest.mark.parametrize("release, cited", [
    ("0.20.0", [("v1/attention/backends/mla/indexer.py", 249, "self.max_prefill_buffer_size = get_max_prefill_buffer_size("),
                ("v1/attention/backends/mla/indexer.py", 503, "compressed_seq_lens = seq_lens // self.compress_ratio"),
                ("v1/attention/backends/mla/indexer.py", 528, "self.max_prefill_buffer_size,"),
                ("model_executor/layers/deepseek_v4_attention.py", 1016,
                 "get_max_prefill_buffer_size(vllm_config) // self.compress_ratio"),
                ("model_executor/layers/sparse_attn_indexer.py", 195, "k_quant_full[: chunk.total_seq_lens]")]),
    ("0.30.0", [("v1/attention/backends/mla/indexer.py", 800, "self.max_prefill_buffer_size = get_max_prefill_buffer_size("),
                ("v1/attention/backends/mla/indexer.py", 1283, "self.max_prefill_buffer_size,"),
                ("models/deepseek_v4/attention.py", 984, "get_max_prefill_buffer_size(vllm_config) // self.compress_ratio"),
                ("models/deepseek_v4/attention.py", 1069, "indexer_metadata.max_seq_len // self.compress_ratio <= self.topk"),
                ("model_executor/layers/sparse_attn_indexer.py", 520, "k_quant_full[: chunk.max_local_total_seq_lens]")]),
    ("0.32.0", [("v1/attention/backends/mla/indexer.py", 1020, "get_max_prefill_buffer_size(self.vllm_config) // self.compress_ratio"),
                ("models/deepseek_v4/attention.py", 1086, "indexer_metadata.max_seq_len // self.compress_ratio <= self.topk")]),
])
def test_the_cited_lines_say_what_the_facts_say(release, cited):
    """The chunker's workspace (undivided before 0.32.0), the layer's K buffer divided by the
    ratio, each chunk's K sliced from it, the skip: in the release's own code, cited by its facts."""
    profile = get_engine(f"vllm=={release}")
    cites = " ".join(profile.sources.get(f, "") for f in ("compressed_kv", "compressed_pack_undivided",
                                                          "compressed_skip_short"))
    for path, line, text in cited:
        assert text in source_line(release, path, line), (path, line)
        assert line in cited_lines(cites), (release, path, line)
    assert profile.compressed_pack_undivided == (release != "0.32.0")


def compressed_steps(rng: random.Random, count: int) -> list[tuple]:
    """Steps in tokens (seq_lens at most 3 past a whole entry), their rows, a K buffer in entries and
    a budget; with many long requests of a few rows each, whose entries outgrow the buffer."""
    steps = []
    for b in named_batches() + random_batches(rng, count):
        seq = [s * 4 + rng.randint(0, 3) for s in b["seq_lens"]]
        steps.append((seq, b["query_lens"], b["workspace"] // 4, b["max_logits_bytes"]))
    for n in (8, 40, 64):  # packed past the buffer: n x 200K-token prompts, 16 rows each
        steps.append(([200_000 * 4] * n, [16] * n, 163_840 * 40 // 4, 512 * MIB))
    return steps


@pytest.mark.parametrize("release", ["0.20.0", "0.30.0", "0.32.0"])
def test_the_compressed_chunks_are_the_releases_own(release):
    """The release's own chunker on seq_len // 4 entries, against the workspace it is given (ratio
    times the K buffer before 0.32.0): the plan's chunks, chunk for chunk; each chunk's logits as
    wide as its K, capped at the buffer, and a chunk past the buffer flagged."""
    profile = get_engine(f"vllm=={release}")
    steps = compressed_steps(random.Random(release), 300)
    ratio = 4 if profile.compressed_pack_undivided else 1
    batches = [{"seq_lens": [s // 4 for s in seq], "query_lens": q, "workspace": w * ratio, "max_logits_bytes": budget}
               for seq, q, w, budget in steps]
    answer = run_oracle(vllm_python(release), "vllm_chunks.py", {"batches": batches})
    assert answer["vllm"] == release
    compared = past = 0
    for (seq, q, w, budget), b, result in zip(steps, batches, answer["results"], strict=True):
        plan = make_plan(StepBatch.from_lengths(q, seq), "engine", budget,
                         PlanSettings("deepseek-v4-flash", f"vllm=={release}", workspace_tokens=w, temporaries="deepgemm"))
        if max(b["seq_lens"]) <= TOPK and profile.compressed_skip_short:
            assert plan.chunks == ()
            continue
        assert [[*c.requests, *c.rows] for c in plan.chunks] == result["chunks"], b
        for c in plan.chunks:
            kv = sum(b["seq_lens"][c.requests[0]:c.requests[1]])
            assert c.kv_tokens == kv or c.num_requests == 1
            assert c.logits_cols == (min(c.kv_tokens, w) if ratio > 1 else c.kv_tokens)
            assert c.over_budget == (c.kv_tokens > w) or c.num_requests == 1
            past += c.kv_tokens > w and c.num_requests > 1  # packed past the buffer
        compared += 1
    assert compared >= 250
    assert (past > 0) == profile.compressed_pack_undivided


@pytest.mark.parametrize("release, skips", [("0.26.0", False), ("0.27.0", True), ("0.31.0", True)])
def test_a_step_of_short_prompts_skips_the_logits_from_0_27_0(release, skips):
    short = StepBatch.from_lengths([1024] * 4, [1024] * 4)  # 256 entries each, at most top-k
    plan = make_plan(short, "engine", 512 * MIB, PlanSettings("deepseek-v4-flash", f"vllm=={release}",
                                                              temporaries="deepgemm"))
    assert (plan.chunks == ()) == skips
    assert get_engine(f"vllm=={release}").compressed_skip_short == skips


@pytest.mark.parametrize("release", DSV4_RELEASES)
@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_every_release_with_a_dsv4_path_plans_it(release, model):
    profile = get_engine(release)
    assert profile.compressed_kv and release in engines_for(get_model(model))
    one_m = make_plan(StepBatch.from_lengths([8192], [1_048_576]), "engine", 512 * MIB,
                      PlanSettings(model, release, temporaries="deepgemm"))
    assert one_m.num_chunks == 16 and {c.logits_cols for c in one_m.chunks} == {262_144}


def test_the_releases_before_the_dsv4_path_keep_the_plain_refusal():
    with pytest.raises(BadValue, match=r"\(4x-compressed K\) is not modelled; modelled on") as refused:
        PlanSettings("deepseek-v4-flash", "vllm==0.19.0", temporaries="deepgemm")
    assert "vllm==0.20.0-0.33.0" in str(refused.value)

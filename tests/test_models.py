"""Models as data (``data/models/``): every fact with its source, a model as a list of indexer
layer kinds, the models the planners model and why the others are refused."""
from __future__ import annotations

import json

import pytest

from indexer_lib.checks import BadValue
from indexer_lib.cli.main import main
from indexer_lib.engines import get_engine
from indexer_lib.plan import PlanSettings
from indexer_lib.memory import make_plan
from indexer_lib.refdata import data_path
from indexer_lib.presets import MODELS, get_model, known_models
from indexer_lib.workload import StepBatch

FILES = sorted(data_path("models").glob("*.json"))
ALL = {"deepseek-v3.2", "glm-5", "glm-5.1", "glm-5.2", "glm-5.3-flash", "qwen3.8-flash-next",
       "deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4.1-flash"}


def facts_of(doc: dict):
    yield from doc["facts"].items()
    for kind in doc["layer_kinds"]:
        yield from ((f"{kind['name']}.{k}", v) for k, v in kind["facts"].items())


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_fact_has_a_value_a_source_and_says_whether_it_was_seen_there(path):
    doc = json.loads(path.read_text())
    assert doc["model"] == path.stem and doc["what"] and doc["layer_kinds"]
    for name, fact in facts_of(doc):
        assert set(fact) <= {"value", "source", "verified", "note"} and "value" in fact, name
        assert isinstance(fact["source"], str) and len(fact["source"]) > 10, name
        assert isinstance(fact["verified"], bool), name
        assert "/work/" not in fact["source"] and "/tmp/" not in fact["source"], name
    model = known_models()[doc["model"]]
    unverified = {name for name, fact in facts_of(doc) if not fact["verified"]}
    assert set(model.unverified) == unverified  # every table that uses the model can say so


def test_the_models_of_2026_and_which_the_planners_model():
    assert set(known_models()) == ALL
    assert set(MODELS) == {"deepseek-v3.2", "glm-5", "glm-5.1", "glm-5.2", "deepseek-v4-flash", "deepseek-v4-pro",
                           "glm-5.3-flash", "deepseek-v4.1-flash",
                           "qwen3.8-flash-next"}
    # the two models the project was born with keep their shapes
    for name, shape in (("deepseek-v3.2", (64, 128, 2048, 64, 163_840)), ("glm-5", (32, 128, 2048, 64, 202_752))):
        m = get_model(name)
        assert (m.index_heads, m.head_dim, m.topk, m.kv_block, m.max_model_len) == shape
        assert m.indexer_layers == {"deepseek-v3.2": 61, "glm-5": 78}[name]


def test_layer_kinds_say_which_layers_compute_an_indexer():
    glm52 = get_model("glm-5.2")
    full, shared = glm52.layer_kinds
    assert glm52.max_model_len == 1_048_576 and glm52.indexer_layers == 21
    assert (full.name, full.indexer_layers, full.layers[:4]) == ("full", 21, (0, 1, 2, 6))
    assert not shared.computes_indexer and shared.reuse_layers == 57
    assert len(full.layers) + len(shared.layers) == 78
    v41 = known_models()["deepseek-v4.1-flash"]
    kinds = {k.name: k for k in v41.layer_kinds}
    assert (kinds["c2"].compress_ratio, kinds["c2"].indexer_layers, kinds["c2"].reuse_layers) == (2, 3, 15)
    assert kinds["c1_candidate_consumer"].candidates == 16_384 and v41.indexer_layers == 8
    # the layers from the last KV source (20) on run on each request's last sliding_window rows
    assert [kinds[k].replay_rows for k in ("c2", "c1_candidate_source", "c1_candidate_consumer")] == [None, 128, 128]
    assert v41.multi_kind and v41.compressed and not get_model("deepseek-v4-flash").multi_kind
    v4 = known_models()["deepseek-v4-flash"]
    (c4,) = v4.layer_kinds
    assert (c4.index_heads, c4.topk, c4.compress_ratio, c4.indexer_layers, v4.kv_block) == (64, 512, 4, 21, 256)
    assert known_models()["deepseek-v4-pro"].topk == 1024
    assert known_models()["glm-5.3-flash"].unverified == ("kv_block",)


def test_every_known_model_is_planned():
    # a model of data/models/ that no planner models would be refused by name ('not planned yet');
    # every model known today is planned on at least one release
    assert set(known_models()) == set(MODELS)


def test_glm_5_2_at_1m_context_on_vllm_0_33_uses_its_long_context_workspace(capsys):
    """vLLM 0.33 sizes the K workspace at 40 x max_model_len up to 256K and 16 x above."""
    assert get_engine("vllm==0.33.0").workspace_tokens(202_752) == 40 * 202_752
    assert get_engine("vllm==0.33.0").workspace_tokens(1_048_576) == 16 * 1_048_576
    assert get_engine("vllm==0.30.0").workspace_tokens(1_048_576) == 40 * 1_048_576
    plan = make_plan(StepBatch.from_lengths([8192], [1_048_576]), "engine", 512 * 2**20, PlanSettings("glm-5.2", "vllm"))
    assert plan.workspace_tokens == 16 * 1_048_576 and plan.num_chunks == 64
    assert main(["plan", "--model", "glm-5.2", "--query-lens", "8192", "--seq-lens", "1048576", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["peak_layer_kind"] == "full" and d["gpu"] == "h200" and d["unverified"] == []
    (kind,) = d["layer_kinds"]
    assert (kind["indexer_layers"], kind["layers"], kind["largest_logits_bytes"]) == (21, 21, d["largest_logits_bytes"])


def test_a_compressed_request_scores_its_k_in_entries():
    from indexer_lib.plan.packing import useful_area, window_sum

    step = StepBatch.from_lengths([4096, 100, 3], [371_968, 4000, 3])
    c = step.compressed(4)
    assert c.query_lens == step.query_lens and c.seq_lens == (92_992, 1000, 0) and c.kv_ratio == 4
    assert step.compressed(1) is step and c is step.compressed(4)  # made once per step
    for r in c.requests:  # row i at position context + i scores (context + i + 1) // 4 entries
        for a, b in ((0, r.query_len), (1, min(7, r.query_len)), (r.query_len // 2, r.query_len)):
            assert window_sum(r, a, b) == sum((r.context_len + i + 1) // 4 for i in range(a, b))
        assert r.window(r.query_len) == r.seq_len
    assert useful_area(c, 0, 3) == sum(window_sum(r, 0, r.query_len) for r in c.requests)
    with pytest.raises(ValueError, match="already compressed"):
        c.compressed(2)


def test_deepseek_v4_on_vllm_0_33_at_1m_context(capsys):
    """One 1M-token request, its last 8,192 rows: 262,144 C4 entries, 512 rows per 512 MiB chunk,
    two chunks' logits alive (about 1 GiB), on vLLM 0.33.0; 0.30.0 reserves a K buffer of 40 x
    max_model_len // 4 entries (16 x from 0.32.0), and 0.19.0 has no DeepSeek-V4 path."""
    argv = ["plan", "--model", "deepseek-v4-flash", "--query-lens", "8192", "--seq-lens", "1048576", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["num_chunks"] == 16 and d["largest_logits_bytes"] == 512 * 262_144 * 4
    assert d["workspace_tokens"] == 16 * 1_048_576 // 4 and d["peak_layer_kind"] == "c4"
    assert 2 * 512 * 2**20 <= d["peak_transient_bytes"] < 1.01 * 2**30
    for release, factor in (("0.30.0", 40), ("0.32.0", 16)):
        assert main(argv + ["--engine", f"vllm=={release}"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["num_chunks"] == 16 and d["workspace_tokens"] == factor * 1_048_576 // 4
    assert main(argv[:-1] + ["--engine", "vllm==0.19.0"]) == 2
    err = capsys.readouterr().err
    assert "; modelled on: sglang==0.5.12-0.5.23, trtllm==1.3.0rc15.post1-1.4.0rc4, vllm==0.20.0-0.33.0" in err
    assert main(["run", "--device", "meta", *argv[1:-1]]) == 2
    assert "which the executor does not compute" in capsys.readouterr().err
    # a short step: the longest compressed K is at most top-k (512), every entry selected, no logits
    assert main(["plan", "--model", "deepseek-v4-flash", "--query-lens", "2048", "--seq-lens", "2048", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_chunks"] == 0

"""DeepSeek-V4 (compressed K) on each vLLM release that has a path for it: 0.33.0 is modelled; 0.20.0
to 0.32.0 are refused with the way their path differs, read in the installed 0.20.0 and 0.30.0
sources (``.venv-engines``, ``bash scripts/install_engines.sh``): the chunker packs against the
undivided workspace, 40 x max_model_len entries, while the layer gathers into get_max_prefill_buffer_size
// compress_ratio entries."""
from __future__ import annotations

from pathlib import Path

import pytest

from indexer_lib.checks import BadValue
from indexer_lib.engines import engine_names, engines_for, get_engine
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import get_model

ENGINES = Path(__file__).resolve().parent.parent / ".venv-engines"
DSV4_RELEASES = [n for n in engine_names("vllm") if (0, 20) <= tuple(int(p) for p in n.split("==")[1].split(".")[:2])]


def source_line(release: str, path: str, line: int) -> str:
    """Line ``line`` (1-based) of ``path`` in the installed vLLM ``release``."""
    file = ENGINES / f"vllm-{release}" / "site" / "vllm" / path
    if not file.exists():
        pytest.skip(f"vLLM {release} ({file}) is not installed here: bash scripts/install_engines.sh")
    return file.read_text().splitlines()[line - 1]


@pytest.mark.parametrize("release, cited", [
    ("0.20.0", [("v1/attention/backends/mla/indexer.py", 249, "self.max_prefill_buffer_size = get_max_prefill_buffer_size("),
                ("v1/attention/backends/mla/indexer.py", 528, "self.max_prefill_buffer_size,"),
                ("model_executor/layers/deepseek_v4_attention.py", 1016,
                 "get_max_prefill_buffer_size(vllm_config) // self.compress_ratio"),
                ("model_executor/layers/sparse_attn_indexer.py", 195, "k_quant_full[: chunk.total_seq_lens]")]),
    ("0.30.0", [("v1/attention/backends/mla/indexer.py", 800, "self.max_prefill_buffer_size = get_max_prefill_buffer_size("),
                ("v1/attention/backends/mla/indexer.py", 1105, "self.max_prefill_buffer_size,"),
                ("models/deepseek_v4/attention.py", 984, "get_max_prefill_buffer_size(vllm_config) // self.compress_ratio"),
                ("model_executor/layers/sparse_attn_indexer.py", 520, "k_quant_full[: chunk.max_local_total_seq_lens]")]),
])
def test_the_cited_lines_say_what_the_refusal_says(release, cited):
    """The chunker's workspace is undivided, the layer's gather buffer divided by the ratio, and
    each chunk's K sliced from that buffer: the lines the refusal cites, in the release's own code."""
    reason = get_engine(f"vllm=={release}").compressed_kv_unmodelled
    for path, line, text in cited:
        assert text in source_line(release, path, line), (path, line)
        assert f"{path}:" in reason or f":{line}" in reason or path.split("/")[-1] in reason


@pytest.mark.parametrize("release", DSV4_RELEASES)
@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_every_release_with_a_dsv4_path_is_modelled_or_refused_with_its_reason(release, model):
    profile = get_engine(release)
    if release in engines_for(get_model(model)):
        assert profile.compressed_kv and profile.compressed_kv_unmodelled is None
        PlanSettings(model, release, temporaries="deepgemm")
        return
    assert profile.compressed_kv_unmodelled, f"{release}: a DeepSeek-V4 path and no reason it is not modelled"
    with pytest.raises(BadValue, match="is not modelled: ") as refused:
        PlanSettings(model, release, temporaries="deepgemm")
    assert profile.compressed_kv_unmodelled in str(refused.value)


def test_the_releases_before_the_dsv4_path_keep_the_plain_refusal():
    with pytest.raises(BadValue, match=r"\(4x-compressed K\) is not modelled; modelled on") as refused:
        PlanSettings("deepseek-v4-flash", "vllm==0.19.0", temporaries="deepgemm")
    assert get_engine("vllm==0.19.0").compressed_kv_unmodelled is None and "not modelled:" not in str(refused.value)

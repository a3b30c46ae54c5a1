"""vLLM 0.32.0 on ROCm: the same prefill path as 0.33.0 (``rocm_aiter_sparse_attn_indexer``, aiter's
FlyDSL kernel on gfx942 and its Triton/Gluon ``fp8_mqa_logits`` on gfx950, the decode logits in the
workspace), held to the lines its facts cite in the installed release (``.venv-engines/vllm-0.32.0``,
``bash scripts/install_engines.sh``) and planned byte for byte as 0.33.0 plans it."""
from __future__ import annotations

import random

import pytest

from test_engines import ENGINES

from indexer_lib.engines import get_engine, gpu_refusal
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import MIB
from indexer_lib.workload import StepBatch

ROCM = "v1/attention/ops/rocm_aiter_mla_sparse.py"


def line(path: str, number: int) -> str:
    file = ENGINES / "vllm-0.32.0" / "site" / "vllm" / path
    if not file.exists():
        pytest.skip(f"vLLM 0.32.0 ({file}) is not installed here: bash scripts/install_engines.sh")
    return file.read_text().splitlines()[number - 1]


@pytest.mark.parametrize("path, number, text", [
    (ROCM, 894, "def rocm_fp8_mqa_logits("),
    (ROCM, 924, "from aiter.ops.flydsl import flydsl_fp8_mqa_logits"),
    (ROCM, 936, "return fp8_mqa_logits(q, k_fp8, scale, weights, cu_seqlen_ks, cu_seqlen_ke)"),
    (ROCM, 1058, "def _max_decode_logits_rows("),
    (ROCM, 1081, "return min(num_batched_tokens, max_num_seqs * (1 + num_spec))"),
    (ROCM, 1156, "((decode_rows, max_model_len), torch.float32),"),
    (ROCM, 1245, "logits = rocm_fp8_mqa_logits("),
    ("model_executor/layers/sparse_attn_indexer.py", 1142, "return torch.ops.vllm.rocm_aiter_sparse_attn_indexer("),
])
def test_the_rocm_facts_cite_the_releases_own_lines(path, number, text):
    assert text in line(path, number)
    sources = " ".join(get_engine("vllm==0.32.0").sources.get(f, "") for f in (
        "rocm_logits", "rocm_arches", "rocm_path", "rocm_decode_workspace"))
    assert f"{path.split('/')[-1]}:" in sources or path in sources


@pytest.mark.parametrize("gpu", ["mi300x", "mi355x"])
def test_vllm_032_plans_on_rocm_byte_for_byte_as_0_33_0(gpu):
    assert gpu_refusal("vllm==0.32.0", gpu) is None and gpu_refusal("vllm==0.31.0", gpu) is not None
    rng = random.Random(gpu)
    for _ in range(20):
        n = rng.randint(1, 6)
        seqs = [rng.randint(1, 200_000) for _ in range(n)]
        batch = StepBatch.from_lengths([rng.randint(1, s) for s in seqs], seqs)
        budget = rng.choice((64, 512, 2048)) * MIB
        plans = [make_plan(batch, "engine", budget, PlanSettings("glm-5", f"vllm=={r}", gpu=gpu, temporaries="deepgemm"))
                 for r in ("0.32.0", "0.33.0")]
        old, new = plans
        assert [(c.requests, c.rows, c.logits_bytes) for c in old.chunks] == \
            [(c.requests, c.rows, c.logits_bytes) for c in new.chunks]
        assert memory_report(old).peak == memory_report(new).peak

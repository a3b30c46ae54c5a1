"""The failures reported in the field, reproduced by the model, and named steps.

Published numbers (DESIGN.md sections 1, 3 and 5):
- GLM-5, concurrency 48-64 x ISL 10240, 8192 tokens per step, threshold 256,
  no logits budget: a ~9.89 GiB allocation (8,192 rows x ~324K KV);
- one 64K prompt in one step: 65,536^2 x 4 B = 16 GiB;
- a 64K prompt with --max-num-batched-tokens 32768 under DeepGEMM 2.1's padding:
  32,768 rows x 65,536 KV = 8.03 GiB.
"""
from __future__ import annotations

from .frontier import prefill_batches, worst_step
from ..padding import unpadded_logits_bytes
from ..plan import make_plan
from ..shapes import GIB
from ..workload import ClosedLoopWorkload, PrefillRequest, SchedulerConfig, StepBatch

# published GiB, how close the model must come (the 9.89 is quoted as "~"), and which
# bytes it counts: the 16 GiB figure is plain M x N x 4, the others what DeepGEMM allocates
PUBLISHED = {
    "glm5-c48-isl10240": (9.89, 0.02, "allocated_gib"),
    "glm5-c64-isl10240": (9.89, 0.02, "allocated_gib"),
    "prompt-64k-one-step": (16.0, 0.001, "unpadded_gib"),
    "prompt-64k-mnbt32768-dg2.1": (8.03, 0.001, "allocated_gib"),
}


def _case(name, model, workload, config, version, what):
    batches = prefill_batches(workload, config)
    w = worst_step(batches, "n-only", None, model=model, deepgemm_version=version,
                   topk_rows=config.max_num_batched_tokens)
    batch = next(b for b in batches if b.step == w.worst_step)
    plan = make_plan(batch, "n-only", None, model=model, deepgemm_version=version)
    chunk = max(plan.chunks, key=lambda c: c.logits_bytes)
    published, tolerance, counted = PUBLISHED[name]
    gib = {"unpadded_gib": unpadded_logits_bytes(chunk.num_rows, chunk.logits_cols) / GIB,
           "allocated_gib": chunk.logits_bytes / GIB}
    error = abs(gib[counted] - published) / published
    return {
        "case": name, "what": what, "model": model, "deepgemm_version": version,
        "concurrency": workload.concurrency, "isl": workload.isl,
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "rows": chunk.num_rows, "kv_tokens": chunk.logits_cols, **gib,
        "reproduced_gib": gib[counted], "published_gib": published, "relative_error": error,
        "tolerance": tolerance, "matches": error <= tolerance, "source": "modelled",
    }


def reproductions():
    """One row per reported failure: what the model reproduces, next to the published GiB."""
    import pandas as pd

    glm = SchedulerConfig(8192, 256, 256, block_size=64)
    rows = [
        _case("glm5-c48-isl10240", "glm-5", ClosedLoopWorkload(48, 10240, 64), glm, "2.6",
              "GLM-5, concurrency 48, ISL 10240, no logits budget: the reported OOM"),
        _case("glm5-c64-isl10240", "glm-5", ClosedLoopWorkload(64, 10240, 64), glm, "2.6",
              "GLM-5, concurrency 64, ISL 10240, no logits budget: the reported OOM"),
        _case("prompt-64k-one-step", "deepseek-v3.2", ClosedLoopWorkload(1, 65536, 1),
              SchedulerConfig(65536, 256, 0), "2.6",
              "one 64K prompt in one step (M x N x 4)"),
        _case("prompt-64k-mnbt32768-dg2.1", "deepseek-v3.2", ClosedLoopWorkload(1, 65536, 1),
              SchedulerConfig(32768, 256, 0), "2.1",
              "a 64K prompt, --max-num-batched-tokens 32768, DeepGEMM 2.1 padding"),
    ]
    return pd.DataFrame(rows)


def named_steps() -> dict[str, StepBatch]:
    """Typical and extreme prefill steps, each a single engine step."""
    return {
        # typical: 8 fresh 1K prompts in one 8K-token step
        "typical: 8 x 1K fresh prompts": StepBatch(tuple(PrefillRequest(0, 1024) for _ in range(8))),
        # typical chunked prefill: one 32K prompt's 3rd 8K chunk
        "typical: 8K chunk at 16K context": StepBatch((PrefillRequest(16384, 8192),)),
        # the reported OOM: 32 partial prefills of 10K prompts, 256 new tokens each
        "extreme: 32 x (9984 + 256), GLM-5 OOM": StepBatch(
            tuple(PrefillRequest(9984, 256) for _ in range(32))),
        # one 64K prompt in one step
        "extreme: one 64K prompt": StepBatch((PrefillRequest(0, 65536),)),
        # ATOM's shared prefix: ~111K cached + 3.5K new, two requests of a step
        "extreme: 2 x (111K prefix + 3.5K)": StepBatch(
            tuple(PrefillRequest(111 * 1024, 3584) for _ in range(2))),
    }

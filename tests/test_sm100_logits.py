"""vLLM 0.33.0 on SM100 (B200, B300): DeepGEMM returns bf16 logits and the release copies them to
fp32 at their strides while both are alive; the memory model counts the pair, byte for byte.

The rules, restated here from their sources:
- DeepGEMM (vllm-project/DeepGEMM 001ed5f csrc/apis/attention.hpp fp8_fp4_mqa_logits, "Allocate
  output"; upstream 54e2261 csrc/apis/attention.hpp:159-178): ``[align(M, 128 / H), S]`` of the
  logits dtype, the row stride S aligned to 1024 bytes (512 bf16 elements): ``align(align(W, 256),
  512)`` with max_seqlen_k = W, else ``align(N + 256, 512)``; the returned view is ``[M, W]``.
- vLLM 0.33.0 model_executor/layers/sparse_attn_indexer.py:304-325 as_fp32_logits:
  ``torch.empty_strided(logits.shape, logits.stride(), float32)``: ``(M - 1) x S + W`` fp32
  elements; :727-737 the chunk loop calls it on fp8_fp4_mqa_logits' result, so the bf16 block is
  alive while the copy is allocated and filled, next to the previous chunk's fp32 logits.
"""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer_lib.checks import BadValue
from indexer_lib.engines import get_engine, gpu_refusal
from indexer_lib.fast import ShapePlanner, ShapesPeak, plan_shapes, shapes_peak
from indexer_lib.fast import shapes as fast_shapes
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.memory.events import live_peak, plan_events
from indexer_lib.padding import get_rules, upcast_counters
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import MIB
from indexer_lib.workload import PrefillRequest, StepBatch


def restated(rows, cols, heads, compressed=True):
    """(bf16 block, fp32 copy) in bytes, as the module docstring restates the two sources."""
    def align(x, m):
        return -(-x // m) * m
    stride = align(align(cols, 256), 512) if compressed else align(cols + 256, 512)
    bf16 = align(rows, 128 // heads) * stride * 2
    copy = ((rows - 1) * stride + cols) * 4 if rows and cols else 0
    return bf16, copy


@pytest.mark.parametrize("rows, cols, heads, compressed, bf16, copy", [
    (2048, 65536, 64, True, 2048 * 65536 * 2, 2048 * 65536 * 4),
    (3, 300, 64, True, 4 * 512 * 2, (2 * 512 + 300) * 4),  # rows to 4 (128 / 64 = 2), stride 512
    (5, 769, 32, True, 8 * 1024 * 2, (4 * 1024 + 769) * 4),  # rows to 8, align(1024, 512)
    (1, 1, 64, True, 2 * 512 * 2, 4),
    (7, 100, 64, False, 8 * 512 * 2, (6 * 512 + 100) * 4),  # full layout: align(356, 512)
    (7, 300, 32, False, 8 * 1024 * 2, (6 * 1024 + 300) * 4),  # align(556, 512)
    (4, 0, 64, True, 0, 0),
])
def test_the_bf16_block_and_its_fp32_copy_are_byte_exact(rows, cols, heads, compressed, bf16, copy):
    copy_of, staged_of = upcast_counters(get_rules("2.8"), heads, 1024)
    assert (staged_of(rows, cols, compressed), copy_of(rows, cols, compressed)) == (bf16, copy)
    assert restated(rows, cols, heads, compressed) == (bf16, copy)


@pytest.mark.parametrize("rows, cols, heads", [(3, 300, 64), (5, 769, 32), (1, 1, 64), (64, 4097, 64)])
def test_the_copy_is_what_torch_allocates_at_the_bf16_strides(rows, cols, heads):
    """Differential against torch itself: DeepGEMM's bf16 view, then as_fp32_logits' empty_strided."""
    stride = -(-(-(-cols // 256) * 256) // 512) * 512
    block = torch.empty((-(-rows // (128 // heads)) * (128 // heads), stride), dtype=torch.bfloat16)
    view = block[:rows, :cols]
    copy = torch.empty_strided(view.shape, view.stride(), dtype=torch.float32)
    copy_of, staged_of = upcast_counters(get_rules("2.8"), heads, 1024)
    assert staged_of(rows, cols, True) == block.untyped_storage().nbytes()
    assert copy_of(rows, cols, True) == copy.untyped_storage().nbytes()


def test_the_pair_is_modelled_on_the_builds_with_a_1024_byte_stride_only():
    for version in ("2.6", "2.7", "2.8"):
        upcast_counters(get_rules(version), 64, 1024)
    with pytest.raises(BadValue, match="DeepGEMM 2.5.0 aligns an fp32 logits row to 256 bytes, not the 1024"):
        upcast_counters(get_rules("2.5.0"), 64, 1024)
    with pytest.raises(BadValue, match="DeepGEMM 2.5.0"):  # a what-if build on a B200 says so at once
        PlanSettings("deepseek-v3.2", "vllm==0.33.0", "2.5.0", gpu="b200")
    assert get_engine("vllm==0.33.0").sm100_logits_stride_bytes == 1024
    assert get_engine("vllm==0.30.0").sm100_logits_stride_bytes is None


def test_the_pair_is_counted_where_the_release_copies_on_sm100_only():
    assert gpu_refusal("vllm==0.33.0", "b200") is None and gpu_refusal("vllm==0.33.0", "b300") is None
    assert PlanSettings("deepseek-v3.2", "vllm==0.33.0", gpu="b200").upcast
    assert PlanSettings("deepseek-v3.2", "vllm==0.33.0", gpu="b300").upcast
    assert not PlanSettings("deepseek-v3.2", "vllm==0.33.0", gpu="h200").upcast
    assert not PlanSettings("deepseek-v3.2", "vllm==0.30.0", gpu="b200").upcast  # fp32 on every GPU
    assert PlanSettings("deepseek-v3.2", "vllm==0.33.0", gpu="h200").staged is None


def _plans(gpu: str, temporaries="deepgemm"):
    batch = StepBatch((PrefillRequest(0, 8192), PrefillRequest(57344, 8192)))
    on = PlanSettings("deepseek-v3.2", "vllm==0.33.0", gpu=gpu, temporaries=temporaries)
    plan = make_plan(batch, "engine", 512 * MIB, on)
    return plan, memory_report(plan, topk_rows=16384)


def test_a_b200_plan_peaks_above_the_h200_one_by_the_bf16_block():
    """Same chunks (vLLM budgets M x N x 4 on both); the B200's largest chunk adds its bf16 block
    alive with its fp32 copy and the previous chunk's fp32 logits."""
    (b200, on_b200), (h200, on_h200) = _plans("b200"), _plans("h200")
    assert b200.chunks == h200.chunks and b200.num_chunks > 2
    heads = b200.settings.preset.index_heads
    held = 0
    for c, mem_b, mem_h in zip(b200.chunks, on_b200.chunks, on_h200.chunks):
        bf16, copy = restated(c.num_rows, c.logits_cols, heads)
        assert (mem_b.staged, mem_b.logits, mem_h.staged, mem_b.held) == (bf16, copy, 0, held)
        held = copy  # the previous chunk's fp32 copy, alive through the next chunk's logits call
    # 8192-row requests at 512 MiB: 2048-row chunks whose widest holds 64K columns (fp32 copy == fp32)
    widest = max(range(b200.num_chunks), key=lambda i: on_h200.chunks[i].total)
    assert on_b200.chunks[widest].logits == on_h200.chunks[widest].logits
    assert on_b200.peak_transient - on_h200.peak_transient == on_b200.chunks[widest].staged > 0


@pytest.mark.parametrize("temporaries", ["deepgemm", None])
def test_the_events_hold_the_pair_at_the_reports_peak(temporaries):
    plan, report = _plans("b200", temporaries)
    events = plan_events(plan, report, "step", persistent=False)
    assert live_peak(events) == report.peak_transient
    assert any(e[0] == "malloc" and e[1].endswith("/staged") for e in events)


def test_the_shapes_give_the_b200_plans_peak():
    batch = StepBatch((PrefillRequest(0, 8192), PrefillRequest(57344, 8192)))
    on = PlanSettings("deepseek-v3.2", "vllm==0.33.0", gpu="b200", temporaries="deepgemm")
    report = memory_report(make_plan(batch, "engine", 512 * MIB, on), topk_rows=16384)
    assert shapes_peak(plan_shapes(batch, "engine", 512 * MIB, on), topk_rows=16384) == (report.peak_transient,
                                                                                         report.peak)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(temporaries=st.sampled_from(["deepgemm", None]), gpu=st.sampled_from(["b200", "b300"]),
       model=st.sampled_from(["glm-5", "deepseek-v3.2", "deepseek-v4-flash"]),
       shapes=st.lists(st.tuples(st.integers(1, 9000), st.integers(1, 1_100_000), st.booleans(),
                                 st.one_of(st.none(), st.integers(1, 9000)), st.integers(1, 1_100_000),
                                 st.booleans()), min_size=1, max_size=4))
def test_a_shapes_fast_total_is_the_memory_models_on_sm100(temporaries, gpu, model, shapes):
    """The frontier's per-shape count (``ChunkBytes``) and ``chunk_memory`` agree on the pair."""
    on = PlanSettings(model, "vllm==0.33.0", gpu=gpu, temporaries=temporaries)
    peak_of = ShapesPeak(ShapePlanner("vllm", on).record(StepBatch((PrefillRequest(0, 8),))))
    shapes = [fast_shapes.ChunkShape(*s) for s in shapes]
    for before in [None] + shapes:
        for shape in shapes:
            assert peak_of._pair_total((before, shape)) == peak_of.memory_total((before, shape))


@pytest.mark.parametrize("decode_tokens, max_model_len", [(1, 163840), (1024, 163840), (96, 100_000)])
def test_a_decode_step_holds_the_paged_bf16_logits_and_their_copy(decode_tokens, max_model_len):
    """vLLM 0.33.0 sparse_attn_indexer.py:877-893: the paged kernel's bf16 ``[R, align(align(max_model_len,
    256), 512)]`` (DeepGEMM 001ed5f fp8_fp4_paged_mqa_logits: rows not padded), copied to fp32 by
    as_fp32_logits under the default top-k backend ("auto")."""
    from indexer_lib.memory import decode_step_bytes
    b200 = PlanSettings("deepseek-v3.2", "vllm==0.33.0", gpu="b200")
    h200 = PlanSettings("deepseek-v3.2", "vllm==0.33.0", gpu="h200")
    stride = -(-(-(-max_model_len // 256) * 256) // 512) * 512
    bf16 = decode_tokens * stride * 2
    copy = ((decode_tokens - 1) * stride + max_model_len) * 4
    assert decode_step_bytes(b200, decode_tokens, max_model_len) == bf16 + copy
    assert decode_step_bytes(h200, decode_tokens, max_model_len) == decode_tokens * -(-max_model_len // 256) * 256 * 4


def test_the_replayed_path_on_sm100_holds_each_chunks_bf16_weights():
    """vLLM 0.33.0 utils/deep_gemm.py:615-635 mqa_logits_mx_inputs: weights.to(bfloat16), [rows, H]."""
    (plan, on_b200), (_, on_h200) = _plans("b200", "replay"), _plans("h200", "replay")
    heads = plan.settings.preset.index_heads
    for c, mem_b, mem_h in zip(plan.chunks, on_b200.chunks, on_h200.chunks):
        assert mem_b.metadata - mem_h.metadata == 2 * c.num_rows * heads
        assert mem_b.metadata == 4 * c.num_rows + 2 * c.num_rows * heads  # row_ends int32, weights bf16


def test_the_replay_refuses_a_gpu_whose_path_it_does_not_run(capsys):
    """The replay runs the release's sm90 path on the meta device (fp32 logits): on a B200 it would
    claim a path the release does not take there."""
    from indexer_lib.cli.main import main
    code = main(["replay", "--engine", "vllm==0.33.0", "--gpu", "b200", "--query-lens", "8", "--seq-lens", "8"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "GPU 'b200': vllm==0.33.0 replays its sm90 path" in err and "as_fp32_logits" in err


def test_the_studys_ceiling_counts_the_pair_on_sm100():
    """``study.bounds.ceiling_logits_bytes``: max_num_batched_tokens rows as wide as the longest
    prompt, on a B200 the bf16 block and its fp32 copy (GLM-5: 32 heads, rows to 4)."""
    from indexer_lib.study import bounds
    from indexer_lib.workload import ClosedLoopWorkload
    one = ClosedLoopWorkload(16, 4096, 16)
    from indexer_lib.engines import release_scheduler
    config = release_scheduler("vllm==0.33.0", 64, "b200")
    rows = config.max_num_batched_tokens
    bf16, copy = restated(rows, 4096, 32)
    settings = PlanSettings("glm-5", "vllm==0.33.0", gpu="b200")
    assert bounds.ceiling_logits_bytes(one, config, settings, "compressed") == bf16 + copy == rows * 4096 * 6

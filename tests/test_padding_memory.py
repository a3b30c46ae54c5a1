"""Byte-exact checks of DeepGEMM's padding rules and of the memory model."""
import pytest

from indexer_lib.memory import fits, make_plan, memory_report, metadata_bytes, peak_bytes
from indexer_lib.padding import DEEPGEMM_RULES, get_rules, unpadded_logits_bytes
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import GIB, MIB, get_model
from indexer_lib.workload import StepBatch


@pytest.mark.parametrize(
    "version, heads, rows, cols, want_rows, want_stride",
    [
        # 2.1 - 2.3: align(M, 4) rows, align(N + 256, 4) stride
        ("2.1", 64, 5, 100, 8, 356),
        ("2.2", 32, 8, 101, 8, 360),
        ("2.3", 64, 1, 1, 4, 260),
        # 2.4.2: align(M, 128 / H) rows, align(N + 256, 8) stride
        ("2.4.2", 64, 5, 100, 6, 360),
        ("2.4.2", 32, 5, 101, 8, 360),
        # 2.5.0: first release aligned to 8, later builds to 64
        ("2.5.0-initial", 64, 3, 100, 4, 360),
        ("2.5.0", 64, 3, 100, 4, 384),
        ("2.5.0", 32, 3, 1000, 4, 1280),
        # 2.6+: 1024-byte stride = 256 fp32
        ("2.6", 64, 7, 100, 8, 512),
        ("2.6", 32, 7, 1, 8, 512),
        ("2.7", 64, 2, 256, 2, 512),
    ],
)
def test_full_layout_padding(version, heads, rows, cols, want_rows, want_stride):
    rules = get_rules(version)
    assert rules.rows_allocated(rows, heads) == want_rows
    assert rules.row_stride(cols) == want_stride
    assert rules.logits_bytes(rows, cols, heads) == want_rows * want_stride * 4


@pytest.mark.parametrize("version", ["2.2", "2.4.2", "2.5.0", "2.6", "2.8"])
def test_compressed_layout_padding(version):
    rules = get_rules(version)
    # align(align(max_seqlen_k, 256), 256), rows as in the full layout
    assert rules.row_stride(1, compressed=True) == 256
    assert rules.row_stride(256, compressed=True) == 256
    assert rules.row_stride(257, compressed=True) == 512
    heads = 64
    assert rules.logits_bytes(3, 300, heads, compressed=True) == (
        rules.rows_allocated(3, heads) * 512 * 4)


def test_compressed_layout_exists_from_2_2():
    assert not DEEPGEMM_RULES["2.1"].has_compressed
    assert all(DEEPGEMM_RULES[v].has_compressed for v in DEEPGEMM_RULES if v != "2.1")
    assert not DEEPGEMM_RULES["2.8"].full_width


def test_published_allocation_8_03_gib():
    # a 64K prompt with --max-num-batched-tokens 32768 under DeepGEMM 2.1 rules
    nbytes = get_rules("2.1").logits_bytes(32_768, 65_536, heads=64)
    assert nbytes == 32_768 * 65_792 * 4
    assert round(nbytes / GIB, 2) == 8.03


def test_published_allocation_16_gib_unpadded():
    batch = StepBatch.from_lengths([65_536], [65_536])
    plan = make_plan(batch, "n-only", None)
    report = memory_report(plan, count_padding=False)
    assert report.chunks[0].logits == 16 * GIB


def test_published_allocation_1_42_gib():
    # 4,096 rows x 93,184 columns: N = 92,928 plus DeepGEMM's 256 extra columns
    assert round(unpadded_logits_bytes(4096, 93_184) / GIB, 2) == 1.42
    assert get_rules("2.1").logits_bytes(4096, 92_928, heads=64) == 4096 * 93_184 * 4


def test_unknown_version_names_the_value():
    with pytest.raises(ValueError, match=r"unknown DeepGEMM version '9\.9'"):
        get_rules("9.9")


def test_memory_report_by_hand():
    model = get_model("glm-5")  # H = 32: rows align to 4 from 2.4.2 on
    batch = StepBatch.from_lengths([3, 5], [10, 20])
    plan = make_plan(batch, "n-only", None, PlanSettings("glm-5", deepgemm_version="2.4.2", workspace_tokens=1000))
    assert plan.num_chunks == 1
    report = memory_report(plan, topk_rows=8192)
    rows_alloc = 8  # align(3 + 5, 4)
    stride = 288  # align(30 + 256, 8)
    assert report.chunks[0].logits == rows_alloc * stride * 4
    # ks + ke per row, one cache slot per gathered token (what prefill.execute allocates)
    assert report.chunks[0].metadata == 4 * (2 * 8 + 30)
    assert report.workspace == 1000 * (128 + 4)
    assert report.topk_buffer == 8192 * 2048 * 4  # 64 MiB at 8192 tokens
    assert report.topk_buffer == 64 * MIB
    assert report.peak == report.workspace + report.topk_buffer + report.peak_transient
    assert peak_bytes(plan, topk_rows=8192) == report.peak
    assert metadata_bytes(plan.chunks[0]) == report.chunks[0].metadata


def test_default_workspace_is_825_mib_for_deepseek():
    batch = StepBatch.from_lengths([1], [1])
    plan = make_plan(batch, "vllm", 512 * MIB)
    assert memory_report(plan).workspace == 40 * 163_840 * 132
    assert round(memory_report(plan).workspace / MIB) == 825


def test_fits_compares_transient_bytes_with_free_memory():
    batch = StepBatch.from_lengths([1024], [4096])
    plan = make_plan(batch, "n-only", None)
    transient = memory_report(plan).peak_transient
    assert fits(plan, transient)
    assert not fits(plan, transient - 1)


class PerRow:
    """A backend that counts its own temporaries: 1000 bytes a row."""

    def temporaries_bytes(self, plan, chunk, topk):
        return 1000 * chunk.num_rows


def test_temporaries_slot_is_added_per_chunk():
    batch = StepBatch.from_lengths([64, 64], [64, 128])
    plan = make_plan(batch, "per-request", 512 * MIB)
    report = memory_report(plan, temporaries=PerRow())
    assert [c.temporaries for c in report.chunks] == [64_000, 64_000]
    assert all(c.total == c.logits + c.metadata + c.temporaries for c in report.chunks)

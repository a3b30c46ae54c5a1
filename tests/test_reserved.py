"""Reserved vs allocated over a long prompt, by the caching-allocator model (modelled)."""
from __future__ import annotations

import pytest

from indexer_lib.cli import devicecheck as dc
from indexer_lib.notebook import plots
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.plan import PlanSettings
from indexer_lib.memory.events import live_peak, plan_events
from indexer_lib.study.reserved import long_prompt_steps, reserved_curve, reserved_table
from indexer_lib.presets import GIB, MIB

STEPS = long_prompt_steps(65_536, 8192)


def test_long_prompt_steps_cover_the_prompt_once():
    assert [(b.requests[0].context_len, b.num_rows) for b in STEPS] == \
        [(i * 8192, 8192) for i in range(8)]
    assert [b.num_rows for b in long_prompt_steps(10, 4)] == [4, 4, 2]


@pytest.mark.parametrize("budget_mb", [512, 2048])
def test_fixed_shape_reserved_stays_flat_after_the_first_step(budget_mb):
    rows = reserved_curve("fixed-shape", STEPS, budget_mb)
    assert all(r.logits_shapes == 1 for r in rows)
    assert len({r.max_logits_bytes for r in rows}) == 1  # one shape over the whole prompt
    assert {r.reserved for r in rows} == {rows[0].reserved}
    assert [r.new_segments for r in rows[1:]] == [0] * 7
    assert rows[-1].reserved - rows[-1].peak_allocated < 8 * MIB  # reserved ~ what is used


def test_growing_shapes_add_segments_and_reserved_outgrows_allocated():
    vllm = reserved_curve("vllm", STEPS, 2048)
    fixed = reserved_curve("fixed-shape", STEPS, 2048)
    # every new, larger logits size is a new segment: reserved keeps growing
    assert all(r.new_segments >= 1 for r in vllm)
    assert [r.reserved for r in vllm] == sorted(r.reserved for r in vllm)
    assert vllm[-1].reserved > 3 * vllm[-1].peak_allocated
    # both need about the same at their peak, but vllm's allocator holds > 3x as much
    assert abs(vllm[-1].peak_allocated - fixed[-1].peak_allocated) < 0.01 * fixed[-1].peak_allocated
    assert vllm[-1].reserved > 3 * fixed[-1].reserved
    # at 512 MiB the sizes stop growing after step 1: one extra segment, then reuse
    small = reserved_curve("vllm", STEPS, 512)
    assert [r.new_segments for r in small[1:]] == [1] + [0] * 6
    assert small[-1].reserved > reserved_curve("fixed-shape", STEPS, 512)[-1].reserved


def test_plan_events_follow_the_memory_model():
    batch = STEPS[3]
    for strategy in ("vllm", "kv-split", "fixed-shape"):
        plan = make_plan(batch, strategy, 64 * MIB, PlanSettings("glm-5"))
        report = memory_report(plan, temporaries="deepgemm")
        # everything freed at the step's end (live_peak refuses a block left over)
        assert live_peak(plan_events(plan, report, "x")) == report.peak, strategy


def test_traced_event_stream_replays_too():
    steps = long_prompt_steps(2048, 512)
    rows = reserved_curve("vllm", steps, 2, PlanSettings("glm-5", temporaries="deepgemm"), source="trace")
    assert len(rows) == 4 and all(r.reserved >= r.peak_allocated > 0 for r in rows)
    with pytest.raises(ValueError, match="source 'gpu'"):
        reserved_curve("vllm", steps, 2, source="gpu")


def test_reserved_table_and_figure(tmp_path):
    frame = reserved_table(16_384, 4096, 512)
    assert set(frame["strategy"]) == {"vllm", "causal", "fixed-shape"}
    assert set(frame["mode"]) == {"model"} and len(frame) == 12
    fig = plots.reserved_growth(frame)
    assert "modelled" in fig.get_suptitle()
    paths = plots.save(fig, tmp_path, "reserved", {"budget_mb": 512})
    assert all(p.exists() for p in paths)


def test_device_script_records_the_prediction_per_strategy(tmp_path):
    summary = dc.run(dc.dry_run_config(), tmp_path, stages=("reserved",), seed=2)
    assert summary["stages"]["reserved"]["status"] == "ok"
    rows = summary["results"]["reserved"]
    assert [r["context_len"] for r in rows] == [0, 32, 64, 96]
    for col in ("vllm", "causal", "fixed_shape"):
        assert all(r[f"predicted_reserved_{col}"] >= r[f"predicted_peak_allocated_{col}"] > 0
                   for r in rows)
        assert all(f"chunks_{col}" in r for r in rows)
    header = (tmp_path / "reserved.csv").read_text().splitlines()[0]
    assert "predicted_reserved_fixed_shape" in header
    assert rows[-1]["predicted_reserved_vllm"] < 2 * GIB


def test_the_reserved_curve_and_auto_count_the_same_free_memory():
    """Notebook 04's reserved section and ``auto`` on one 64K prompt in 8,192-token steps: a budget
    runs out of memory in the allocator's replay exactly where its worst step's transient peak
    (what auto holds against the free memory) does not fit; the K workspace and top-k output are
    held from boot, beyond the free memory, in both."""
    from indexer_lib.memory import plan_at
    from indexer_lib.presets import free_bytes_from_gib

    settings = PlanSettings("glm-5", "vllm==0.32.0", temporaries="deepgemm")
    steps = long_prompt_steps(65_536, 8192)
    seen = set()
    for free_gib in (1.5, 2.63):
        for mb in (512, 1024, 2048):
            worst = max(memory_report(plan_at(s, "vllm", mb, settings)).peak_transient for s in steps)
            curve = reserved_curve("vllm", steps, mb, settings, limit_bytes=free_bytes_from_gib(free_gib))
            oom = any(r.oom for r in curve)
            assert oom == (worst > free_bytes_from_gib(free_gib)), (free_gib, mb)
            seen.add(oom)
    assert seen == {True, False}  # both sides of the frontier

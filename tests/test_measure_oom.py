"""measure mode: a point that runs out of memory is recorded as OOM and the sweep goes
on; memory is released between points (reserved bytes back to the baseline).  On the
CPU through an emulated device (tests/fake_cuda.py), on a GPU for real."""
from __future__ import annotations

import pytest
import torch

from fake_cuda import GIB, EmulatedCuda
from indexer_lib.sweep import rows as sweep
from indexer_lib.sweep.grid import Grid

# task order: ... c64 x 10K n-only (10 GiB under a 256-token long_prefill_token_threshold, which
# vLLM does not default to: OOM at 2.63 GiB free), then c64 x 10K vllm
GRID = Grid.of(concurrency=(1, 64), isl=(2048, 10240), budget_mb=(512,),
            strategy=("n-only", "vllm"), free_gib=(2.63,), engine=("vllm==0.18.1",),
            long_prefill_token_threshold=256)
SETTINGS = sweep.RunSettings(mode="measure", repeats=1)


def measured(tmp_path, device, after_task=None):
    return sweep.run(GRID, tmp_path / "m.parquet", SETTINGS, progress=False, device=device,
                     after_task=after_task)


def test_oom_is_recorded_the_sweep_goes_on_and_memory_returns_to_baseline(tmp_path):
    device = EmulatedCuda(capacity_bytes=8 * GIB)
    between = []  # (reserved, allocated) after each point, as the next one would see them

    def after(task):
        between.append((device.memory_reserved(), device.memory_allocated()))

    frame = measured(tmp_path, device, after)
    model = sweep.to_frame(list(sweep.model_rows(GRID)))
    assert len(frame) == len(model) == 8 and set(frame["mode"]) == {"measure"}
    key = ["concurrency", "isl", "strategy"]
    both = frame.merge(model, on=key, suffixes=("", "_model"))
    # the OOM point is the one the memory model says does not fit, and only that one
    assert list(both["oom"].astype(bool)) == list(both["oom_model"].astype(bool))
    oom = frame[frame["oom"].astype(bool)]
    assert list(zip(oom["concurrency"], oom["isl"], oom["strategy"])) == [(64, 10240, "n-only")]
    assert device.ooms >= 1
    assert oom["error"].iloc[0].startswith("OutOfMemoryError: CUDA out of memory")
    assert oom["peak_bytes"].isna().all() and oom["time_ms"].isna().all()
    # the sweep went on: the point after the OOM ran, and every other point has a peak
    last = frame.iloc[-1]
    assert (last["concurrency"], last["isl"], last["strategy"]) == (64, 10240, "vllm")
    fine = both[~both["oom"].astype(bool)]
    assert fine["time_ms"].notna().all() and fine["error"].isna().all()
    # measured peak (the executor's own allocations, rounded by the allocator) near the model
    ratio = fine["peak_bytes"].astype(float) / fine["model_peak_bytes_model"].astype(float)
    assert ratio.between(0.9, 1.1).all(), ratio.tolist()
    # memory released between points: nothing live, reserved back to the baseline
    baseline = int(frame["reserved_baseline_bytes"].iloc[0])
    assert baseline == 0 and between == [(baseline, 0)] * len(frame)
    assert (frame["reserved_after_bytes"] == baseline).all()
    print("reserved after each point:", [r for r, _ in between], "baseline", baseline)


def test_the_baseline_check_catches_memory_kept_between_points(tmp_path):
    """Control: a device whose cache is never emptied keeps reserved bytes after a
    point, and the rows say so (the check above can fail)."""
    class NoEmptyCache(EmulatedCuda):
        def empty_cache(self):
            pass

    frame = measured(tmp_path, NoEmptyCache(capacity_bytes=64 * GIB))
    assert (frame["reserved_after_bytes"] > frame["reserved_baseline_bytes"]).any()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
def test_measure_on_the_gpu_records_oom_and_releases_memory(tmp_path):
    torch.cuda.empty_cache()
    frame = sweep.run(GRID, tmp_path / "m.parquet", SETTINGS, progress=False)
    oom = frame[frame["oom"].astype(bool)]
    assert set(zip(oom["concurrency"], oom["isl"], oom["strategy"])) == {(64, 10240, "n-only")}
    assert frame.iloc[-1]["strategy"] == "vllm" and not frame.iloc[-1]["oom"]
    assert (frame["reserved_after_bytes"] == frame["reserved_baseline_bytes"]).all()
    assert frame[~frame["oom"].astype(bool)]["time_ms"].notna().all()
    assert (frame["device"] == torch.cuda.get_device_name(0)).all()

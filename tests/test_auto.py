"""auto: the fastest strategy and budget that never OOMs, by the models."""
import json

import pytest

from deploy_check import memory_needed
from indexer_lib.cli.main import main
from indexer_lib.engines import engine_names, get_engine, gpu_refusal
from indexer_lib.study.auto import recommend
from indexer_lib.search.worst_step import prefill_batches
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import GIB, budget_bytes_from_mb, free_bytes_from_gib
from indexer_lib.timemodel.model import TimeModel
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig

SCHED = SchedulerConfig(long_prefill_token_threshold=256)
MIX = [ClosedLoopWorkload(64, 10_240, 8), ClosedLoopWorkload(4, 32_768, 8)]
# no engine release: the project's strategies, counting the H200 path's temporaries
GLM5 = PlanSettings("glm-5", temporaries="deepgemm")


@pytest.mark.parametrize("free_gib", [0.3, 1.0, 2.63, 40.0])
def test_recommendation_fits_every_step_by_the_memory_model(free_gib):
    rec = recommend(MIX, free_gib, GLM5, SCHED, budgets_mb=(64, 256, 1024, 4096),
                    time_model=TimeModel.published())
    best = rec.best
    for w in MIX:
        for batch in prefill_batches(w, SCHED):
            plan = make_plan(batch, best.strategy, budget_bytes_from_mb(best.budget_mb),
                             PlanSettings("glm-5", padded=best.padded))
            assert memory_report(plan, temporaries="deepgemm").peak_transient <= free_gib * GIB
    assert rec.margin_bytes >= 0
    # nothing that fits is faster
    assert all(c.total_ms >= best.total_ms - 1e-9 for c in rec.candidates if c.fits)
    assert "modelled" in rec.time_source and rec.time_source in rec.summary()


def test_more_memory_never_makes_the_recommendation_slower():
    times = [recommend(MIX, f, GLM5, SCHED, budgets_mb=(64, 256, 1024, 4096),
                       time_model=TimeModel.published()).best.total_ms
             for f in (0.3, 1.0, 4.0, 40.0)]
    assert times == sorted(times, reverse=True)


def test_a_project_strategy_is_never_a_deploy_line():
    """vLLM's knob drives the engine's own chunker (two chunks alive), not the project's ``vllm``
    (each chunk freed first): at 2048 MiB and 2.63 GiB free only the latter fits."""
    rec = recommend([ClosedLoopWorkload(64, 10_240, 512)], 2.63, PlanSettings("glm-5", "vllm==0.32.0",
                    temporaries="deepgemm"), SCHED, strategies=("vllm", "causal"), budgets_mb=(2048,),
                    time_model=TimeModel.published())
    assert rec.deployable is None and rec.patched.strategy in ("vllm", "causal")
    assert rec.deploy_line.startswith("none: vllm==0.32.0's own chunker needs at least 4105 MiB")
    assert "VLLM_SPARSE" not in rec.deploy_line.split("(")[0] and "patched engine" in rec.patched_line


# every release auto can tune (its own knob) on the H200 these plans run on (ATOM, ROCm only, is
# refused there), and one per era of those with nothing to set
TUNABLE = [n for n in engine_names() if get_engine(n).budget_env is not None and gpu_refusal(n, "h200") is None]
NOTHING_TO_SET = ["vllm==0.15.1", "vllm==0.18.1", "sglang==0.5.5.post3", "sglang==0.5.12.post1"]
SAFETY_MIX = [ClosedLoopWorkload(64, 10_240, 64), ClosedLoopWorkload(4, 65_536, 8)]


@pytest.mark.parametrize("release", TUNABLE + NOTHING_TO_SET)
def test_every_deploy_line_holds_to_the_releases_own_peak(release):
    """Whatever auto prints as a line to deploy, the release's own chunker at that setting fits
    every step of the same workloads, by the frontier's own worst-step search (planned by shapes,
    not by auto's plans): two chunks' logits alive, its replayed path where there is one, and the
    profile-run reservation given up below the default setting."""
    profile = get_engine(release)
    schedules = [prefill_batches(w, SCHED) for w in SAFETY_MIX]
    for free_gib in (0.75, 2.63, 12.0):
        settings = PlanSettings("glm-5", release, temporaries="deepgemm")
        try:
            rec = recommend(SAFETY_MIX, free_gib, settings, SCHED, strategies=("vllm", "causal"),
                            budgets_mb=(64, 512, 2048), time_model=TimeModel.published())
        except ValueError:
            continue  # nothing fits at all: no line printed
        free = free_bytes_from_gib(free_gib)
        if rec.deployable is None:
            assert rec.deploy_line.startswith(f"none: {profile.name}'s own chunker needs"), rec.deploy_line
            continue
        need = memory_needed(rec.deploy_line, release, schedules, free)
        assert need <= free, (release, free_gib, rec.deploy_line)
        assert need == rec.deployable.needs_bytes  # auto counts what the check counts


def test_auto_keeps_the_release_default_unless_a_setting_beats_it_by_more_than_its_band(capsys):
    """The fastest setting replaces the release's default only where it is faster by more than the
    width of its own time's band; the kept default names the faster setting and the band."""
    from indexer_lib.study.auto import Candidate, choose

    def engine(setting, ms, band, needs=2**20):
        return Candidate("engine", setting, False, ms, 10, needs, False, "vllm==0.33.0", setting,
                         total_low_ms=ms - band / 2, total_high_ms=ms + band / 2)

    default = engine(512, 100.0, 3.0)
    close, far = engine(2048, 98.5, 2.0), engine(4096, 90.0, 2.0)
    kept = choose([default, close], 1.0, "modelled")
    assert kept.deployable.setting == 512 and kept.within_band.setting == 2048
    assert kept.default_note == ("the release's default kept: vllm==0.33.0 at VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=2048 "
                                 "models 1.5 ms faster, within its time's band of 2.0 ms (the published checks' spread)")
    moved = choose([default, close, far], 1.0, "modelled")
    assert moved.deployable.setting == 4096 and moved.within_band is None and moved.default_note is None
    too_big = engine(512, 100.0, 3.0, needs=4 * GIB)  # the default does not fit: the fastest that does
    assert choose([too_big, close], 1.0, "modelled").deployable.setting == 2048
    tie = choose([default, engine(1024, 100.0, 3.0)], 1.0, "modelled")
    assert tie.deployable.setting == 512 and tie.default_note is None
    assert main(["auto", "--free-gib", "20", "--workload", "8x32768x64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["deployable"]["is_default"] and out["default_note"].startswith("the release's default kept")

"""auto: the fastest strategy and budget that never OOMs, by the models."""
import pytest

from indexer_lib.study.auto import recommend
from indexer_lib.study.frontier import prefill_batches
from indexer_lib.memory import memory_report
from indexer_lib.plan import PlanSettings, make_plan
from indexer_lib.shapes import GIB, budget_bytes_from_mb
from indexer_lib.study.timemodel import TimeModel
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


def test_vllm_recommendation_is_a_deployable_env_line():
    rec = recommend(MIX, 2.63, GLM5, SCHED, strategies=("vllm",), budgets_mb=(128, 512),
                    time_model=TimeModel.published())
    assert rec.deploy_line == "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=512"
    assert not rec.best.padded  # evaluated with vLLM's own arithmetic


def test_nothing_fits_is_a_clear_error():
    with pytest.raises(ValueError, match="free memory 0.001 GiB: no strategy and budget fits"):
        recommend(MIX, 0.001, GLM5, SCHED, budgets_mb=(64,), time_model=TimeModel.published())

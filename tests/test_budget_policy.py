"""Budget policies on a schedule whose free memory shrinks."""
import pytest

from indexer_lib.study.budget_policy import (FixedPolicy, FreshPolicy, SglangPolicy, run_policy,
                                       shrinking_free_memory)
from indexer_lib.plan import PlanSettings
from indexer_lib.presets import GIB, MIB, get_gpu
from indexer_lib.workload import StepBatch

# the reported step shape: 32 requests x 256 new rows on 9,984 cached tokens
BIG = StepBatch.from_lengths([256] * 32, [10_240] * 32)
SMALL = StepBatch.from_lengths([16], [16])
GLM5 = PlanSettings("glm-5")


def test_cached_reading_authorises_2_63_gib_with_2_20_gib_free():
    total = get_gpu("h200").capacity_bytes
    free = [round(13.15 * GIB), round(2.20 * GIB)]
    sglang = run_policy([BIG, BIG], free, SglangPolicy(total), settings=GLM5)
    assert round(sglang[1].budget_bytes / GIB, 2) == 2.63  # 0.2 x the first reading
    assert sglang[0].fits
    assert not sglang[1].fits  # the published failure
    fresh = run_policy([BIG, BIG], free, FreshPolicy(), settings=GLM5)
    assert all(s.fits for s in fresh)
    assert fresh[1].budget_bytes <= free[1]
    assert fresh[1].num_chunks > sglang[1].num_chunks


def test_fresh_policy_fits_every_step_of_a_shrinking_schedule():
    free = shrinking_free_memory(6, 8 * GIB, 600 * MIB)
    assert free[0] == 8 * GIB and free[-1] == 600 * MIB
    steps = run_policy([BIG] * 6, free, FreshPolicy(), strategy="causal")
    assert all(s.fits for s in steps)
    chunks = [s.num_chunks for s in steps]
    assert chunks == sorted(chunks)  # less memory, more chunks


def test_fixed_policy_ignores_free_memory():
    steps = run_policy([BIG, BIG], [10 * GIB, 100 * MIB], FixedPolicy(512))
    assert [s.budget_bytes for s in steps] == [512 * MIB] * 2
    assert steps[0].fits and not steps[1].fits


def test_sglang_does_not_chunk_below_8m_elements():
    steps = run_policy([SMALL], [GIB], SglangPolicy(get_gpu("h200").capacity_bytes))
    assert steps[0].budget_bytes is None and steps[0].num_chunks == 1


def test_run_policy_needs_one_reading_per_step():
    with pytest.raises(ValueError, match="2 steps and 1 free-memory readings"):
        run_policy([SMALL, SMALL], [GIB], FixedPolicy())


def test_sglang_measures_its_budget_at_the_first_call_past_its_gate():
    """A small warm-up step reads no free memory: the budget is the first big step's."""
    total = get_gpu("h200").capacity_bytes
    steps = run_policy([SMALL, BIG, BIG], [40 * GIB, 10 * GIB, 2 * GIB], SglangPolicy(total), settings=GLM5)
    assert steps[0].budget_bytes is None
    assert steps[1].budget_bytes == steps[2].budget_bytes == int(10 * GIB * 0.2)
    capped = run_policy([BIG], [40 * GIB], SglangPolicy(total, mem_fraction_static=0.9), settings=GLM5)
    assert capped[0].budget_bytes == int(int(total * 0.1) * 0.2)  # f x (1 - mem_fraction_static) x total

"""A finite KV cache: vLLM's admission gate, its preemptions and the prefix-cache hits a preempted
request resumes with, in the simulator, held step for step to vLLM's own scheduler (0.33.0 in .venv,
and the older releases' own rules against their schedulers under .venv-engines)."""
import dataclasses
import json
import random
import subprocess
from pathlib import Path

import pytest

from indexer_lib.cli.main import main
from indexer_lib.engines import get_engine, release_scheduler
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, simulate, vllm_scheduler
from indexer_lib.workload.compare import step_records, worst_shape
from indexer_lib.workload.kv_blocks import BlockPool
from indexer_lib.workload.simulator import kv_blocks_needed


def random_cases(seed: int, count: int):
    """Small closed loops on KV caches between one request's blocks and all of them."""
    rng = random.Random(seed)
    for _ in range(count):
        c = rng.choice([3, 4, 6, 8])
        w = ClosedLoopWorkload(c, rng.choice([300, 700, 1500, 3000]), rng.choice([5, 20, 60, 200]),
                               random_range_ratio=rng.choice([0, 0.5]), seed=rng.randrange(5),
                               num_prompts=rng.choice([c, 2 * c, 3 * c]))
        mnbt = rng.choice([512, 1024, 2048])
        need = kv_blocks_needed(w, SchedulerConfig(max_num_batched_tokens=mnbt, max_num_seqs=8, block_size=16))
        one = -(-(w.max_prompt_len + w.osl) // 16)
        yield w, SchedulerConfig(max_num_batched_tokens=mnbt, max_num_seqs=8, block_size=16,
                                 num_kv_blocks=rng.randint(one + 1, max(one + 2, need - 1)),
                                 speculative_tokens=rng.choice([0, 0, 1, 2]))


def test_a_preempted_request_resumes_from_its_blocks_still_cached():
    pool = BlockPool(9)  # 8 usable blocks (block 0 is the null block)
    a = pool.take(4)
    pool.release(7, a, full=3)  # 3 full blocks stay cached at the end, the partial one goes first
    assert list(pool.free)[:1] == [a[3]] and list(pool.free)[-3:] == [a[2], a[1], a[0]]
    assert pool.hits(7, 10) == a[:3]
    pool.take(6)  # the 4 never used, the partial block, then request 7's last full block
    assert pool.hits(7, 10) == a[:2] and pool.num_free == 2


def test_a_small_kv_cache_holds_back_admissions_and_preempts_the_last_request():
    # 3 clients, 200-token prompts, 40 outputs, 16-token blocks: each needs 15 blocks at the end,
    # 13 to be admitted; 30 usable blocks admit two, and the third waits
    w = ClosedLoopWorkload(concurrency=3, isl=200, osl=40, num_prompts=3)
    config = SchedulerConfig(max_num_batched_tokens=1024, max_num_seqs=8, block_size=16, num_kv_blocks=31)
    steps = list(simulate(w, config))
    first = steps[0]
    assert [(r.context_len, r.query_len) for r in first.batch.requests] == [(0, 200), (0, 200)]
    assert sorted(rid for s in steps for rid in s.request_ids) == [0, 1, 2]


@pytest.fixture
def vllm():
    if not vllm_scheduler.vllm_available():
        pytest.skip("vLLM's scheduler is not installed here (bash scripts/install_vllm.sh)")


@pytest.mark.parametrize("seed", [0, 2])
def test_the_simulator_preempts_and_resumes_as_vllm_does(vllm, seed):
    for workload, config in random_cases(seed, 8):
        assert step_records(simulate(workload, config)) == step_records(vllm_scheduler.schedule(workload, config))


ROOT = Path(__file__).resolve().parents[1]
RELEASE_SCRIPT = """
import json, sys, warnings
warnings.simplefilter("ignore")
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, vllm_scheduler
from indexer_lib.workload.compare import step_records
cases = json.loads(sys.stdin.read())
print(json.dumps({"version": vllm_scheduler.vllm_version(), "cases": [
    step_records(vllm_scheduler.schedule(ClosedLoopWorkload(**w), SchedulerConfig(**c))) for w, c in cases]}))
"""
# (seed, index) of random_cases: first-chunk admission and the free queue's order each change
# these schedules (drafts off and on), picked from 400 random cases on 0.15.1 and 200 on 0.19.0,
# all of which agree
RELEASE_CASES = {
    "0.15.1": [(12, 0), (16, 0), (30, 1), (39, 0), (2, 1), (4, 0)],
    "0.19.0": [(30, 1), (39, 0), (19, 1)],
}
# (seed, index) of random_cases on the asynchronous scheduler, without drafts: a preempted request
# resumes, and a finished request holds its blocks until the next step is scheduled (picked from
# 240 random cases on 0.33.0 and 200 on 0.15.1, all of which agree)
ASYNC_CASES = [(2, 3), (7, 3), (13, 0)]


def asynchronous(config: SchedulerConfig) -> SchedulerConfig:
    return dataclasses.replace(config, async_scheduling=True, speculative_tokens=0)


def release_cases(release: str):
    """The release's cases, on its own rule for admissions and freed blocks (data/engines/); for
    0.15.1 the asynchronous cases too."""
    profile = get_engine(f"vllm=={release}")
    picked = [(seed, index, False) for seed, index in RELEASE_CASES[release]]
    picked += [(seed, index, True) for seed, index in ASYNC_CASES] if release == "0.15.1" else []
    for seed, index, on_async in picked:
        workload, config = list(random_cases(seed, index + 1))[index]
        config = dataclasses.replace(config, reserve_full_isl=profile.scheduler_reserve_full_isl,
                                     free_uncached_first=profile.scheduler_free_uncached_first,
                                     threshold_lone_exempt=profile.scheduler_threshold_lone_exempt)
        yield workload, asynchronous(config) if on_async else config
    # a lone request under a long_prefill_token_threshold: capped before 0.33.0, which lifts the cap
    yield (ClosedLoopWorkload(concurrency=1, isl=2000, osl=4, num_prompts=2),
           SchedulerConfig(max_num_batched_tokens=1024, long_prefill_token_threshold=256,
                           threshold_lone_exempt=profile.scheduler_threshold_lone_exempt))


def test_each_release_has_its_own_rule_for_admissions_and_freed_blocks():
    rules = {release: (c.reserve_full_isl, c.free_uncached_first) for release in ("0.11.0", "0.16.0", "0.19.0",
                                                                                 "0.20.0", "0.30.0", "0.33.0")
             for c in [release_scheduler(f"vllm=={release}", 64)]}
    assert rules == {"0.11.0": (False, False), "0.16.0": (False, False), "0.19.0": (True, False),
                     "0.20.0": (True, False), "0.30.0": (True, True), "0.33.0": (True, True)}
    lone = {release: release_scheduler(f"vllm=={release}", 64).threshold_lone_exempt
            for release in ("0.16.0", "0.19.0", "0.30.0", "0.33.0")}
    assert lone == {"0.16.0": False, "0.19.0": False, "0.30.0": False, "0.33.0": True}
    assert "block_pool.py:389-403" in get_engine("vllm==0.16.0").sources["scheduler_free_uncached_first"]
    assert "not read" in get_engine("vllm==0.11.0").sources["scheduler_reserve_full_isl"]


def test_a_first_chunk_admission_lets_in_what_a_whole_sequence_admission_holds_back():
    # 3 clients, 200-token prompts, 40 outputs, 16-token blocks, 450 tokens a step: 30 usable blocks
    # hold two whole sequences (13 blocks each) and leave 4; the third prompt's first chunk (50
    # tokens) fits in them, so vLLM 0.13-0.18 admits it, and it preempts itself in the next step
    w = ClosedLoopWorkload(concurrency=3, isl=200, osl=40, num_prompts=3)
    config = SchedulerConfig(max_num_batched_tokens=450, max_num_seqs=8, block_size=16, num_kv_blocks=31)
    first = dataclasses.replace(config, reserve_full_isl=False, free_uncached_first=False)
    rows = [[(r.context_len, r.query_len) for r in s.batch.requests] if s.batch else [] for s in simulate(w, first)]
    assert rows[:2] == [[(0, 200), (0, 200), (0, 50)], []]
    assert [(r.context_len, r.query_len) for r in next(simulate(w, config)).batch.requests] == [(0, 200), (0, 200)]


@pytest.mark.parametrize("release", sorted(RELEASE_CASES))
def test_an_older_release_preempts_and_resumes_as_its_own_scheduler_does(release):
    python = ROOT / ".venv-engines" / f"vllm-{release}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"vLLM {release} is not installed under .venv-engines (bash scripts/install_engines.sh)")
    cases = list(release_cases(release))
    done = subprocess.run([str(python), "-c", RELEASE_SCRIPT], capture_output=True, text=True, cwd=ROOT,
                          input=json.dumps([[dataclasses.asdict(w), dataclasses.asdict(c)] for w, c in cases]),
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["version"] == release
    for (workload, config), records in zip(cases, out["cases"], strict=True):
        assert json.loads(json.dumps(step_records(simulate(workload, config)))) == records
        # the release's rule is what makes them agree: vLLM 0.33.0's schedules differently
        latest = dataclasses.replace(config, reserve_full_isl=True, free_uncached_first=True,
                                     threshold_lone_exempt=True)
        assert config.async_scheduling or json.loads(json.dumps(step_records(simulate(workload, latest)))) != records


def test_the_simulator_preempts_on_the_asynchronous_scheduler_as_vllm_does(vllm):
    for seed, index in ASYNC_CASES:
        workload, config = list(random_cases(seed, index + 1))[index]
        config = asynchronous(config)
        assert step_records(simulate(workload, config)) == step_records(vllm_scheduler.schedule(workload, config))


def test_the_seeds_deployment_with_two_drafts_and_its_kv_cache(vllm):
    # 64 clients at ISL 10,240 on a 279,808-token KV cache with two drafts on the 0.13-0.18 rule:
    # every decode joins the prefill path, so a step of 8,192 rows spans about the whole cache
    w = ClosedLoopWorkload(64, 10240, 256, num_prompts=64)
    config = SchedulerConfig(max_num_seqs=1024, num_kv_blocks=4373, speculative_tokens=2, indexer_decode_threshold=2)
    ours = step_records(simulate(w, config))
    assert ours == step_records(vllm_scheduler.schedule(w, config))
    m, n, _ = worst_shape(ours)
    assert m == 8192 and 250_000 < n <= 4372 * 64 + 8192


def test_what_the_simulator_does_not_model_on_a_small_cache_is_refused_naming_vllms_scheduler():
    w = ClosedLoopWorkload(8, 1000, 20)
    small = dict(max_num_batched_tokens=1024, max_num_seqs=8, block_size=16, num_kv_blocks=300)
    with pytest.raises(ValueError, match="synchronous scheduler only") as e:
        list(simulate(w, SchedulerConfig(**small, async_scheduling=True, speculative_tokens=1)))
    assert "--no-async-scheduling" in str(e.value)
    with pytest.raises(ValueError, match="shared prefix") as e:
        list(simulate(ClosedLoopWorkload(8, 1000, 20, shared_prefix=512), SchedulerConfig(**small)))
    assert "--workload-source vllm" in str(e.value)
    with pytest.raises(ValueError, match="one request"):
        list(simulate(w, SchedulerConfig(**{**small, "num_kv_blocks": 40})))


def test_the_frontier_takes_the_kv_cache_on_the_synchronous_scheduler_and_names_it(tmp_path, capsys):
    out = tmp_path / "kv.csv"
    assert main(["frontier", "--model", "glm-5", "--engine", "vllm==0.16.0", "--strategy", "engine",
                 "--concurrency", "64", "--isl", "10240", "--free-gib", "5.56", "--speculative-tokens", "2",
                 "--kv-cache-tokens", "279808", "--no-async-scheduling", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "kv_cache_tokens=279808" in text and "async_scheduling=False" in text
    import pandas as pd

    row = pd.read_csv(out).iloc[0]
    assert row["kv_cache_tokens"] == 279808 and row["worst_rows"] == 8192 and bool(row["oom"])

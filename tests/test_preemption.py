"""A finite KV cache: vLLM's admission gate, its preemptions and the prefix-cache hits a preempted
request resumes with, in the simulator, held step for step to vLLM's own scheduler."""
import random

import pytest

from indexer_lib.cli.main import main
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
    for config, why in ((SchedulerConfig(**small, async_scheduling=True), "asynchronous"),):
        with pytest.raises(ValueError, match=why) as e:
            list(simulate(w, config))
        assert "--workload-source vllm" in str(e.value)
    with pytest.raises(ValueError, match="shared prefix"):
        list(simulate(ClosedLoopWorkload(8, 1000, 20, shared_prefix=512), SchedulerConfig(**small)))
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

"""Small schedules traced by hand, on the rules vLLM's scheduler proved.

Each trace is asserted for the simulator; where vLLM is installed the same
trace is asserted for vLLM's own scheduler too, so a hand trace is never a
guess about vLLM (tests/test_vllm_scheduler.py covers the large scenarios).
Records are (prefill rows as (context, query), number of decode requests).
"""
import pytest

from indexer_lib.workload import vllm_scheduler
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, simulate


def trace(steps):
    return [([(r.context_len, r.query_len) for r in s.batch.requests] if s.batch else [],
             s.num_decode) for s in steps]


def check(workload, config, expected):
    """The simulator gives ``expected``; so does vLLM when it is installed."""
    assert trace(simulate(workload, config)) == expected
    steps = list(simulate(workload, config))
    assert [s.step for s in steps] == list(range(len(steps)))  # executed steps, no gaps
    if vllm_scheduler.vllm_available():
        assert trace(vllm_scheduler.schedule(workload, config)) == expected, "vLLM disagrees"


def test_threshold_keeps_capping_while_a_finished_request_is_still_in_flight():
    # r0 takes 32 rows a step (threshold), r1 the 16 left of a 48-token budget.
    # r0's prompt (OSL 1: its only token) completes at step 6.  Sync: at step 7
    # r1 runs alone, so the threshold no longer caps it.  Async: step 7 is
    # scheduled before step 6's output is processed, r0 still counts as running
    # and r1 stays capped at 32 for one more step.
    w = ClosedLoopWorkload(concurrency=2, isl=200, osl=1, num_prompts=2)
    head = [([(32 * k, 32), (16 * k, 16)], 0) for k in range(6)]
    # (max_num_seqs 8 everywhere below: vLLM wants max_num_batched_tokens >= max_num_seqs)
    sync = SchedulerConfig(max_num_batched_tokens=48, max_num_seqs=8, long_prefill_token_threshold=32)
    check(w, sync, head + [([(192, 8), (96, 32)], 0), ([(128, 48)], 0), ([(176, 24)], 0)])
    asyn = SchedulerConfig(max_num_batched_tokens=48, max_num_seqs=8,
                           long_prefill_token_threshold=32, async_scheduling=True)
    check(w, asyn, head + [([(192, 8), (96, 32)], 0), ([(128, 32)], 0), ([(160, 40)], 0)])


def test_async_a_finished_request_keeps_its_seat_until_its_output_is_processed():
    # max_num_seqs 1, threshold 50, 100-token budget, 3 prompts of 100 tokens, OSL 1.
    # Sync: r0 finishes at step 1, r2 is sent at once; at step 2 r1 and r2 wait,
    # so r1 is capped at 50.  Async: r0 still holds the only seat while step 2 is
    # scheduled (a pass with nothing to run, not an engine step); when r1 is
    # admitted r2 has arrived too, so r1 is capped exactly as in sync.  (Letting
    # r1 in while r2 is still on its way would give it all 100 tokens.)
    w = ClosedLoopWorkload(concurrency=2, isl=100, osl=1, num_prompts=3)
    expected = [([(0, 50)], 0), ([(50, 50)], 0), ([(0, 50)], 0), ([(50, 50)], 0),
                ([(0, 100)], 0)]
    for async_scheduling in (False, True):
        c = SchedulerConfig(max_num_batched_tokens=100, max_num_seqs=1,
                            long_prefill_token_threshold=50, async_scheduling=async_scheduling)
        check(w, c, expected)


def test_a_replacement_meets_the_next_step_sync_and_the_one_after_async():
    # 2 clients, prompts of 10, OSL 2, 10-token budget: r0 prefills at step 0;
    # step 1: r1's prompt (9 tokens) + r0's decode, r0 finishes.
    w = ClosedLoopWorkload(concurrency=2, isl=10, osl=2, num_prompts=3)
    sync = SchedulerConfig(max_num_batched_tokens=10, max_num_seqs=8)
    check(w, sync, [([(0, 10)], 0), ([(0, 9)], 1),
                    ([(9, 1), (0, 9)], 0),  # r2 is there at step 2
                    ([(9, 1)], 1), ([], 1)])
    asyn = SchedulerConfig(max_num_batched_tokens=10, max_num_seqs=8, async_scheduling=True)
    check(w, asyn, [([(0, 10)], 0), ([(0, 9)], 1),
                    ([(9, 1)], 0),  # r2 is sent only after step 2 was scheduled
                    ([(0, 9)], 1), ([(9, 1)], 0), ([], 1)])


def test_passes_that_schedule_nothing_are_not_steps():
    # one client, OSL 3: async schedules a pass with only the finished request in
    # flight before the next prompt arrives; it is not an executed step
    w = ClosedLoopWorkload(concurrency=1, isl=10, osl=3, num_prompts=2)
    expected = [([(0, 10)], 0), ([], 1), ([], 1)] * 2
    for async_scheduling in (False, True):
        check(w, SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8,
                              async_scheduling=async_scheduling),
              expected)


def test_prefix_blocks_are_cached_by_the_step_that_schedules_them():
    # r0 schedules its whole 200-token prompt at step 0; r1, admitted later in the
    # same step, already hits the 2 full 64-token blocks of the 150 shared tokens
    w = ClosedLoopWorkload(concurrency=3, isl=200, osl=1, shared_prefix=150, num_prompts=3)
    c = SchedulerConfig(max_num_batched_tokens=300, block_size=64)
    # r2 hits the same 128 tokens and gets the 28 tokens of budget left
    check(w, c, [([(0, 200), (128, 72), (128, 28)], 0), ([(156, 44)], 0)])


def test_hits_round_down_to_blocks_and_leave_the_last_token_to_compute():
    # whole prompt shared (128 = 2 blocks of 64): the hit stops short of the
    # last token, so one whole block (64 tokens) is recomputed
    w = ClosedLoopWorkload(concurrency=2, isl=128, osl=1, shared_prefix=128, num_prompts=2)
    check(w, SchedulerConfig(max_num_batched_tokens=1000, block_size=64),
          [([(0, 128), (64, 64)], 0)])
    # 16-token blocks: the same prompts hit 112 tokens
    check(w, SchedulerConfig(max_num_batched_tokens=1000, block_size=16),
          [([(0, 128), (112, 16)], 0)])


def test_a_kv_cache_the_simulator_cannot_model_is_refused():
    w = ClosedLoopWorkload(concurrency=4, isl=1000, osl=24)  # 4 x 16 blocks of 64
    next(simulate(w, SchedulerConfig(num_kv_blocks=64)))  # exactly enough
    next(simulate(w, SchedulerConfig(num_kv_blocks=63)))  # preemption, on the synchronous scheduler
    next(simulate(w, SchedulerConfig(num_kv_blocks=63, async_scheduling=True)))  # and the asynchronous one
    with pytest.raises(ValueError, match="num_kv_blocks 63: below the 64 blocks .* synchronous scheduler only"):
        next(simulate(w, SchedulerConfig(num_kv_blocks=63, async_scheduling=True, speculative_tokens=1)))


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_warm_cache_recomputes_each_prompts_last_block(async_scheduling):
    # every prompt cached before the run (a rerun of the same prompts): vLLM hits at most
    # prompt_len - 1 tokens in whole blocks, so a 200-token prompt in blocks of 16 recomputes its
    # last 8 (192 cached) and a 192-token one its last whole block (176 cached): all three
    # clients' tails fit one step, each with its whole prompt as context
    w = ClosedLoopWorkload(concurrency=3, isl=200, osl=2, num_prompts=3, warm_cache=True)
    c = SchedulerConfig(block_size=16, max_num_batched_tokens=64, max_num_seqs=8, async_scheduling=async_scheduling)
    check(w, c, [([(192, 8)] * 3, 0), ([], 3)])
    w = ClosedLoopWorkload(concurrency=2, isl=192, osl=1, num_prompts=4, warm_cache=True)
    c = SchedulerConfig(block_size=16, max_num_batched_tokens=64, max_num_seqs=8, async_scheduling=async_scheduling)
    # OSL 1: each finishes with its prompt and the two replacements take the next step (async too:
    # an idle engine's next step starts with the clients' requests)
    check(w, c, [([(176, 16)] * 2, 0), ([(176, 16)] * 2, 0)])


def test_a_warm_cache_with_mixed_lengths_matches_vllm():
    if not vllm_scheduler.vllm_available():
        pytest.skip("vLLM is not installed here (scripts/install_vllm.sh)")
    w = ClosedLoopWorkload(concurrency=12, isl=3000, osl=8, num_prompts=30, random_range_ratio=0.9, seed=3,
                           warm_cache=True)
    # vLLM 0.33.0 (the one installed) schedules a full hit with drafts as a padded decode: a prompt of
    # 1,729 tokens (27 whole blocks and one token) computes 1 + 2 tokens at context 1,728
    assert 1729 in w.prompt_lens
    for drafts in (0, 2):
        c = SchedulerConfig(block_size=64, max_num_batched_tokens=512, max_num_seqs=16, speculative_tokens=drafts,
                            indexer_decode_threshold=1 + drafts, pad_new_decodes=True)
        ours = trace(simulate(w, c))
        assert ours == trace(vllm_scheduler.schedule(w, c))
        assert any((1728, 1 + drafts) in rows for rows, _ in ours)

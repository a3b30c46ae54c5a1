"""The scheduler simulator on small schedules traced by hand."""
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, simulate, simulate_each_step
from indexer_lib.workload.lengths import ORDERS


def trace(workload, config, steps=None):
    out = []
    for s in simulate(workload, config):
        reqs = [] if s.batch is None else [(r.context_len, r.query_len) for r in s.batch.requests]
        out.append((reqs, s.num_decode))
        if steps is not None and len(out) == steps:
            break
    return out


def test_chunked_prefill_with_decodes_sync():
    # 2 clients, prompts of 100 tokens, 2 output tokens, 64 tokens per step, 4 prompts in all
    w = ClosedLoopWorkload(concurrency=2, isl=100, osl=2, num_prompts=4)
    c = SchedulerConfig(max_num_batched_tokens=64)
    assert trace(w, c, 5) == [
        ([(0, 64)], 0),  # r0 takes the whole budget: r1 waits
        ([(64, 36), (0, 28)], 0),  # r0 finishes its prompt (samples token 1), r1 starts
        ([(28, 63)], 1),  # r0 decodes token 2 and finishes
        ([(91, 9), (0, 55)], 0),  # r0's replacement r2 arrived before this step
        ([(55, 45)], 1),  # r1 finished its prompt last step and decodes
    ]


def test_whole_schedule_ends_with_every_prompt_done():
    w = ClosedLoopWorkload(concurrency=3, isl=50, osl=4, num_prompts=7)
    steps = list(simulate(w, SchedulerConfig(max_num_batched_tokens=40)))
    prompt_tokens = sum(s.batch.num_rows for s in steps if s.batch)
    assert prompt_tokens == 7 * 50
    # each prompt's last chunk samples its first token; the other 3 are decode steps
    assert sum(s.num_decode for s in steps) == 7 * 3
    assert len({rid for s in steps for rid in s.request_ids}) == 7


def test_threshold_caps_chunks_only_when_several_requests_compete():
    c = SchedulerConfig(max_num_batched_tokens=64, long_prefill_token_threshold=32)
    many = trace(ClosedLoopWorkload(3, 100, 1), c, 1)
    assert many == [([(0, 32), (0, 32)], 0)]
    alone = trace(ClosedLoopWorkload(1, 100, 1), c, 1)
    assert alone == [([(0, 64)], 0)]


def test_max_num_seqs_limits_admission():
    c = SchedulerConfig(max_num_batched_tokens=1000, max_num_seqs=2)
    assert trace(ClosedLoopWorkload(3, 10, 5), c, 1) == [([(0, 10), (0, 10)], 0)]


def test_shared_prefix_hits_are_whole_blocks_and_never_the_whole_prompt():
    c = SchedulerConfig(max_num_batched_tokens=1000, block_size=64)
    # r0 schedules 200 tokens: the 128 tokens of full prefix blocks are cached at once
    w = ClosedLoopWorkload(2, 200, 1, shared_prefix=150)
    assert trace(w, c, 1) == [([(0, 200), (128, 72)], 0)]
    # a prompt that is all shared prefix still recomputes its last block's tokens
    w = ClosedLoopWorkload(2, 128, 1, shared_prefix=128)
    assert trace(w, c, 1) == [([(0, 128), (64, 64)], 0)]
    # without prefix caching nothing hits
    off = SchedulerConfig(max_num_batched_tokens=1000, enable_prefix_caching=False)
    assert trace(ClosedLoopWorkload(2, 200, 1, shared_prefix=150), off, 1) == [
        ([(0, 200), (0, 200)], 0)]


def test_async_scheduling_delays_the_replacement_by_one_step():
    # r0 finishes at step 1 while r1 keeps the engine busy
    w = ClosedLoopWorkload(concurrency=2, isl=10, osl=2, num_prompts=3)
    sync = trace(w, SchedulerConfig(max_num_batched_tokens=10))
    asyn = trace(w, SchedulerConfig(max_num_batched_tokens=10, async_scheduling=True))
    assert sync[:3] == [([(0, 10)], 0), ([(0, 9)], 1), ([(9, 1), (0, 9)], 0)]
    # async: r0's replacement is seen one step later
    assert asyn[:4] == [([(0, 10)], 0), ([(0, 9)], 1), ([(9, 1)], 0), ([(0, 9)], 1)]


def test_an_idle_engine_waits_for_the_next_request_without_empty_steps():
    w = ClosedLoopWorkload(concurrency=1, isl=10, osl=1, num_prompts=2)
    for async_scheduling in (False, True):
        c = SchedulerConfig(max_num_batched_tokens=64, async_scheduling=async_scheduling)
        assert trace(w, c) == [([(0, 10)], 0), ([(0, 10)], 0)]


def test_the_reported_oom_step_shape():
    # 64 requests of 10,240 tokens, 8,192 tokens per step, 256-token threshold:
    # steps of 32 requests x 256 new rows; at 9,984 cached each, N = 327,680
    w = ClosedLoopWorkload(64, 10_240, 1)
    c = SchedulerConfig(max_num_batched_tokens=8192, long_prefill_token_threshold=256)
    worst = max((s.batch for s in simulate(w, c) if s.batch),
                key=lambda b: b.num_rows * b.num_kv_tokens)
    assert worst.num_rows == 8192
    assert worst.num_kv_tokens == 327_680
    assert {(r.context_len, r.query_len) for r in worst.requests} == {(9984, 256)}


@pytest.mark.parametrize("kwargs, message", [
    (dict(concurrency=0, isl=10), "concurrency 0"),
    (dict(concurrency=-3, isl=10), "concurrency -3"),
    (dict(concurrency=1, isl=10, shared_prefix=11), "shared_prefix 11 > isl 10"),
    (dict(concurrency=1, isl=2.5), "isl 2.5"),
])
def test_bad_workloads_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ClosedLoopWorkload(**kwargs)


@settings(max_examples=1000, deadline=None)
@given(concurrency=st.integers(1, 70), isl=st.integers(1, 3000), osl=st.integers(1, 70),
       prefix=st.integers(0, 3000), prompts=st.one_of(st.none(), st.integers(1, 90)),
       mnbt=st.integers(1, 4096), seqs=st.integers(1, 48), threshold=st.integers(0, 600),
       caching=st.booleans(), block=st.sampled_from([16, 64]), asynchronous=st.booleans())
def test_steps_alike_taken_at_once_are_the_steps_one_by_one(concurrency, isl, osl, prefix, prompts, mnbt,
                                                         seqs, threshold, caching, block, asynchronous):
    # lock-step prefill chunks and steady decoding, advanced at once (simulate), against
    # the scheduler run one step at a time (simulate_each_step)
    workload = ClosedLoopWorkload(concurrency, isl, osl, min(prefix, isl), prompts)
    config = SchedulerConfig(mnbt, seqs, threshold, caching, block, asynchronous)
    assert list(simulate(workload, config)) == list(simulate_each_step(workload, config))


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.tuples(st.sampled_from([1, 2, 256]), st.sampled_from([0, 5, 4096])), min_size=1,
                        max_size=40))
def test_a_batchs_runs_and_totals_are_counted_request_by_request(lengths):
    """What the planners read of a batch: per request, how many identical requests follow from it
    on (itself included), and the rows, KV tokens and longest sequence from it to the end."""
    from indexer_lib.workload import PrefillRequest, StepBatch

    batch = StepBatch(tuple(PrefillRequest(context, query) for query, context in lengths))
    pairs = list(zip(batch.query_lens, batch.seq_lens))
    for k in range(len(pairs)):
        same = 0
        while k + same < len(pairs) and pairs[k + same] == pairs[k]:
            same += 1
        assert batch.repeats[k] == same
        rest = pairs[k:]
        assert batch.totals_from(k) == (sum(q for q, _ in rest), sum(s for _, s in rest), max(s for _, s in rest))


# -- mixed lengths: vLLM bench's random range ratio and explicit mixes ------------------------

def test_random_lengths_stay_in_vllm_benchs_range_and_follow_the_seed():
    import numpy as np

    w = ClosedLoopWorkload(64, 10_000, 8, random_range_ratio=0.5, seed=7)
    lens = w.prompt_lens
    assert len(lens) == w.total_prompts == 128
    assert min(lens) >= 5_000 and max(lens) <= 15_000 and len(set(lens)) > 100
    # the benchmark's own draw: default_rng(seed).integers(floor(ISL(1-R)), ceil(ISL(1+R)) + 1, n)
    assert lens == tuple(np.random.default_rng(7).integers(5_000, 15_001, size=128))
    assert ClosedLoopWorkload(64, 10_000, 8, random_range_ratio=0.5, seed=7).prompt_lens == lens
    assert ClosedLoopWorkload(64, 10_000, 8, random_range_ratio=0.5, seed=8).prompt_lens != lens
    assert w.max_prompt_len == 15_000 and w.label == "R=0.5"


def test_a_homogeneous_workload_is_the_one_of_before():
    w = ClosedLoopWorkload(8, 3000, 16)
    assert w == ClosedLoopWorkload(8, 3000, 16, random_range_ratio=0, mix="", seed=0)
    assert hash(w) == hash(ClosedLoopWorkload(8, 3000, 16, random_range_ratio=0.0, mix=()))
    assert w.homogeneous and w.prompt_lens == (3000,) * 16 and w.label == ""
    # R = 0 is the same schedule whatever the seed
    config = SchedulerConfig(max_num_batched_tokens=2048)
    assert list(simulate(ClosedLoopWorkload(8, 3000, 16, seed=5), config)) == list(simulate(w, config))


def test_the_simulator_gives_each_prompt_its_drawn_length():
    w = ClosedLoopWorkload(6, 1000, 3, random_range_ratio=0.8, seed=1)
    done = {}
    for step in simulate(w, SchedulerConfig(max_num_batched_tokens=512)):
        for rid, r in zip(step.request_ids, step.batch.requests if step.batch else ()):
            done[rid] = max(done.get(rid, 0), r.seq_len)
    assert [done[rid] for rid in range(w.total_prompts)] == list(w.prompt_lens)


def test_a_mix_is_one_schedule_with_both_lengths():
    w = ClosedLoopWorkload(32, 2048, 8, mix="0.1x65536", seed=3)
    assert w.mix == ((0.1, 65_536),) and w.label == "mix 0.1x65536"
    # ceil(0.1 x 64) = 7 long prompts among 57 short ones, in one run
    assert sorted(set(w.prompt_lens)) == [2048, 65_536] and w.prompt_lens.count(65_536) == 7
    steps = [s for s in simulate(w, SchedulerConfig()) if s.batch]
    finals = {r.seq_len for s in steps for r in s.batch.requests if r.seq_len in (2048, 65_536)}
    assert finals == {2048, 65_536}
    # some step prefills a long request's chunk next to short requests
    assert any(any(r.seq_len > 8192 for r in s.batch.requests) and len(s.batch.requests) > 1 for s in steps)
    assert ClosedLoopWorkload(32, 2048, 8, mix=((0.1, 65_536),), seed=3) == w
    both = ClosedLoopWorkload(10, 1000, 1, random_range_ratio=0.2, mix="0.1x9000+0.2x50", seed=2)
    assert both.prompt_lens.count(9000) == 2 and both.prompt_lens.count(50) == 4
    assert all(800 <= n <= 1200 for n in both.prompt_lens if n not in (9000, 50))


def test_an_arrival_order_sends_the_same_lengths_in_its_order():
    drawn = ClosedLoopWorkload(32, 2048, 8, mix="0.1x65536", seed=3)
    assert ClosedLoopWorkload(32, 2048, 8, mix="0.1x65536", seed=3, order="drawn") == drawn
    ordered = {o: replace(drawn, order=o).prompt_lens for o in ORDERS}
    assert all(sorted(lens) == sorted(drawn.prompt_lens) for lens in ordered.values())
    assert ordered["longest-first"][:7] == (65_536,) * 7 and ordered["shortest-first"][-7:] == (65_536,) * 7
    # long-together: the 7 long prompts back to back from the second wave's first; the rest as drawn
    together = ordered["long-together"]
    assert together[32:39] == (65_536,) * 7 and together.count(65_536) == 7
    assert [n for n in together if n != 65_536] == [n for n in drawn.prompt_lens if n != 65_536]
    assert replace(drawn, order="long-together").label == "mix 0.1x65536, order long-together"
    # the simulator sends them in that order
    w = ClosedLoopWorkload(6, 1000, 3, random_range_ratio=0.8, seed=1, order="longest-first")
    done = {}
    for step in simulate(w, SchedulerConfig(max_num_batched_tokens=512)):
        for rid, r in zip(step.request_ids, step.batch.requests if step.batch else ()):
            done[rid] = max(done.get(rid, 0), r.seq_len)
    assert [done[rid] for rid in range(w.total_prompts)] == sorted(w.prompt_lens, reverse=True)
    # one length: every order is the same schedule
    assert ClosedLoopWorkload(8, 3000, 16, order="long-together").prompt_lens == (3000,) * 16


@pytest.mark.parametrize("kwargs, message", [
    (dict(random_range_ratio=1.0), "random_range_ratio 1.0: must be a number in \\[0, 1\\)"),
    (dict(random_range_ratio=-0.1), "random_range_ratio -0.1"),
    (dict(random_range_ratio=float("nan")), "random_range_ratio nan"),
    (dict(isl=1, random_range_ratio=0.5), "shortest prompt would have 0 tokens"),
    (dict(mix="0.1"), "expected SHARExLENGTH"),
    (dict(mix="1.5x100"), "mix share 1.5"),
    (dict(mix="0.7x100+0.5x10"), "add up to more than 1"),
    (dict(mix="0.5x0"), "mix length 0"),
    (dict(shared_prefix=500, mix="0.5x100"), "shared_prefix 500 > isl 100 \\(the shortest prompt\\)"),
    (dict(seed=-1), "seed -1"),
    (dict(order="random"), "order 'random': must be one of drawn, longest-first, shortest-first, long-together"),
])
def test_bad_mixed_workloads_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ClosedLoopWorkload(**{"concurrency": 4, "isl": 1000, **kwargs})


@settings(max_examples=300, deadline=None)
@given(concurrency=st.integers(1, 40), isl=st.integers(50, 3000), osl=st.integers(1, 40),
       ratio=st.sampled_from([0.0, 0.3, 0.9]), share=st.sampled_from([0.0, 0.05, 0.5]),
       mnbt=st.integers(16, 4096), threshold=st.integers(0, 600), seed=st.integers(0, 5),
       asynchronous=st.booleans(), order=st.sampled_from(ORDERS))
def test_mixed_steps_alike_taken_at_once_are_the_steps_one_by_one(concurrency, isl, osl, ratio, share, mnbt,
                                                               threshold, seed, asynchronous, order):
    mix = ((share, 4 * isl),) if share else ()
    workload = ClosedLoopWorkload(concurrency, isl, osl, random_range_ratio=ratio, mix=mix, seed=seed, order=order)
    config = SchedulerConfig(mnbt, 16, threshold, True, 16, asynchronous)
    assert list(simulate(workload, config)) == list(simulate_each_step(workload, config))

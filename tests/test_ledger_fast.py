"""``run_ledger`` plans each distinct step once, reads its events as they are made into their
demand on the allocator's cache, skips the steps that cache serves and makes the events of the
others again where it replays them; every figure it gives must be the direct evaluation's: each
step planned, counted and its events listed on its own (``make_plan``, ``memory_report``,
``plan_events``), every step replayed through the allocator.  Checked on deployments that fit,
retry, fail mid-run, decode with speculative drafts, on expandable segments, with a what-if
logits buffer, on SGLang (its decode CUDA graph) and on random closed loops."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from indexer_lib.ledger import build, deployment
from indexer_lib.ledger.boot import boot_lines
from indexer_lib.ledger.deployment import Server, deployment_ledger
from indexer_lib.memory import make_plan, memory_report
from indexer_lib.memory.cached_fit import DemandCount, demand
from indexer_lib.memory.decode import decode_step_bytes
from indexer_lib.memory.events import emit_events, plan_events
from indexer_lib.workload import ClosedLoopWorkload
from indexer_lib.workload.lengths import length_bounds

GLM = dict(model="glm-5.3-flash", engine="vllm==0.33.0", max_model_len=1_048_576)
AGENTIC = ClosedLoopWorkload(8, 300_000, 32, shared_prefix=9000, num_prompts=40, random_range_ratio=0.9)
CASES = {  # name: (server, workload, free GiB)
    "agentic": (Server(**GLM), AGENTIC, None),
    "retries": (Server(**GLM), AGENTIC, 1.2),
    "fails mid-run, expandable": (Server(**GLM, expandable_segments=True), AGENTIC, 1.0),
    "speculative drafts": (Server(**GLM, speculative_tokens=2), ClosedLoopWorkload(8, 40000, 64, num_prompts=24,
                                                                                     random_range_ratio=0.8), None),
    # many decoding requests with drafts against short prompts: the decode logits set the high water
    "decode-heavy": (Server(**GLM, speculative_tokens=3), ClosedLoopWorkload(64, 2000, 256, num_prompts=200,
                                                                             random_range_ratio=0.5), None),
    # prompts of one length: many distinct steps of the same peak (the first one is the worst)
    "one length": (Server("deepseek-v4-flash", "vllm==0.33.0"), ClosedLoopWorkload(4, 30000, 16, num_prompts=12),
                   None),
    "fixed-width logits": (Server(**GLM, logits_buffer="fixed-width"), AGENTIC, None),
    "pooled logits": (Server(**GLM, logits_buffer="pooled"), AGENTIC, None),
    "sglang": (Server("glm-5", "sglang==0.5.23"), ClosedLoopWorkload(8, 60000, 32, num_prompts=24,
                                                                       random_range_ratio=0.5), None),
    "deepseek-v3.2": (Server("deepseek-v3.2", "vllm==0.33.0"), ClosedLoopWorkload(16, 20000, 16, num_prompts=48,
                                                                                  random_range_ratio=0.7), 2.0),
}


def _direct(steps, strategy, budget_bytes, settings, free, sizes) -> build.RunLedger:
    """The run's ledger with nothing kept between steps: each step planned, counted and its events
    listed on its own, every step replayed through the allocator."""
    first = worst = worst_decode = None
    alloc_steps, prefill, decode, chunks = [], 0, 0, 0
    for s in steps:
        events = []
        if s.batch is not None:
            plan = make_plan(s.batch, strategy, budget_bytes, settings)
            if sizes.logits_buffer is not None:
                plan = sizes.logits_buffer.apply(plan)
            report = memory_report(plan, topk_rows=sizes.topk_rows)
            events += plan_events(plan, report, "p", persistent=False)
            first = first or (plan, report)
            if worst is None or report.peak_transient > worst[1].peak_transient:
                worst = (plan, report, s.step)
            prefill, chunks = prefill + 1, chunks + plan.num_chunks
        tokens = s.num_decode * (1 + sizes.drafts)
        if tokens and first is not None:
            nbytes = decode_step_bytes(first[0].settings, tokens, sizes.max_model_len, sizes.drafts,
                                       sizes.decode_graph_bs)
            if nbytes is not None:
                if worst_decode is None or (nbytes, tokens) > worst_decode[:2]:
                    worst_decode = (nbytes, tokens, s.step)
                events += [("malloc", "decode", nbytes), ("free", "decode")] if nbytes else []
            decode += 1
        alloc_steps.append((s.step, events))
    lines = boot_lines(*first, sizes.max_model_len, sizes.worst_decode_tokens, sizes.budget_mb)
    lines += sizes.graph_lines
    lines.append(build.prefill_line(*worst))
    if worst_decode is not None:
        lines.append(build.decode_line(first[0], worst_decode[1], sizes.max_model_len, worst_decode[2], sizes.drafts,
                                       sizes.decode_graph_bs))
    ledger, run = build._with_allocator(lines, settings, free, alloc_steps, sizes.expandable,
                                        decode if worst_decode is None else 0)
    return build.RunLedger(ledger, run, prefill, decode, chunks)


def _held_to_direct(monkeypatch, server: Server, workload: ClosedLoopWorkload, free_gib) -> build.RunLedger:
    """The deployment's ledger, asserted equal to the direct evaluation of the same schedule."""
    runs = []

    def both(steps, *args):
        runs.append((build.run_ledger(steps, *args), _direct(steps, *args[:5])))
        return runs[-1][0]

    monkeypatch.setattr(deployment, "run_ledger", both)
    deployment_ledger(server, workload, free_gib=free_gib)
    ((fast, direct),) = runs
    assert fast == direct  # every line (bytes, sources, details), the allocator run, the counts
    return fast


@pytest.mark.parametrize("name", CASES)
def test_the_run_ledger_is_the_direct_evaluation(monkeypatch, name):
    run = _held_to_direct(monkeypatch, *CASES[name])
    assert run.prefill_steps > 0
    if name == "fails mid-run, expandable":
        assert run.allocator.failed and run.allocator.step is not None
    if name == "retries":
        assert run.allocator.retries > 0


@settings(max_examples=8, deadline=None)
@given(concurrency=st.integers(1, 12), isl=st.integers(2000, 120_000), ratio=st.sampled_from([0.0, 0.5, 0.95]),
       prefix=st.sampled_from([0, 4096]), free_gib=st.sampled_from([None, 1.0, 3.0]),
       expandable=st.booleans())
def test_random_closed_loops_are_the_direct_evaluation(concurrency, isl, ratio, prefix, free_gib, expandable):
    shortest = length_bounds(isl, ratio)[0]  # the shared prefix is part of every prompt
    workload = ClosedLoopWorkload(concurrency, isl, 16, shared_prefix=min(prefix, shortest // 2),
                                  num_prompts=2 * concurrency + 3, random_range_ratio=ratio)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _held_to_direct(monkeypatch, Server(**GLM, expandable_segments=expandable), workload, free_gib)


@pytest.mark.parametrize("name", ["agentic", "sglang", "deepseek-v3.2"])
def test_events_read_as_made_give_the_demand_of_their_list(monkeypatch, name):
    server, workload, _ = CASES[name]
    seen = []

    def keep(steps, strategy, budget_bytes, settings, free, sizes, progress=None):
        seen.append((steps, strategy, budget_bytes, settings, sizes.topk_rows))
        raise _Stop

    monkeypatch.setattr(deployment, "run_ledger", keep)
    with pytest.raises(_Stop):
        deployment_ledger(server, workload)
    ((steps, strategy, budget_bytes, settings, topk_rows),) = seen
    checked = 0
    for s in steps[::7]:
        if s.batch is None:
            continue
        plan = make_plan(s.batch, strategy, budget_bytes, settings)
        for persistent in (False, True):
            report = memory_report(plan, topk_rows=topk_rows)
            count, made = DemandCount(), []
            emit_events(plan, report, "k", lambda b, n: (count.malloc(b, n), made.append(("malloc", b, n))),
                        lambda b: (count.free(b), made.append(("free", b))), persistent=persistent)
            listed = plan_events(plan, report, "k", persistent=persistent)
            assert made == listed
            assert count.demand() == demand(listed) is not None
            checked += 1
    assert checked > 5


class _Stop(Exception):
    pass

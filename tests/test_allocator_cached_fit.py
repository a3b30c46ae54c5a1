"""Steps the caching allocator's cached blocks serve (``memory.cached_fit``) leave it as it was,
and the ledger's allocator run, which does not replay them, gives every number the plain replay
of every step gives: on deployments that fit, that retry, that fail mid-run, with expandable
segments on and off, and on a GPU that shares the host's memory (no retry)."""
from __future__ import annotations

import random

import pytest

from indexer_lib.ledger import allocator as ledger_allocator
from indexer_lib.ledger import build
from indexer_lib.ledger.deployment import Server, deployment_ledger
from indexer_lib.memory.allocator import MB, AllocatorOutOfMemory, CachingAllocatorModel, replay
from indexer_lib.memory.cached_fit import demand, served_from_cache
from indexer_lib.workload import ClosedLoopWorkload

SEED = 20261206


def _state(m: CachingAllocatorModel) -> tuple:
    """Everything a later replay or the ledger reads of the allocator."""
    layout = tuple(None if s is None else (s.small, s.size, s.expandable,
                                           tuple((b.offset, b.size, b.free, b.mapped) for b in s))
                   for s in m.segments)
    return m.allocated, m.reserved, m.peak_reserved, m.retries, layout


def _size(rng: random.Random, palette: list[int]) -> int:
    if palette and rng.random() < 0.5:
        return rng.choice(palette)
    size = rng.randint(1, MB) if rng.random() < 0.4 else int(MB * 512 ** rng.random())
    palette.append(size)
    return size


def _step(rng: random.Random, palette: list[int], tag: int) -> list[tuple]:
    """A step's events, every block freed by its end, mostly the newest first."""
    events, live = [], []
    for k in range(rng.randint(2, 40)):
        if live and rng.random() < 0.45:
            j = len(live) - 1 if rng.random() < 0.6 else rng.randrange(len(live))
            events.append(("free", live.pop(j)))
        events.append(("malloc", (tag, k), _size(rng, palette)))
        live.append((tag, k))
    events += [("free", key) for key in reversed(live)]
    return events


def test_a_step_served_from_the_cache_leaves_the_allocator_as_it_was():
    served = replayed = 0
    for i in range(240):
        rng = random.Random(SEED + i)
        m = CachingAllocatorModel(expandable_segments=i % 3 == 0,
                                  limit=rng.choice([None, rng.randrange(256 * MB, 4096 * MB, 512)]))
        palette: list[int] = []
        held: dict = {}
        try:  # blocks held through the run, and cached free blocks of the sizes its steps ask for
            replay([("malloc", ("held", k), _size(rng, palette)) for k in range(rng.randint(0, 4))], m, held)
            for tag in range(rng.randint(0, 6)):
                replay(_step(rng, palette, tag), m, {})
        except AllocatorOutOfMemory:
            continue
        for tag in range(100, 120):
            events = _step(rng, palette, tag)
            need = demand(events)
            assert need is not None
            fits = served_from_cache(m, need)
            before = _state(m)
            try:
                replay(events, m, {})
            except AllocatorOutOfMemory:
                assert not fits
                break
            if fits:
                assert _state(m) == before, (i, tag)
                served += 1
            replayed += 1
    assert served > replayed // 4 and replayed - served > 50  # both kinds met


def test_events_the_test_does_not_cover_have_no_demand():
    assert demand([("malloc", "a", 10)]) is None  # left allocated
    assert demand([("malloc", "a", 10), ("malloc", "a", 10), ("free", "a")]) is None
    assert demand([("free", "a")]) is None
    need = demand([("malloc", "a", 10), ("malloc", "b", 3 * MB), ("free", "a"), ("free", "b")])
    assert (need.small.most_live, need.small.largest, need.large.most_live, need.large.largest) == (1, 512, 1, 3 * MB)


def test_max_split_size_is_never_served_from_the_cache():
    m = CachingAllocatorModel(max_split_size=20 * MB)
    replay([("malloc", "a", 100 * MB), ("free", "a")], m)
    assert not served_from_cache(m, demand([("malloc", "b", MB + 1), ("free", "b")]))


AGENTIC = ClosedLoopWorkload(8, 300_000, 32, shared_prefix=9000, num_prompts=40, random_range_ratio=0.9)
GLM = dict(model="glm-5.3-flash", engine="vllm==0.33.0", max_model_len=1_048_576)
GB10 = dict(model="glm-5.3-flash", engine="vllm==0.33.0", gpu="gb10", max_model_len=262144)
CASES = {  # name: (server, workload, free GiB, the plain run fails, it retried)
    "agentic": (Server(**GLM), AGENTIC, None, False, False),
    "agentic expandable": (Server(**GLM, expandable_segments=True), AGENTIC, None, False, False),
    "retries": (Server(**GLM), AGENTIC, 1.2, False, True),
    "fails mid-run, expandable": (Server(**GLM, expandable_segments=True), AGENTIC, 1.0, True, True),
    "gb10, no retry": (Server(**GB10), ClosedLoopWorkload(4, 120000, 64, num_prompts=16, random_range_ratio=0.9),
                       None, True, False),
    "gb10 expandable": (Server(**GB10, tp=2, gpu_memory_utilization=0.85, max_num_seqs=2, expandable_segments=True),
                        ClosedLoopWorkload(1, 231000, 64), None, False, False),
    "sglang": (Server("glm-5", "sglang==0.5.23"), ClosedLoopWorkload(8, 60000, 32, num_prompts=24,
                                                                       random_range_ratio=0.5), None, False, True),
}


@pytest.mark.parametrize("name", CASES)
def test_the_run_without_served_steps_is_the_plain_replay(monkeypatch, name):
    server, workload, free_gib, fails, retried = CASES[name]
    runs, served = [], []

    def counted(model, need):
        fits = served_from_cache(model, need)
        served.append(fits)
        return fits

    def both(boot, steps, *args, **kwargs):
        runs.append((ledger_allocator.run_allocator(boot, steps, *args, **kwargs),
                     ledger_allocator.run_allocator(boot, [(s, e) for s, e, _ in steps], *args, **kwargs)))
        return runs[-1][0]

    monkeypatch.setattr(ledger_allocator, "served_from_cache", counted)
    monkeypatch.setattr(build, "run_allocator", both)
    deployment_ledger(server, workload, free_gib=free_gib)
    ((fast, plain),) = runs
    assert fast == plain
    assert plain.failed == fails and (plain.retries > 0) == retried
    assert any(served) and (fails or not all(served))

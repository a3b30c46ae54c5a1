"""The caching-allocator model, however it is sped up, replays random traces exactly as the
plain model did: the same (allocated, reserved) curve, the same block for every request, the same
segments and blocks at every ``empty_cache`` and at the end, the same retries, peaks and OOMs.

``tests/data/allocator_traces.json`` holds a fingerprint per trace, recorded from the model before
it was sped up (the commit is in the file).  The traces are not stored: ``traces()`` makes them
again from ``SEED``.  To record the fixture again (only for a deliberate change of a rule):
``python tests/test_allocator_traces.py <commit>``.
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

import pytest

from indexer_lib.memory.allocator import MB, AllocatorOutOfMemory, CachingAllocatorModel, replay

FIXTURE = Path(__file__).resolve().parent / "data" / "allocator_traces.json"
SEED = 20260105
TRACES = 400
GiB = 1024 * MB


def _size(rng: random.Random, palette: list[int], largest: int) -> int:
    """Small (< 1 MiB, a few at the edges), medium (1 to 10 MiB) or large (log-uniform up to
    ``largest``) bytes; often one already asked for, so cached blocks are reused and ties occur."""
    if palette and rng.random() < 0.4:
        return rng.choice(palette)
    kind = rng.random()
    if kind < 0.4:
        size = rng.choice([0, 1, 512, 513, MB - 512, MB, MB + 1]) if rng.random() < 0.1 else rng.randint(1, MB)
    elif kind < 0.65:
        size = rng.randint(MB + 1, 10 * MB + MB // 2)
    else:
        size = int(10 * MB * (largest / (10 * MB)) ** rng.random())
    palette.append(size)
    return size


def _config(rng: random.Random, i: int, largest: int) -> dict:
    """Every fourth trace with expandable segments, two in three of the others with a
    max_split_size; a limit on about half of each kind."""
    config = {}
    if i % 4 == 3:
        config["expandable_segments"] = True
    elif i % 3 >= 1:
        config["max_split_size"] = rng.choice([2 * MB, 20 * MB, 21 * MB, 64 * MB, 200 * MB, GiB])
    if rng.random() < 0.5:  # from a few times the largest request down to tight
        config["limit"] = int(largest * rng.uniform(0.6, 3)) + rng.randrange(0, 64 * MB, 512)
    return config


def trace(i: int) -> tuple[dict, list[list[tuple]]]:
    """Trace ``i``: the model's settings and its events in parts, ``empty_cache`` between parts."""
    rng = random.Random(SEED * 1000 + i)
    largest = rng.choice([64 * MB, 512 * MB, 2 * GiB, 4 * GiB])
    config = _config(rng, i, largest)
    palette: list[int] = []
    live: list[int] = []
    parts: list[list[tuple]] = [[] for _ in range(rng.choice([1, 1, 2, 3]))]
    held = rng.choice([2, 4, 8, 16, 32])  # about as many live blocks on average
    key = 0
    for part in parts:
        for _ in range(rng.randint(80, 300)):
            if live and rng.random() < len(live) / (len(live) + held):
                # mostly the newest blocks first, as tensors of a step go
                j = len(live) - 1 - min(int(rng.expovariate(0.5)), len(live) - 1) if rng.random() < 0.6 \
                    else rng.randrange(len(live))
                part.append(("free", live.pop(j)))
            else:
                part.append(("malloc", key, _size(rng, palette, largest)))
                live.append(key)
                key += 1
    return config, parts


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()[:16]


def _layout(m: CachingAllocatorModel) -> list:
    return [None if s is None else [s.small, s.size, s.expandable, [[b.offset, b.size, b.free, b.mapped]
                                                                    for b in s.blocks]]
            for s in m.segments]


def fingerprint(config: dict, parts: list[list[tuple]]) -> dict:
    """Replay the trace one event at a time; an event that raises the OOM is skipped (and so is
    the free of its key), the rest go on."""
    m = CachingAllocatorModel(**config)
    handles: dict = {}
    curve, placed, layouts, ooms, failed = [], [], [], [], set()
    n = 0
    for k, part in enumerate(parts):
        if k:
            m.empty_cache()
            curve.append((m.allocated, m.reserved))
        for event in part:
            if event[0] == "free" and event[1] in failed:
                continue
            try:
                curve += replay([event], m, handles)
            except AllocatorOutOfMemory as e:
                failed.add(event[1])
                ooms.append([n, e.nbytes, e.allocated, e.reserved, e.limit, e.fragmented])
            else:
                if event[0] == "malloc":
                    b = m.live[handles[event[1]]]
                    placed.append((b.segment, b.offset, b.size))
            n += 1
        layouts.append(_layout(m))
    return {"events": n, "curve": _digest(curve), "placed": _digest(placed), "layouts": _digest(layouts),
            "ooms": len(ooms), "first_oom": ooms[0] if ooms else None, "all_ooms": _digest(ooms),
            "retries": m.retries, "allocated": m.allocated, "reserved": m.reserved,
            "peak_allocated": m.peak_allocated, "peak_reserved": m.peak_reserved,
            "segments": sum(s is not None for s in m.segments)}


def _recorded() -> dict:
    return json.loads(FIXTURE.read_text())


def test_the_fixture_covers_every_setting_retries_and_ooms():
    fps = _recorded()["traces"]
    assert len(fps) == TRACES
    configs = [trace(i)[0] for i in range(TRACES)]
    for kind in ("expandable_segments", "max_split_size", None):
        limited = [fp for c, fp in zip(configs, fps) if "limit" in c and (kind in c or kind is None and len(c) == 1)]
        assert len(limited) >= 30
        assert sum(fp["retries"] > fp["ooms"] for fp in limited) >= 10  # each OOM retried once; others fitted
        assert sum(fp["ooms"] > 0 for fp in limited) >= 10
        fragmented = [fp["first_oom"][-1] for fp in limited if fp["ooms"]]
        assert any(fragmented) and not all(fragmented)


@pytest.mark.parametrize("chunk", range(10))
def test_the_model_replays_every_trace_as_recorded(chunk):
    fps = _recorded()["traces"]
    for i in range(chunk, TRACES, 10):
        config, parts = trace(i)
        assert fingerprint(config, parts) == fps[i], f"trace {i} ({config})"


if __name__ == "__main__":
    fps = [fingerprint(*trace(i)) for i in range(TRACES)]
    FIXTURE.write_text(json.dumps({"seed": SEED, "recorded_at": sys.argv[1], "traces": fps},
                                  separators=(",", ":")) + "\n")

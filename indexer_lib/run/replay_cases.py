"""The steps every replayable release is checked on (tests/test_replay.py, scripts/bench_replay.py):
the field's cases, one full-scale long-context step, and random steps, as plain data."""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..presets import get_model


@dataclass(frozen=True)
class ReplayCase:
    name: str
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    budget_mb: int | None = None  # None: the release's own default
    max_num_batched_tokens: int = 8192  # the engine's top-k buffer rows (the step must fit)


def field_cases(model: str = "glm-5") -> list[ReplayCase]:
    """The field's steps and one step at the model's full context."""
    max_len = get_model(model).max_model_len
    cases = [ReplayCase("32 x (9,984 + 256), the GLM-5 OOM step", (256,) * 32, (10240,) * 32),
             ReplayCase("2 x (111K prefix + 3.5K)", (3584,) * 2, (111 * 1024 + 3584,) * 2)]
    for k in range(1, 9):
        cases.append(ReplayCase(f"64K prompt in 8K steps, step {k}", (8192,), (8192 * k,)))
    for k in (1, 2):
        cases.append(ReplayCase(f"64K prompt in 32K steps, step {k}", (32768,), (32768 * k,),
                                max_num_batched_tokens=32768))
    cases.append(ReplayCase(f"long context: last 8K of a {max_len:,}-token prompt", (8192,), (max_len,)))
    return cases


def random_cases(n: int = 50, seed: int = 0, model: str = "glm-5") -> list[ReplayCase]:
    """Steps of 1-8 requests, each a chunk of a prompt up to the model's context, at most 8,192
    rows in all, with budgets from 16 MiB to 1 GiB (the release's default for every fifth)."""
    rng = random.Random(seed)
    max_len = get_model(model).max_model_len
    cases = []
    for i in range(n):
        requests = rng.randint(1, 8)
        rows_left = 8192
        q, s = [], []
        for r in range(requests):
            query = rng.randint(1, max(1, rows_left - (requests - r - 1)))
            query = min(query, rng.choice((query, 256, 2048)))
            rows_left -= query
            context = rng.choice((0, rng.randint(0, max_len - query)))
            q.append(query)
            s.append(context + query)
        budget = None if i % 5 == 0 else rng.choice((16, 64, 128, 256, 512, 1024))
        cases.append(ReplayCase(f"random {i}", tuple(q), tuple(s), budget))
    return cases

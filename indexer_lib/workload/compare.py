"""The built-in scheduler simulator next to vLLM's own scheduler, step by step.

Both sources yield ``ScheduledStep`` records; a step is compared on its index,
its decode count, the ids of its prefill requests and their (context, query)
rows.  Used by the notebooks and the CI test that holds the simulator to vLLM.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from .simulator import ClosedLoopWorkload, SchedulerConfig
from .sources import scheduled_steps


def step_records(steps) -> list[tuple]:
    """One comparable record per step: (step, decodes, request ids, prefill rows)."""
    return [(s.step, s.num_decode, s.request_ids,
             tuple((r.context_len, r.query_len) for r in s.batch.requests) if s.batch else ())
            for s in steps]


def first_difference(a: list, b: list) -> int | None:
    """Index of the first record where two schedules differ (None: identical)."""
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b) or a[i] != b[i]:
            return i
    return None


def step_shape(reqs) -> tuple[int, int]:
    """(M, N) of a step's (context, query) requests: query rows and KV tokens."""
    return sum(q for _, q in reqs), sum(c + q for c, q in reqs)


def worst_shape(records) -> tuple[int, int, int]:
    """(M, N, M*N) of the step with the largest M*N."""
    best = (0, 0, 0)
    for _, _, _, reqs in records:
        m, n = step_shape(reqs)
        if m * n > best[2]:
            best = (m, n, m * n)
    return best


@dataclass(frozen=True)
class SourceComparison:
    simulator: list[tuple]
    vllm: list[tuple]
    simulator_s: float  # time to produce the whole schedule
    vllm_s: float

    @property
    def first_difference(self) -> int | None:
        return first_difference(self.simulator, self.vllm)

    def per_step(self):
        """A tidy table: one row per step and source, with M, N and M*N."""
        import pandas as pd

        rows = []
        for source, records in (("simulator", self.simulator), ("vllm", self.vllm)):
            for step, decode, _, reqs in records:
                m, n = step_shape(reqs)
                rows.append({"source": source, "step": step, "prefill_requests": len(reqs),
                             "decode": decode, "rows": m, "kv_tokens": n, "m_times_n": m * n})
        return pd.DataFrame(rows)

    def summary(self):
        import pandas as pd

        rows = []
        for source, records, seconds in (("simulator", self.simulator, self.simulator_s),
                                         ("vllm", self.vllm, self.vllm_s)):
            m, n, mn = worst_shape(records)
            rows.append({"source": source, "steps": len(records), "worst_rows": m,
                         "worst_kv_tokens": n, "worst_m_times_n": mn,
                         "schedule_seconds": round(seconds, 3)})
        return pd.DataFrame(rows)


def compare_sources(workload: ClosedLoopWorkload, config: SchedulerConfig) -> SourceComparison:
    """Run both sources on one configuration (needs vLLM installed: ``VllmUnavailable`` otherwise)."""
    start = time.perf_counter()
    real = step_records(scheduled_steps(workload, config, source="vllm"))
    vllm_s = time.perf_counter() - start
    start = time.perf_counter()
    ours = step_records(scheduled_steps(workload, config, source="simulator"))
    return SourceComparison(ours, real, time.perf_counter() - start, vllm_s)
